"""``ctx tool|agent|connector init NAME`` and ``ctx connector test NAME``: each script works as generated
(the tool passes ``ctx tool test``, the agent ``ctx agent show``, the connector ``connector test`` and a
sync) once the printed section is added to ctx.toml; an existing script is never overwritten."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cairn_servers.ctx.cli import main

from .conftest import write

DOCS = {"docs/deploy.md": "# Deploy checklist\n\nDeploy on Tuesdays; roll back with the previous tag.\n",
        "docs/vpn.md": "# VPN\n\nInstall WireGuard.\n"}


@pytest.fixture
def kb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CTX_CONFIG", raising=False)
    write(tmp_path, {**DOCS, "config/ctx.toml": f'[db]\npath = "kb.sqlite"\n[connectors.filesystem.docs]\n'
                                                 f'root = "{tmp_path / "docs"}"\n'})
    return tmp_path / "config" / "ctx.toml"


def ctx(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, object, str]:
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def register(capsys: pytest.CaptureFixture[str], conf: Path, kind: str, name: str) -> dict[str, str]:
    code, made, err = ctx(capsys, kind, "init", name)
    assert code == 0, err
    assert isinstance(made, dict)
    with conf.open("a") as fh:
        fh.write("\n" + made["section"])
    return made


def test_tool_init_passes_tool_test_as_generated(kb: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ctx(capsys, "sync", "--progress", "none")[0] == 0
    made = register(capsys, kb, "tool", "lookup")
    assert made["path"] == "config/tools/lookup.lua" and made["next"] == "ctx tool test lookup --param query=deploy"
    code, result, err = ctx(capsys, "tool", "test", "lookup", "--param", "query=deploy")
    assert code == 0, err
    assert result == {"result": {"query": "deploy", "count": 1, "titles": ["Deploy checklist"]}}
    # listed with the parameters it declares
    code, tools, _ = ctx(capsys, "tool", "list")
    assert isinstance(tools, list)
    lookup = next(t for t in tools if t["name"] == "lookup")
    assert lookup["parameters"]["required"] == ["query"]


def test_agent_init_resolves_as_generated(kb: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ctx(capsys, "sync", "--progress", "none")[0] == 0
    register(capsys, kb, "agent", "helper")
    code, shown, err = ctx(capsys, "agent", "show", "helper", "--arg", "topic=deploy")
    assert code == 0, err
    assert isinstance(shown, dict)
    assert shown["system"].startswith("You help with deploy. Cite the documents you use.\n\nDocuments about deploy:\n1. "
                                      "Deploy checklist (id ")
    assert shown["messages"] == [{"role": "assistant", "content": "I found 1 document(s). What do you need?"}]


def test_connector_init_test_and_sync(kb: Path, capsys: pytest.CaptureFixture[str]) -> None:
    register(capsys, kb, "connector", "notes")
    code, report, err = ctx(capsys, "connector", "test", "notes")
    assert code == 0, err
    assert report == {"source": "script:notes", "items": 1, "skipped": 0, "warnings": [], "shown": [
        {"source_id": "hello", "title": "Hello", "updated_at": "2024-05-01T00:00:00Z", "chars": 28}]}
    assert not (kb.parent / "kb.sqlite").exists()  # nothing written: not even a database
    code, summary, err = ctx(capsys, "sync", "notes", "--progress", "none")
    assert code == 0 and isinstance(summary, dict) and summary["sources"][0]["added"] == 1, err
    # a filesystem connector by type:name, the count beyond --limit
    code, report, _ = ctx(capsys, "connector", "test", "filesystem:docs", "--limit", "1")
    assert code == 0 and isinstance(report, dict) and (report["items"], len(report["shown"])) == (2, 1)


@pytest.mark.parametrize("argv, code, message", [
    (["tool", "init", "Bad Name"], 2, "'Bad Name' is not a valid tool name: use lowercase letters, digits, '_' and '-' "
                                      "(not first), at most 64 characters."),
    (["agent", "init", "On-Call"], 2, "'On-Call' is not a valid agent name: use lowercase letters, digits, '_' and '-' "
                                      "(not first), at most 64 characters."),
    (["connector", "test", "nowhere"], 3, "No connector named 'nowhere'. Configured: filesystem:docs."),
    (["connector", "test", "docs", "--limit", "0"], 2, "--limit must be 1 or more, not 0."),
])
def test_bad_names(kb: Path, capsys: pytest.CaptureFixture[str], argv: list[str], code: int, message: str) -> None:
    got, _, err = ctx(capsys, *argv)
    assert got == code and err.strip() == f"ctx: error: {message}"


def test_init_never_overwrites(kb: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mine = kb.parent / "tools" / "lookup.lua"
    write(kb.parent, {"tools/lookup.lua": "-- my own tool\n"})
    code, _, err = ctx(capsys, "tool", "init", "lookup")
    assert code == 4 and err.strip() == ("ctx: error: config/tools/lookup.lua already exists; ctx tool init never overwrites a "
                                         "script. Choose another name or remove the file.")
    assert mine.read_text() == "-- my own tool\n"
    assert sorted(p.name for p in mine.parent.iterdir()) == ["lookup.lua"]  # no temporary file left


def test_connector_test_reports_a_script_error(kb: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(kb.parent, {"connectors/broken.lua": 'connector = {}\nfunction connector.scan(config) error("boom") end\n'})
    with kb.open("a") as fh:
        fh.write('\n[connectors.script.broken]\npath = "connectors/broken.lua"\n')
    code, _, err = ctx(capsys, "connector", "test", "broken")
    assert code == 8 and err.strip() == "ctx: error: Lua connector 'broken': broken.lua:2: boom"
