"""What an agent may make `blz mcp` read: the guard on MCP `source-add` (cairn_servers.core.guard).

Network: non-public addresses are refused on the resolved address of every connection, redirect
hops included, unless BLZ_MCP_ALLOW_HOSTS lists them; proxy variables never stand in for the guard.
Files: only what the opened descriptor proves is inside BLZ_MCP_FILE_ROOTS is read, whatever is
swapped in between a check and the open. run-command's `source` is never an option.

Every test here connects only to loopback: the ``connects`` fixture records every socket connect in
this process and refuses any to a non-loopback address, so a guard failure shows up as a wrong
error, never as traffic leaving the machine; refused addresses are asserted never to be connected to.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn_servers.blz import sources
from cairn_servers.blz.store import Store
from cairn_servers.blz.tools import build_server
from cairn_servers.core import fetch as fetching
from cairn_servers.core.errors import InvalidInput, NotFound

from .conftest import DocServer

DOC = b"# Allowed\n\n## Part\n\nallowed docs text\n"
SECRET = b"# Secret\n\nhunter2-private-key-material\n"
REFUSED_FILE = ("Local files cannot be added over MCP: this path is outside the folders allowed by BLZ_MCP_FILE_ROOTS. "
                "Add it from the command line (blz add ALIAS PATH), or start `blz mcp` with "
                "BLZ_MCP_FILE_ROOTS=/folder/with/docs.")


def _loopback(address: Any) -> bool:
    try:
        return ipaddress.ip_address(str(address[0]).split("%")[0]).is_loopback
    except (ValueError, TypeError, IndexError):
        return False


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every address a socket of this process connects to while the test runs."""
    seen: list[Any] = []
    real_connect = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> None:
        seen.append(address)
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _loopback(address):
            raise ConnectionRefusedError(f"test: no traffic may leave this machine ({address})")
        real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    return seen


@pytest.fixture
def agent_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The environment `blz mcp` starts with, cleared of the user's settings and proxies."""
    for var in ("BLZ_MCP_ALLOW_HOSTS", "BLZ_MCP_NETWORK", "BLZ_MCP_FILE_ROOTS", "HTTP_PROXY", "HTTPS_PROXY",
                "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def _guarded(url: str) -> fetching.FetchResult:
    return fetching.fetch(url, guard=sources.agent_guard(), timeout=10)


# -- network ---------------------------------------------------------------------------------------

LOOPBACK_SPELLINGS = ["127.0.0.1", "localhost", "LOCALHOST.", "0x7f000001", "2130706433", "127.1", "0", "0.0.0.0",
                      "[::1]", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::]"]
# Never connected to (the connects fixture would refuse them anyway): the guard says no first.
ELSEWHERE = {"169.254.169.254/latest/meta-data/": "link-local", "10.0.0.1": "private", "172.16.0.1": "private",
             "192.168.1.1": "private", "100.64.0.1": "non-public", "192.0.2.1": "private", "[fd00::1]": "unique-local",
             "[fe80::1]": "link-local", "[fec0::1]": "site-local", "224.0.0.1": "multicast", "[ff02::1]": "multicast",
             "240.0.0.1": "reserved", "255.255.255.255": "reserved", "[::ffff:169.254.169.254]": "link-local",
             "[2002:a9fe:a9fe::]": "link-local", "[64:ff9b::a9fe:a9fe]": "link-local", "0xa9fea9fe": "link-local"}


def test_non_public_addresses_are_refused_before_connecting(agent_env: pytest.MonkeyPatch, doc_server: DocServer,
                                                           connects: list[Any], store: Store) -> None:
    doc_server.files["/llms.txt"] = DOC
    port = doc_server.port
    for host in LOOPBACK_SPELLINGS:
        for scheme in ("http", "https"):
            with pytest.raises(InvalidInput, match=r"^Refused to connect to .*(is|resolves to) an? "
                                                   r"(loopback|unspecified) address.*BLZ_MCP_ALLOW_HOSTS") as err:
                _guarded(f"{scheme}://{host}:{port}/llms.txt")
            assert "blz add ALIAS URL" in err.value.message
    for where, kind in ELSEWHERE.items():
        with pytest.raises(InvalidInput, match=f"is an? {kind} address") as err:
            _guarded(f"http://{where}")
    assert "0xa9fea9fe (169.254.169.254)" in err.value.message  # an odd spelling is shown as what it is
    with pytest.raises(InvalidInput, match="Refused to connect"):
        sources.add(store, "meta", "http://169.254.169.254/latest/meta-data/llms.txt", guard=sources.agent_guard())
    assert connects == [] and doc_server.requests == [] and store.sources() == []

    # The command-line user, who typed the URL, keeps reaching local servers.
    assert sources.add(store, "local", doc_server.url("/llms.txt"))["lines"] == DOC.count(b"\n")
    assert connects and set(connects) == {("127.0.0.1", port)}


def test_allowed_hosts_names_ips_and_cidrs(agent_env: pytest.MonkeyPatch, doc_server: DocServer,
                                           connects: list[Any]) -> None:
    doc_server.files["/llms.txt"] = DOC
    port = doc_server.port
    agent_env.setenv("BLZ_MCP_ALLOW_HOSTS", "docs.internal, 127.0.0.1")
    assert _guarded(f"http://127.0.0.1:{port}/llms.txt").body == DOC
    assert _guarded(f"http://0x7f000001:{port}/llms.txt").body == DOC  # the address is what counts
    with pytest.raises(InvalidInput, match=r"Refused to connect to \[::1\]: it is a loopback address"):
        _guarded(f"http://[::1]:{port}/llms.txt")
    agent_env.setenv("BLZ_MCP_ALLOW_HOSTS", "LocalHost")  # by name: whatever it resolves to
    assert _guarded(f"http://localhost:{port}/llms.txt").body == DOC
    with pytest.raises(InvalidInput, match="Refused to connect to 127.0.0.1: it is a loopback address"):
        _guarded(f"http://127.0.0.1:{port}/llms.txt")
    agent_env.setenv("BLZ_MCP_ALLOW_HOSTS", "127.0.0.0/8,[::1]")
    assert _guarded(f"http://2130706433:{port}/llms.txt").body == DOC
    assert len(doc_server.gets("/llms.txt")) == 4
    for bad in ("10.0.0.0/33", "http://x", "a b", "x/y"):
        agent_env.setenv("BLZ_MCP_ALLOW_HOSTS", bad)
        with pytest.raises(InvalidInput, match=r"^BLZ_MCP_ALLOW_HOSTS: .* is not a host name, an IP address or a CIDR"):
            _guarded(f"http://127.0.0.1:{port}/llms.txt")
    assert all(_loopback(a) for a in connects)


def test_redirects_are_checked_hop_by_hop(agent_env: pytest.MonkeyPatch, doc_server: DocServer,
                                          other_server: DocServer, connects: list[Any]) -> None:
    """An allowed server redirecting elsewhere: each hop's connection passes the guard or never happens."""
    agent_env.setenv("BLZ_MCP_ALLOW_HOSTS", "localhost")
    other_server.files["/llms.txt"] = SECRET
    doc_server.files["/llms.txt"] = DOC
    doc_server.redirects["/moved"] = "/llms.txt"
    doc_server.redirects["/other-port"] = f"http://127.0.0.1:{other_server.port}/llms.txt"
    doc_server.redirects["/other-spelling"] = f"http://0x7f000001:{other_server.port}/llms.txt"
    doc_server.redirects["/ipv6"] = f"http://[::1]:{other_server.port}/llms.txt"
    doc_server.redirects["/metadata"] = "http://169.254.169.254/latest/meta-data/iam/security-credentials/"
    doc_server.redirects["/chain"] = "/other-port"
    base = f"http://localhost:{doc_server.port}"
    got = _guarded(f"{base}/moved")  # an allowed hop is followed
    assert got.body == DOC and got.url == f"{base}/llms.txt"
    for path, shown in [("/other-port", "127.0.0.1"), ("/other-spelling", r"0x7f000001 \(127.0.0.1\)"),
                        ("/ipv6", r"\[::1\]"), ("/metadata", "169.254.169.254"), ("/chain", "127.0.0.1")]:
        with pytest.raises(InvalidInput, match=f"^Refused to connect to {shown}: it is a"):
            _guarded(base + path)
    assert other_server.requests == []
    assert [a for a in connects if a[1] != doc_server.port] == []  # nothing else was even tried


def test_dns_answers_are_checked_and_the_checked_address_is_connected_to(
        agent_env: pytest.MonkeyPatch, doc_server: DocServer, connects: list[Any]) -> None:
    """Names are resolved once and every answer checked; the socket connects to a checked IP, so a
    second, different DNS answer (rebinding) never comes into play. Internal answers are not shown."""
    doc_server.files["/llms.txt"] = DOC
    port = doc_server.port
    answers: dict[str, list[str]] = {"docs.rebind.test": ["127.0.0.1"], "mixed.rebind.test": ["93.184.216.34", "127.0.0.1"]}
    asked: list[str] = []
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port_: Any, *args: Any, **kwargs: Any) -> Any:
        if host in answers:
            asked.append(host)
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port_)) for ip in answers[host]]
        return real(host, port_, *args, **kwargs)

    agent_env.setattr(socket, "getaddrinfo", getaddrinfo)
    for name in answers:
        with pytest.raises(InvalidInput, match=f"^Refused to connect to {name}: it resolves to a loopback address") as err:
            _guarded(f"http://{name}:{port}/llms.txt")
        assert "127.0.0.1" not in err.value.message and "93.184" not in err.value.message
    assert connects == [] and asked == ["docs.rebind.test", "mixed.rebind.test"]
    agent_env.setenv("BLZ_MCP_ALLOW_HOSTS", "127.0.0.1")
    assert _guarded(f"http://docs.rebind.test:{port}/llms.txt").body == DOC
    assert asked[2:] == ["docs.rebind.test"] and connects == [("127.0.0.1", port)]
    assert doc_server.requests[0][2]["host"] == f"docs.rebind.test:{port}"  # the URL's host, the checked IP


def test_proxy_variables_do_not_bypass_the_guard(agent_env: pytest.MonkeyPatch, doc_server: DocServer,
                                                 other_server: DocServer, connects: list[Any]) -> None:
    proxy = f"http://127.0.0.1:{other_server.port}"  # records every request a proxy would relay
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        agent_env.setenv(var, proxy)
    doc_server.files["/llms.txt"] = DOC
    url = doc_server.url("/llms.txt")
    with pytest.raises(InvalidInput, match="Refused to connect to 169.254.169.254"):
        _guarded("http://169.254.169.254/latest/meta-data/")
    with pytest.raises(InvalidInput, match="Refused to connect to 127.0.0.1"):
        _guarded(url)
    assert other_server.requests == [] and doc_server.requests == [] and connects == []
    agent_env.setenv("BLZ_MCP_ALLOW_HOSTS", "127.0.0.1")
    assert _guarded(url).body == DOC  # straight to the allowed host, not through the proxy
    assert other_server.requests == [] and len(doc_server.requests) == 1
    # Without a guard (the CLI) the same variables do route through the proxy: they were live above.
    with pytest.raises(NotFound):
        fetching.fetch(url, timeout=10)
    assert [p for _, p, _ in other_server.requests] == [url] and len(doc_server.requests) == 1


def test_allowlist_mode_fetches_only_listed_hosts_without_resolving_others(
        agent_env: pytest.MonkeyPatch, doc_server: DocServer, connects: list[Any]) -> None:
    doc_server.files["/llms.txt"] = DOC
    asked: list[Any] = []
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        asked.append(host)
        return real(host, *args, **kwargs)

    agent_env.setattr(socket, "getaddrinfo", getaddrinfo)
    agent_env.setenv("BLZ_MCP_NETWORK", "allowlist")
    for url in ("https://example.com/llms.txt", "https://react.dev/llms.txt", doc_server.url("/llms.txt")):
        with pytest.raises(InvalidInput, match="only the hosts listed in BLZ_MCP_ALLOW_HOSTS may be fetched here"):
            _guarded(url)
    assert asked == [] and connects == []
    agent_env.setenv("BLZ_MCP_ALLOW_HOSTS", "localhost")
    assert _guarded(f"http://localhost:{doc_server.port}/llms.txt").body == DOC
    with pytest.raises(InvalidInput, match="only the hosts listed"):
        _guarded(doc_server.url("/llms.txt"))  # 127.0.0.1 is not "localhost"
    agent_env.setenv("BLZ_MCP_NETWORK", "everything")
    with pytest.raises(InvalidInput, match="BLZ_MCP_NETWORK='everything': use public"):
        _guarded(doc_server.url("/llms.txt"))


# -- files -----------------------------------------------------------------------------------------

@pytest.fixture
def roots(tmp_path: Path, agent_env: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(allowed folder in BLZ_MCP_FILE_ROOTS, an outside folder holding secrets)."""
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    for folder in (allowed, outside, allowed / "docs", outside / "docs"):
        folder.mkdir()
    (allowed / "llms.txt").write_bytes(DOC)
    (allowed / "docs" / "llms.txt").write_bytes(DOC)
    (outside / "secret.txt").write_bytes(SECRET)
    (outside / "docs" / "llms.txt").write_bytes(SECRET)
    (outside / "docs" / "llms-full.txt").write_bytes(SECRET)
    agent_env.setenv("BLZ_MCP_FILE_ROOTS", str(allowed))
    return allowed, outside


def _tool(name: str, args: dict[str, Any]) -> dict[str, Any]:
    session = build_server().open_session(stateless=True)
    reply = session.handle({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": args}})
    assert isinstance(reply, dict) and "result" in reply, reply
    result: dict[str, Any] = reply["result"]
    return result


def test_refusals_never_name_a_symlink_target(roots: tuple[Path, Path], data_root: Path) -> None:
    allowed, outside = roots
    (allowed / "passwd.txt").symlink_to("/etc/passwd")
    (allowed / "key.txt").symlink_to(outside / "secret.txt")
    (allowed / "elsewhere").symlink_to(outside / "docs", target_is_directory=True)
    (allowed / "dangling.txt").symlink_to(outside / "missing" / "llms.txt")
    (allowed / "loop.txt").symlink_to(outside / "a")  # a loop outside: outside/a -> outside/b -> outside/a
    (outside / "a").symlink_to(outside / "b")
    (outside / "b").symlink_to(outside / "a")
    for name in ("passwd.txt", "key.txt", "elsewhere", "dangling.txt", "loop.txt"):
        for location in (str(allowed / name), (allowed / name).as_uri(), str(allowed / name / "llms.txt")):
            with pytest.raises(InvalidInput) as err:
                sources.check_agent_location(location)
            result = _tool("source-add", {"alias": "x", "url": location})  # scrubbed as a client sees it
            assert result.get("isError"), result
            if name == "loop.txt" and err.value.message != REFUSED_FILE:  # a path (not a file URL) is
                # resolved while choosing candidates; the loop used to escape there as a RuntimeError
                assert err.value.message.endswith("as a path or URL: a symlink loop. Give an http(s):// or "
                                                  "file:// URL, or an existing local path."), err.value.message
                assert str(outside) not in err.value.message and "outside" not in result["content"][0]["text"]
            else:
                assert err.value.message == REFUSED_FILE, (location, err.value.message)
                assert result["content"][0]["text"] == REFUSED_FILE, (location, result)


def test_a_file_swapped_for_a_symlink_after_the_check_is_not_read(roots: tuple[Path, Path], data_root: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The old defect: check the path, then open it again. Swap right after source-add's check."""
    allowed, outside = roots
    check = sources.check_agent_location

    def check_then_swap(location: str, *args: Any, **kwargs: Any) -> None:
        check(location, *args, **kwargs)
        target = Path(location)
        if target.is_dir():  # a folder source: swap the folder itself
            target.rename(target.with_name("was-" + target.name))
            target.symlink_to(outside / "docs", target_is_directory=True)
        else:
            target.unlink()
            target.symlink_to(outside / "secret.txt")

    monkeypatch.setattr(sources, "check_agent_location", check_then_swap)
    for alias, location in (("file", allowed / "llms.txt"), ("folder", allowed / "docs")):
        result = _tool("source-add", {"alias": alias, "url": str(location)})
        assert result.get("isError") and result["content"][0]["text"] == REFUSED_FILE, result
    store = Store(data_root)
    try:
        assert store.sources() == []
    finally:
        store.close()


@pytest.mark.parametrize("what", ["file", "folder"])
def test_a_swap_between_resolving_and_opening_is_caught_on_the_descriptor(
        roots: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, what: str) -> None:
    """Swap at the last moment, inside the guard, just before os.open: a final symlink fails
    O_NOFOLLOW; a parent folder swapped for a symlink is caught by the descriptor's real path."""
    allowed, outside = roots
    target = allowed / "llms.txt" if what == "file" else allowed / "docs" / "llms.txt"
    real_open = os.open
    swapped: list[str] = []

    def swap_then_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if Path(path) == target and not swapped:
            if what == "file":
                target.unlink()
                target.symlink_to(outside / "secret.txt")
            else:
                (allowed / "docs").rename(allowed / "was-docs")
                (allowed / "docs").symlink_to(outside / "docs", target_is_directory=True)
            swapped.append(what)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", swap_then_open)
    with pytest.raises(InvalidInput) as err:
        _guarded(target.as_uri())
    assert swapped == [what] and err.value.message == REFUSED_FILE


def test_racing_swaps_never_read_outside_the_roots(roots: tuple[Path, Path]) -> None:
    """A thread swaps llms.txt between the real file and a symlink to a secret (atomic renames) while
    source-add's check and read run again and again: every read is the allowed text or a refusal."""
    allowed, outside = roots
    target = allowed / "llms.txt"
    stop = threading.Event()
    flips = [0]

    def flip() -> None:
        while not stop.is_set():
            link, plain = allowed / ".link", allowed / ".plain"
            link.unlink(missing_ok=True)
            link.symlink_to(outside / "secret.txt")
            os.replace(link, target)
            plain.write_bytes(DOC)
            os.replace(plain, target)
            flips[0] += 1

    thread = threading.Thread(target=flip, daemon=True)
    thread.start()
    outcomes = {"read": 0, "refused": 0}
    try:
        for _ in range(1500):
            try:
                sources.check_agent_location(str(target))
                body = _guarded(target.as_uri()).body
            except InvalidInput as exc:  # the refusal, or a resolve() that lost the race ("Cannot use ...")
                assert str(outside) not in exc.message and "hunter2" not in exc.message, exc.message
                outcomes["refused"] += 1
                continue
            assert body == DOC
            outcomes["read"] += 1
    finally:
        stop.set()
        thread.join()
    assert flips[0] > 10 and outcomes["read"] > 0, (flips, outcomes)


def test_fifos_and_folders_are_refused_without_blocking(roots: tuple[Path, Path]) -> None:
    allowed, _ = roots
    os.mkfifo(allowed / "pipe.txt")
    with pytest.raises(InvalidInput, match="pipe.txt is not a regular file"):
        _guarded((allowed / "pipe.txt").as_uri())  # opening a FIFO used to wait for a writer
    with pytest.raises(InvalidInput, match="docs is a directory"):
        _guarded((allowed / "docs").as_uri())
    with pytest.raises(NotFound, match="No such file"):
        _guarded((allowed / "missing.txt").as_uri())


# -- run-command -----------------------------------------------------------------------------------

def test_run_command_source_is_never_an_option(data_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cairn_servers.blz import render

    # run-command never builds an argv: the checked operand goes to the operation as its one argument.
    seen: list[tuple[str, dict[str, Any]]] = []
    real_run = render.run_op

    def run_op(op: Any, target: Any, args: dict[str, Any], fmt: str, out: Any, err: Any) -> int:
        seen.append((op.cli, dict(args)))
        return real_run(op, target, args, fmt, out, err)

    monkeypatch.setattr(render, "run_op", run_op)
    for command in ("inspect", "history", "validate"):
        for source in ("-h", "--help", "--json", "--version", "-n", "--all", "-"):
            result = _tool("run-command", {"command": command, "source": source})
            text = result["content"][0]["text"]
            assert result.get("isError") and text.startswith(f"Invalid alias {source!r}") and "usage:" not in text, text
    for source in ("-h", "--help", "--json"):
        result = _tool("run-command", {"command": "schema", "source": source})
        assert result.get("isError") and result["content"][0]["text"].startswith(f"No schema named {source!r}")
    assert seen == []  # refused before the parser
    ok = _tool("run-command", {"command": "inspect", "source": "React"})
    assert ok["structuredContent"]["exitCode"] == 3 and "No source named 'react'" in ok["structuredContent"]["stderr"]
    schema = _tool("run-command", {"command": "schema", "source": "find"})["structuredContent"]
    assert schema["exitCode"] == 0 and "snippets" in schema["stdout"]
    stats = _tool("run-command", {"command": "stats"})["structuredContent"]
    assert stats["exitCode"] == 0
    assert seen == [("inspect", {"alias": "react"}), ("schema", {"name": "find"}), ("stats", {})]
