from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import config_file, write

PY = sys.executable


def ctx(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "cairn_servers.ctx.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})), timeout=60)


@pytest.mark.usefixtures("ctx_backend")  # on SQLite and on PostgreSQL ($CTX_DATABASE_URL)
def test_init_sync_search_get_sources_stats(tmp_path: Path) -> None:
    write(tmp_path / "docs", {"a.md": "# Alpha\n\nThe alpha release ships on Monday.\n", "b.txt": "beta notes\n"})
    r = ctx("init", "--text", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Wrote config/ctx.toml")
    # Keep the test keyword-only and fast.
    cfg = tmp_path / "config" / "ctx.toml"
    text = cfg.read_text()
    assert 'provider = "minilm"' in text
    cfg.write_text(text.replace('provider = "minilm"', 'provider = "disabled"'))

    r = ctx("sync", "all", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)  # piped -> JSON
    assert summary["sources"][0]["source"] == "filesystem:docs" and summary["sources"][0]["added"] == 2
    # progress as JSON lines when stderr is not a terminal (no bar), ending with the source's "done"
    lines = [json.loads(line) for line in r.stderr.splitlines()]
    assert lines[-1] == {**lines[-1], "event": "done", "stage": "filesystem:docs", "done": 2, "total": 2}

    r = ctx("search", "alpha release", "--json", cwd=tmp_path)
    hits = json.loads(r.stdout)
    assert [h["source_id"] for h in hits] == ["a.md"]
    assert hits[0]["title"] == "Alpha" and hits[0]["score"] == 1.0

    r = ctx("get", hits[0]["id"], "--text", cwd=tmp_path)
    assert r.returncode == 0 and "# Alpha" in r.stdout and "The alpha release ships on Monday." in r.stdout

    r = ctx("search", "alpha", "--text", "--limit", "1", cwd=tmp_path)
    assert r.stdout.startswith("1. Alpha  [1.000]")

    sources = json.loads(ctx("sources", cwd=tmp_path).stdout)
    assert sources == [{"name": "docs", "type": "filesystem", "source": "filesystem:docs", "configured": True,
                        "healthy": True, "doc_count": 2, "last_sync": sources[0]["last_sync"], "error": None}]
    stats = json.loads(ctx("stats", "--json", cwd=tmp_path).stdout)
    assert stats["documents"] == 2

    r = ctx("sync", "--dry-run", "--text", cwd=tmp_path)
    assert "filesystem:docs: would: 0 added, 0 updated, 0 deleted, 2 unchanged" in r.stdout


@pytest.mark.usefixtures("ctx_backend")  # on SQLite and on PostgreSQL ($CTX_DATABASE_URL)
def test_errors_exit_codes_and_messages(tmp_path: Path) -> None:
    r = ctx("search", "x", cwd=tmp_path, env={"XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    assert r.returncode == 3
    xdg = tmp_path / "xdg" / "ctx"
    assert r.stderr == ("ctx: error: No config file found; looked in ./config/ctx.toml, ./.ctx/ctx.toml, "
                        f"./.ctx/config.toml, {xdg}/ctx.toml, {xdg}/config.toml. Run `ctx init` to create "
                        "./config/ctx.toml, pass --config PATH, or set $CTX_CONFIG.\n")
    assert r.stdout == ""

    path = config_file(tmp_path, "[db]\npath = 'kb.sqlite'\n[retrieval]\nfinal_limt = 3\n", "bad.toml")
    r = ctx("stats", "--config", str(path), cwd=tmp_path)
    assert r.returncode == 2 and "[retrieval] final_limt: unknown key" in r.stderr

    path = config_file(tmp_path, "[db]\npath = 'kb.sqlite'\n", "ok.toml")
    r = ctx("search", "x", "--mode", "semantic", "--config", str(path), cwd=tmp_path)
    assert r.returncode == 2 and "Embeddings are disabled" in r.stderr

    r = ctx("get", "missing", cwd=tmp_path, env={"CTX_CONFIG": str(path)})
    assert r.returncode == 3 and "No document with id 'missing'" in r.stderr

    r = ctx("search", "x", "--json", "--text", cwd=tmp_path)
    assert r.returncode == 2  # argparse: mutually exclusive


def test_help_is_fast_to_import() -> None:
    code = "import sys, cairn_servers.ctx.cli; print(sorted(m for m in ('numpy','httpx','wordllama','sqlite3') if m in sys.modules))"
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


# SQLite only by nature: what a SQLite knowledge base's commands import.
def test_sqlite_search_never_imports_the_postgres_driver(tmp_path: Path) -> None:
    write(tmp_path / "docs", {"a.md": "# A\n\nheron"})
    path = config_file(tmp_path, f'[db]\npath = "kb.sqlite"\n[connectors.filesystem.docs]\nroot = "{tmp_path / "docs"}"\n')
    code = ("import sys; from cairn_servers.ctx.cli import main; main(['sync', '--config', sys.argv[1], '--json']);"
            " main(['search', 'heron', '--config', sys.argv[1], '--json']);"
            " print([m for m in ('psycopg', 'cairn_servers.ctx.store_pg') if m in sys.modules])")
    env = {k: v for k, v in os.environ.items() if k != "CTX_DATABASE_URL"}
    out = subprocess.run([PY, "-c", code, str(path)], capture_output=True, text=True, check=True, env=env).stdout
    assert '"source_id": "a.md"' in out  # it searched
    assert out.strip().splitlines()[-1] == "[]"


@pytest.mark.usefixtures("ctx_backend")  # on SQLite and on PostgreSQL ($CTX_DATABASE_URL)
def test_failed_source_sets_the_exit_status_but_others_sync(tmp_path: Path) -> None:
    write(tmp_path / "ok", {"a.md": "# A\n\nfine"})
    path = config_file(tmp_path, f"""
[db]
path = "kb.sqlite"
[connectors.filesystem.ok]
root = "{tmp_path / 'ok'}"
[connectors.filesystem.gone]
root = "{tmp_path / 'missing'}"
""")
    r = ctx("sync", "--config", str(path), "--json", cwd=tmp_path)
    assert r.returncode == 3  # not found: the missing folder
    assert "ctx: warning: filesystem:gone was not synced:" in r.stderr and "is not a directory" in r.stderr
    summary = json.loads(r.stdout)
    assert [(s["source"], s["ok"], s["added"]) for s in summary["sources"]] == [
        ("filesystem:ok", True, 1), ("filesystem:gone", False, 0)]


@pytest.mark.usefixtures("ctx_backend")  # on SQLite and on PostgreSQL ($CTX_DATABASE_URL)
def test_progress_bar_only_on_a_terminal(tmp_path: Path) -> None:
    import pty

    write(tmp_path / "docs", {f"f{i}.md": f"# F{i}\n\nbody {i}" for i in range(100)})
    path = config_file(tmp_path, f'[db]\npath = "kb.sqlite"\n[connectors.filesystem.docs]\nroot = "{tmp_path / "docs"}"\n')
    master, slave = pty.openpty()
    proc = subprocess.run([PY, "-m", "cairn_servers.ctx.cli", "sync", "--config", str(path), "--json"], cwd=tmp_path,
                          stdout=subprocess.PIPE, stderr=slave, timeout=60)
    os.close(slave)
    drawn = os.read(master, 65536).decode()
    os.close(master)
    assert proc.returncode == 0
    assert "filesystem:docs" in drawn and "100/100" in drawn and "#" * 30 in drawn
    assert json.loads(proc.stdout)["sources"][0]["added"] == 100  # stdout stays clean JSON


SECRET = "sk-live-7d1e0c9b2a4f"


def test_config_show_masks_values_from_the_environment(tmp_path: Path) -> None:
    import tomllib

    path = config_file(tmp_path, """[db]
path = "${CTX_T_DB:-state}/kb.sqlite"
[server]
auth_token = "${CTX_T_TOKEN}"
[connectors.git.kb]
url = "https://${CTX_T_TOKEN}@example.org/kb.git"
""")
    env = {"CTX_T_TOKEN": SECRET, "CTX_AUTH_TOKEN": ""}
    r = ctx("config", "show", "--text", "--config", str(path), cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert SECRET not in r.stdout + r.stderr
    assert r.stdout.startswith(f"# ctx: the configuration in force, from {path}\n")
    shown = tomllib.loads(r.stdout)
    assert shown["server"]["auth_token"] == "***" and shown["connectors"]["git"]["kb"]["url"] == "***"
    assert shown["db"]["path"] == str(tmp_path / "state" / "kb.sqlite")  # the default, from the file: shown
    r = ctx("config", "show", "--json", "--config", str(path), cwd=tmp_path, env=env)
    assert r.returncode == 0 and json.loads(r.stdout) == shown and SECRET not in r.stdout


def test_config_missing_variable_is_a_clear_error(tmp_path: Path) -> None:
    path = config_file(tmp_path, '[db]\npath = "kb.sqlite"\n[server]\nauth_token = "${CTX_T_UNSET}"\n')
    for command in (["config", "show"], ["search", "x"], ["serve", "mcp", "--stdio"]):
        r = ctx(*command, "--config", str(path), cwd=tmp_path)
        assert r.returncode == 2, (command, r.stderr)
        assert r.stderr == (f"ctx: error: {path}:4: [server] auth_token: ${{CTX_T_UNSET}} is not set and has no "
                            "default. Set CTX_T_UNSET in the environment, or write ${CTX_T_UNSET:-default}.\n")
        assert r.stdout == ""


def test_secrets_from_the_environment_never_reach_errors_or_script_logs(tmp_path: Path) -> None:
    """A Lua tool that logs and fails with its ${VAR} api_key: stderr shows *** (the log line is
    written by the Lua worker process, the error by the CLI)."""
    write(tmp_path, {"tools/leak.lua": """
tool = {description = "leaks its key", parameters = {}}
function tool.execute(params, context)
  log.warn("calling upstream with key " .. context.config.api_key)
  error("upstream refused key " .. context.config.api_key)
end
"""})
    path = config_file(tmp_path, '[db]\npath = "kb.sqlite"\n[tools.script.leak]\npath = "tools/leak.lua"\n'
                                 'api_key = "${CTX_T_KEY}"\n')
    r = ctx("tool", "test", "leak", "--config", str(path), cwd=tmp_path, env={"CTX_T_KEY": SECRET})
    assert r.returncode != 0
    assert SECRET not in r.stdout + r.stderr
    assert "calling upstream with key ***" in r.stderr and "upstream refused key ***" in r.stderr
    bind = config_file(tmp_path, '[server]\nbind = "${CTX_T_KEY}"\n', "bind.toml")
    r = ctx("config", "show", "--config", str(bind), cwd=tmp_path, env={"CTX_T_KEY": SECRET})
    assert r.returncode == 2 and SECRET not in r.stderr and "not '${CTX_T_KEY}'" in r.stderr
