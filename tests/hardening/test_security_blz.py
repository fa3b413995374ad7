"""blz security: aliases never escape the data root, an agent cannot read local files through
`source-add` + `find`, and no output shows $HOME, the data root or URL credentials.

Policy (docs/reliability.md): over MCP, `source-add` takes registry aliases and http(s) URLs; local
files and file:// URLs only inside the folders named by BLZ_MCP_FILE_ROOTS (none by default), checked
after resolving `..` and symlinks, and again on the opened descriptor; http(s) only to public
internet addresses unless BLZ_MCP_ALLOW_HOSTS lists the host (checked on every connection's resolved
address). The CLI user may add any local file and fetch from local servers.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cairn_servers.blz import sources
from cairn_servers.blz.store import Store
from cairn_servers.core.errors import InvalidInput

pytestmark = [pytest.mark.filterwarnings("ignore:.*(removed|deprecated) as of 2026"), pytest.mark.timeout(120)]

SECRET = "-----BEGIN OPENSSH PRIVATE KEY----- hunter2-secret-key-material"
DOC = b"# Allowed\n\n## Part\n\nallowed docs text\n"

# Every way a name could become a path outside sources/<alias>/.
BAD_ALIASES = ["../x", "..", ".", "../../etc", "/abs", "/etc/passwd", "a/b", "a\\b", "..\\x", "C:\\x",
               "aux.txt", "CON", "con", "nul", "Lpt1", "com9", "-rf", "", " ", "a" * 65, "a\u0000b",
               "x\n../y", "~", "~root", "%2e%2e", "a:b", "caf\u00e9", "\u2024\u2024"]


@pytest.fixture
def cred_server() -> Iterator[tuple[int, list[str]]]:
    """An http server that records Authorization headers and serves DOC."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            seen.append(self.headers.get("Authorization", ""))
            self.send_response(200)
            self.send_header("Content-Length", str(len(DOC)))
            self.end_headers()
            self.wfile.write(DOC)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield httpd.server_address[1], seen
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize("alias", BAD_ALIASES)
def test_bad_alias_never_becomes_a_path(alias: str, tmp_path: Path) -> None:
    doc = tmp_path / "llms.txt"
    doc.write_bytes(DOC)
    root = tmp_path / "data"
    store = Store(root)
    try:
        with pytest.raises(InvalidInput, match="Invalid alias"):
            sources.add(store, alias, str(doc))
        assert store.sources() == []
    finally:
        store.close()
    assert not (root / "sources").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "llms.txt"]


def test_bad_aliases_on_the_command_line(tmp_path: Path) -> None:
    doc = tmp_path / "llms.txt"
    doc.write_bytes(DOC)
    env = {**os.environ, "BLZ_DATA_DIR": str(tmp_path / "data")}
    for alias in [a for a in BAD_ALIASES if "\u0000" not in a and not a.startswith("-")]:
        res = subprocess.run([sys.executable, "-m", "cairn_servers.blz.cli", "add", alias, str(doc)], env=env,
                             capture_output=True, text=True, timeout=30)
        assert res.returncode == 2, (alias, res.stderr)
        assert res.stderr.startswith("blz: error: Invalid alias"), res.stderr
    assert not (tmp_path / "data" / "sources").exists()


def test_cli_refuses_other_url_schemes(tmp_path: Path) -> None:
    env = {**os.environ, "BLZ_DATA_DIR": str(tmp_path / "data")}
    for url, words in [("ftp://example.com/llms.txt", "Unsupported URL scheme 'ftp'"),
                       ("data:text/plain,hello", "Unsupported URL scheme 'data'"),
                       ("javascript:alert(1)", "Unsupported URL scheme 'javascript'"),
                       ("gopher://example.com/1", "Unsupported URL scheme 'gopher'"),
                       ("file://evil.example/etc/passwd", "only local files (file:///path)"),
                       ("ssh://git@example.com/x", "Unsupported URL scheme 'ssh'")]:
        res = subprocess.run([sys.executable, "-m", "cairn_servers.blz.cli", "add", "x", url], env=env,
                             capture_output=True, text=True, timeout=30, cwd=tmp_path)
        assert res.returncode == 2, (url, res.stderr)
        assert words in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_cli_may_add_any_local_file_even_without_a_dot(tmp_path: Path) -> None:
    """The CLI user's own files are fair game; an extension-less file is read as given, not as a folder
    (this used to crash with NotADirectoryError)."""
    plain = tmp_path / "NOTES"
    plain.write_bytes(DOC)
    env = {**os.environ, "BLZ_DATA_DIR": str(tmp_path / "data")}
    res = subprocess.run([sys.executable, "-m", "cairn_servers.blz.cli", "add", "notes", str(plain), "--json"],
                         env=env, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["lines"] == DOC.count(b"\n")
    nodir = subprocess.run([sys.executable, "-m", "cairn_servers.blz.cli", "add", "x", str(plain / "llms.txt")],
                           env=env, capture_output=True, text=True, timeout=30)
    assert nodir.returncode == 3 and "Traceback" not in nodir.stderr, nodir.stderr


def test_cli_output_hides_home_and_credentials(tmp_path: Path, cred_server: tuple[int, list[str]]) -> None:
    port, auth = cred_server
    home = tmp_path / "home"
    (home / "docs").mkdir(parents=True)
    (home / "docs" / "llms.txt").write_bytes(DOC)
    env = {**os.environ, "HOME": str(home), "BLZ_DATA_DIR": str(home / ".local" / "share" / "blz")}

    def blz(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cairn_servers.blz.cli", *args], env=env, capture_output=True,
                              text=True, timeout=30)

    outputs = [blz("add", "mine", str(home / "docs" / "llms.txt"), "--json"),
               blz("add", "web", f"http://alice:s3cr3t-token@127.0.0.1:{port}/llms.txt", "--exact", "--json"),
               blz("list", "--json"), blz("list", "--text"), blz("search", "docs", "--json"),
               blz("inspect", "mine", "--json"), blz("history", "--json"), blz("update", "--all", "--json"),
               blz("add", "gone", str(home / "docs" / "missing.txt")),
               blz("add", "bad", f"http://bob:0th3r-s3cret@127.0.0.1:{port}/x", "--max-bytes", "3")]
    assert [o.returncode for o in outputs] == [0, 0, 0, 0, 0, 0, 0, 0, 3, 9], [o.stderr for o in outputs]
    assert auth and auth[0].startswith("Basic ")  # the credentials were used, just never shown
    for o in outputs:
        text = o.stdout + o.stderr
        assert str(home) not in text and "s3cr3t-token" not in text and "0th3r-s3cret" not in text, text
    assert "file://~/docs/llms.txt" in outputs[0].stdout and "http://***@127.0.0.1" in outputs[1].stdout


async def _mcp_session(env: dict[str, str], calls: list[tuple[str, dict[str, Any]]]) -> list[tuple[bool, str]]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
    from mcp.shared.exceptions import MCPError

    params = StdioServerParameters(command=sys.executable, args=["-m", "cairn_servers.blz.cli", "mcp"], env=env)
    out: list[tuple[bool, str]] = []
    async with Client(params, cache=None) as client:
        for name, args in calls:
            try:
                if name == "resource":
                    read = await client.read_resource(args["uri"])
                    out.append((False, read.contents[0].text))  # type: ignore[union-attr]
                    continue
                called = await client.call_tool(name, args)
                out.append((bool(called.is_error), called.content[0].text))  # type: ignore[union-attr]
            except MCPError as exc:
                out.append((True, str(exc)))
    return out


def test_agent_cannot_read_local_files_through_source_add(tmp_path: Path, cred_server: tuple[int, list[str]]) -> None:
    port, _ = cred_server
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    key = home / ".ssh" / "id_rsa"
    key.write_text(SECRET + "\n")
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "llms.txt").write_bytes(DOC)
    (allowed / "evil.txt").symlink_to(key)  # a symlink inside the root pointing out of it
    (allowed / "sub").symlink_to(home / ".ssh", target_is_directory=True)
    data = tmp_path / "data"
    env = {"HOME": str(home), "BLZ_DATA_DIR": str(data), "BLZ_MCP_FILE_ROOTS": str(allowed),
           "BLZ_MCP_ALLOW_HOSTS": "127.0.0.1", "PATH": os.environ.get("PATH", "")}

    refused = [str(key), key.as_uri(), "~/.ssh/id_rsa", "/etc/passwd", "file:///etc/passwd",
               "file://localhost/etc/passwd", f"{allowed}/../home/.ssh/id_rsa", str(allowed / "evil.txt"),
               str(allowed / "sub" / "id_rsa"), (allowed / "sub").as_uri(), "/etc", "../../../../etc/passwd",
               str(tmp_path), "file://evil.example/etc/passwd", "ftp://example.com/llms.txt",
               "data:text/plain,hi", "javascript:alert(1)", "gopher://example.com/1"]
    calls: list[tuple[str, dict[str, Any]]] = [("source-add", {"alias": f"s{i}", "url": u}) for i, u in enumerate(refused)]
    calls += [("source-add", {"alias": a, "url": str(allowed / "llms.txt")}) for a in BAD_ALIASES]
    calls += [("find", {"snippets": ["../../etc/passwd:1-3"]}), ("find", {"snippets": ["s0:1-3"]}),
              ("run-command", {"command": "inspect", "source": "../../etc"}),
              ("resource", {"uri": "blz://sources/..%2F..%2Fetc"}),
              ("list-sources", {})]
    n_refused = len(calls)
    calls += [("source-add", {"alias": "ok", "url": str(allowed / "llms.txt")}),
              ("source-add", {"alias": "web", "url": f"http://alice:s3cr3t-token@127.0.0.1:{port}/llms.txt"}),
              ("find", {"query": "allowed docs"}), ("list-sources", {}),
              ("run-command", {"command": "history"}), ("run-command", {"command": "validate"})]
    results = asyncio.run(asyncio.wait_for(_mcp_session(env, calls), 90))

    for (name, args), (is_error, text) in zip(calls[:len(refused)], results):
        assert is_error, (args, text)
        assert ("Local files cannot be added over MCP" in text or "Unsupported" in text), (args, text)
    for (name, args), (is_error, text) in zip(calls[len(refused):len(refused) + len(BAD_ALIASES)],
                                              results[len(refused):]):
        assert is_error and "Invalid alias" in text, (args, text)
    tail = results[len(refused) + len(BAD_ALIASES):n_refused]
    assert tail[0][0] and "Invalid alias" in tail[0][1]
    assert tail[1][0] and "No source named 's0'" in tail[1][1]
    assert tail[2][0] and "Invalid alias '../../etc'" in tail[2][1]  # checked before the parser sees it
    assert tail[3][0]
    assert json.loads(tail[4][1])["sources"] and all(s["kind"] == "registry" for s in json.loads(tail[4][1])["sources"])

    ok = results[n_refused:]
    assert not any(e for e, _ in ok), ok
    assert json.loads(ok[2][1])["hits"][0]["alias"] == "ok"
    installed = [s["alias"] for s in json.loads(ok[3][1])["sources"] if s["kind"] == "installed"]
    assert installed == ["ok", "web"]
    assert sorted(p.name for p in (data / "sources").iterdir()) == ["ok", "web"]

    everything = "\n".join(text for _, text in results)
    assert "hunter2" not in everything and "root:x:0:0" not in everything  # nothing was read
    assert str(home) not in everything and str(data) not in everything and str(allowed) not in everything
    assert "s3cr3t-token" not in everything and "http://***@127.0.0.1" in everything


def test_agent_cannot_make_blz_fetch_loopback_private_or_metadata_addresses(
        tmp_path: Path, cred_server: tuple[int, list[str]]) -> None:
    """Server-side request forgery through `source-add` + `find`: refused over MCP (before any
    connection: the loopback server below sees nothing) unless BLZ_MCP_ALLOW_HOSTS lists the host;
    the command line, typed by the user, still adds from local servers. Only loopback is connected to:
    the non-loopback addresses are refused as literals, never resolved or connected
    (tests/blz/test_guard.py proves "before connecting" with a record of every socket connect)."""
    port, seen = cred_server
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "passwd.txt").symlink_to("/etc/passwd")
    env = {"HOME": str(tmp_path / "home"), "BLZ_DATA_DIR": str(tmp_path / "data"), "BLZ_MCP_FILE_ROOTS": str(allowed),
           "PATH": os.environ.get("PATH", "")}
    hosts = ["127.0.0.1", "localhost", "0x7f000001", "2130706433", "127.1", "0", "[::1]", "[::ffff:127.0.0.1]"]
    urls = [f"http://{h}:{port}/llms.txt" for h in hosts] + [f"https://127.0.0.1:{port}/docs/",
                                                              "http://169.254.169.254/latest/meta-data/",
                                                              "http://[fd00::1]/llms.txt", "http://10.0.0.1/llms.txt",
                                                              "http://[64:ff9b::a9fe:a9fe]/"]
    calls: list[tuple[str, dict[str, Any]]] = [("source-add", {"alias": f"s{i}", "url": u}) for i, u in enumerate(urls)]
    calls += [("source-add", {"alias": "pw", "url": str(allowed / "passwd.txt")}),
              ("run-command", {"command": "inspect", "source": "-h"}),
              ("run-command", {"command": "history", "source": "--help"}),
              ("run-command", {"command": "schema", "source": "-h"}),
              ("find", {"query": "allowed docs"})]
    results = asyncio.run(asyncio.wait_for(_mcp_session(env, calls), 90))
    for url, (is_error, text) in zip(urls, results):
        assert is_error and text.startswith("Refused to connect to ") and "BLZ_MCP_ALLOW_HOSTS" in text, (url, text)
    pw, inspect, history, schema, find = results[len(urls):]
    assert pw == (True, "Local files cannot be added over MCP: this path is outside the folders allowed by "
                        "BLZ_MCP_FILE_ROOTS. Add it from the command line (blz add ALIAS PATH), or start `blz mcp` "
                        "with BLZ_MCP_FILE_ROOTS=/folder/with/docs.")  # it named /etc/passwd
    assert inspect[0] and inspect[1].startswith("Invalid alias '-h'") and "usage:" not in inspect[1]
    assert history[0] and history[1].startswith("Invalid alias '--help'") and "usage:" not in history[1]
    assert schema[0] and schema[1].startswith("No schema named '-h'")
    assert not find[0] and json.loads(find[1])["hits"] == []
    assert seen == [] and not (tmp_path / "data" / "sources").exists()

    cli = subprocess.run([sys.executable, "-m", "cairn_servers.blz.cli", "add", "local", f"http://127.0.0.1:{port}/llms.txt",
                          "--exact", "--json"], env=env, capture_output=True, text=True, timeout=30)
    assert cli.returncode == 0 and json.loads(cli.stdout)["lines"] == DOC.count(b"\n"), cli.stderr
    assert len(seen) == 1

    env["BLZ_MCP_ALLOW_HOSTS"] = "127.0.0.1"
    added = asyncio.run(asyncio.wait_for(_mcp_session(env, [
        ("source-add", {"alias": "mine", "url": f"http://0x7f000001:{port}/llms.txt"}),
        ("find", {"query": "allowed docs", "source": "mine"})]), 90))
    assert not added[0][0] and json.loads(added[1][1])["hits"][0]["alias"] == "mine", added
