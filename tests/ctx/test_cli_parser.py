"""``ctx``'s parser built for one sub-command (start-up: ``ctx search`` builds one of fourteen) answers
exactly as the whole parser does: the same values, the same help, the same usage errors."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cairn_servers.ctx import cli

from .conftest import config_file, write

# Every command with its options, help at each level, usage errors, and the common options before the
# command (plain, "=" joined, abbreviated: the last takes the whole parser).
ARGVS = [
    ["search", "hooks"],
    ["search", "hooks", "more", "--mode", "hybrid", "--limit", "3", "--source", "a", "--source", "b",
     "--since", "2020-01-01", "--until", "1700000000", "--explain", "--json"],
    ["--config", "c.toml", "--text", "search", "x"],
    ["--config=c.toml", "search", "x", "--format", "md"],
    ["--json", "--format=csv", "search", "x"],
    ["--conf", "c.toml", "search", "x"],
    ["search"],
    ["search", "x", "--bogus"],
    ["search", "x", "--limit"],
    ["search", "x", "--json", "--text"],
    ["search", "x", "--format", "xml"],
    ["get", "abc"], ["get"],
    ["sources"], ["sources", "extra"],
    ["stats", "--json"], ["migrate"], ["init", "--config", "x.toml"],
    ["sync"], ["sync", "docs", "--full", "--dry-run"],
    ["embed", "pending"], ["embed", "nope"], ["embed"],
    ["export", "-o", "f.jsonl", "--vectors"], ["export", "--out=f"], ["import", "f", "--merge"], ["import"],
    ["serve", "mcp", "--bind", "127.0.0.1:1", "--log-level", "info", "--allow-remote"], ["serve", "mcp", "--stdio"],
    ["serve", "http"],
    ["config", "show", "--json"], ["config"], ["config", "edit"],
    ["agent", "list"], ["agent", "show", "writer", "--arg", "topic=x", "--arg", "b=c"], ["agent"], ["agent", "show"],
    ["tool", "list"], ["tool", "test", "search", "--param", "query=x"], ["tool", "test"],
    ["--help"], ["-h"], [], ["bogus"], ["--json"], ["--config"], ["--", "search", "x"],
    *([command, "--help"] for command in cli.COMMANDS),
    ["agent", "show", "--help"], ["agent", "list", "--help"], ["config", "show", "--help"], ["tool", "test", "--help"],
]


def _outcome(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[dict[str, Any] | None, Any, str, str]:
    """(values, exit code, stdout, stderr) of parsing ``argv``."""
    out, err = io.StringIO(), io.StringIO()
    values, code = None, None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            values = vars(parser.parse_args(argv))
        except SystemExit as exc:
            code = exc.code
    return values, code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("argv", ARGVS, ids=" ".join)
def test_the_parser_for_the_command_answers_as_the_whole_parser(argv: list[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")  # help is wrapped to the terminal's width
    whole = _outcome(cli._parser(), argv)
    assert _outcome(cli._parser(only=cli._command(argv)), argv) == whole
    values, code, out, err = whole
    assert values is not None or out or err  # the case parsed, or said something


def _built(parser: argparse.ArgumentParser) -> list[str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


def test_each_command_builds_only_its_own_parser() -> None:
    assert _built(cli._parser()) == list(cli.COMMANDS)  # every command, in the order --help lists them
    for command in cli.COMMANDS:
        assert _built(cli._parser(only=command)) == [command]


@pytest.mark.parametrize("argv, command", [
    (["search", "x"], "search"),
    (["--config", "c", "--json", "search", "x"], "search"),
    (["--config=c", "--format", "md", "get", "x"], "get"),
    (["--format=json", "--jsonl", "agent", "list"], "agent"),
    (["--conf", "search", "sync"], None),  # abbreviated: argparse decides what it means
    (["--config", "search"], None),  # "search" is the option's value
    (["-h", "search"], None), (["--", "search"], None), (["bogus", "search"], None), ([], None),
])
def test_the_command_is_taken_from_argv_only_when_plain(argv: list[str], command: str | None) -> None:
    assert cli._command(argv) == command


def test_a_search_loads_the_agent_records_only_when_the_config_has_agents(tmp_path: Path) -> None:
    write(tmp_path / "docs", {"a.md": "# A\n\nheron"})
    plain = config_file(tmp_path, f'[db]\npath = "kb.sqlite"\n[connectors.filesystem.docs]\nroot = "{tmp_path / "docs"}"\n')
    agents = config_file(tmp_path, plain.read_text() + '[agents.inline.writer]\nsystem_prompt = "Write about {{topic}}."\n'
                         'arguments = [{ name = "topic", required = true }]\n', "agents.toml")
    bad = config_file(tmp_path, plain.read_text() + '[agents.inline.writer]\nsystem_prompt = "Write about {{topic}}."\n',
                      "bad.toml")
    code = ("import sys; from cairn_servers.ctx.cli import main; rc = main(['search', 'heron', '--config', sys.argv[1], '--json']);"
            " sys.stderr.write(f'AGENTS {\"cairn_servers.ctx.agent_config\" in sys.modules} {rc}\\n')")
    env = {k: v for k, v in os.environ.items() if k not in ("CTX_DATABASE_URL", "CTX_CONFIG")}
    subprocess.run([sys.executable, "-m", "cairn_servers.ctx.cli", "sync", "--config", str(plain), "--json"], env=env,
                   capture_output=True, check=True)

    def search(path: Path) -> tuple[str, str]:
        r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env)
        return r.stdout, r.stderr

    out, err = search(plain)
    assert '"source_id": "a.md"' in out and err.endswith("AGENTS False 0\n")
    out, err = search(agents)
    assert '"source_id": "a.md"' in out and err.endswith("AGENTS True 0\n")
    # an agent is still checked when the file is read, whatever the command
    out, err = search(bad)
    assert out == "" and "[agents.inline.writer] system_prompt: uses {{topic}}, which is not an argument" in err
    assert err.endswith(" 2\n")


def test_serve_without_what_says_what_to_serve() -> None:
    r = subprocess.run([sys.executable, "-m", "cairn_servers.ctx.cli", "serve"], capture_output=True, text=True,
                       timeout=60)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == ("ctx: error: say what to serve: `ctx serve mcp` serves the HTTP API and MCP on 127.0.0.1:7331 "
                        "(--bind HOST:PORT to change it); `ctx serve mcp --stdio` speaks MCP on stdin/stdout for a "
                        "client that starts it.\n")
    other = subprocess.run([sys.executable, "-m", "cairn_servers.ctx.cli", "serve", "web"], capture_output=True,
                           text=True, timeout=60)
    assert other.returncode == 2 and "ctx: error: argument what: invalid choice: 'web'" in other.stderr
