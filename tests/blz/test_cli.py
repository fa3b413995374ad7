"""The blz command line: formats, exit codes per error class, and the whole process as users run it."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cairn_servers.blz.cli import run
from cairn_servers.blz.schemas import SCHEMAS

from .conftest import blz

DOC = "# Guide\n\nIntro words.\n\n## Hooks\n\nHooks let you use state.\nMore hooks text.\n"


@pytest.fixture
def doc(tmp_path: Path, data_root: Path) -> Path:
    path = tmp_path / "guide.txt"
    path.write_text(DOC)
    return path


def test_add_search_get_roundtrip_json(doc: Path) -> None:
    code, out, err = blz("add", "guide", str(doc), "--json")
    assert code == 0, err
    assert json.loads(out)["lines"] == 8
    code, out, _ = blz("search", "hooks", "-s", "guide", "--json")
    hits = json.loads(out)["hits"]
    assert code == 0 and hits[0]["lines"] == "5-8" and hits[0]["headingPath"] == ["Guide", "Hooks"]
    code, out, _ = blz("get", "GUIDE:7-7", "-C", "1", "--json")
    snip = json.loads(out)["snippets"][0]
    assert snip["lines"] == "6-8" and snip["content"] == "\nHooks let you use state.\nMore hooks text."
    code, out, _ = blz("get", "guide:7", "--context", "all", "--jsonl")
    assert json.loads(out.strip())["lines"] == "5-8"


def test_text_output(doc: Path) -> None:
    blz("add", "guide", str(doc))
    code, out, _ = blz("search", "hooks", "--text")
    assert out.startswith("guide:5-8  [100.0]  Guide > Hooks\n")
    code, out, _ = blz("get", "guide:1-1", "--text")
    assert out == "--- guide:1-1  Guide\n# Guide\n"
    code, out, _ = blz("list", "--text")
    assert out.startswith("guide ") and "8 lines" in out
    code, out, _ = blz("stats", "--text")
    assert "Total sources: 1\nTotal indexed lines: 8\n" in out


def test_env_chooses_format(doc: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blz("add", "guide", str(doc))
    monkeypatch.setenv("BLZ_OUTPUT_FORMAT", "jsonl")
    code, out, _ = blz("list")
    assert json.loads(out.splitlines()[0])["alias"] == "guide"
    code, out, _ = blz("list", "--json")  # the flag beats the env
    assert "sources" in json.loads(out)
    monkeypatch.setenv("BLZ_OUTPUT_FORMAT", "tsv")
    code, out, _ = blz("lookup", "bun")
    assert out.splitlines()[0] == "alias\turl\tdescription\tcategory\tinstalled\tsuggestedCommand" and code == 0
    assert out.splitlines()[1].startswith("bun\thttps://bun.sh/llms-full.txt\t")
    monkeypatch.setenv("BLZ_OUTPUT_FORMAT", "yaml")
    code, out, err = blz("list")
    assert code == 2 and "Unknown output format 'yaml'" in err


@pytest.mark.parametrize("argv, code, message", [
    (["get", "nosuch:1-2"], 3, "blz: error: No source named 'nosuch'. Installed: guide. Add it with `blz add nosuch`.\n"),
    (["get", "guide:9-3"], 2, "blz: error: Invalid line range '9-3' in 'guide:9-3': lines start at 1 and END must not be below START.\n"),
    (["search", "x", "-n", "0"], 2, "blz: error: Invalid parameter for 'search': maxResults: 0 is less than the minimum of 1\n"),
    (["add", "other", "/definitely/missing.txt"], 3, "blz: error: No such file: /definitely/missing.txt. Check the path.\n"),
    (["add", "guide", "/definitely/missing.txt", "--force", "--exact"], 3, None),
    (["update"], 2, "blz: error: Name one source to update, or use --all or --stale: blz update react | "
                    "blz update --all | blz update --stale\n"),
    (["remove", "ghost"], 3, "blz: error: No source named 'ghost'. See `blz list`.\n"),
    (["frobnicate"], 2, None),
    (["inspect", "Bad/Alias"], 2, None),
])
def test_exit_codes_per_error_class(doc: Path, argv: list[str], code: int, message: str | None) -> None:
    blz("add", "guide", str(doc))
    got, out, err = blz(*argv)
    assert got == code, err
    if message:
        assert err == message
    assert out == "" or argv == ["frobnicate"]


def test_conflict_exit_code_and_update_all(doc: Path) -> None:
    blz("add", "guide", str(doc))
    code, _, err = blz("add", "guide", str(doc))
    assert code == 4 and "already exists. Use --force" in err
    code, out, _ = blz("update", "--all", "--json")
    assert code == 0 and json.loads(out)["results"][0]["status"] == "unchanged"
    doc.write_text(DOC + "\n## New\n\nfresh text\n")
    code, out, _ = blz("update", "guide", "--json")
    assert json.loads(out)["results"][0]["status"] == "updated"
    code, out, _ = blz("history", "guide", "--json")
    assert [e["action"] for e in json.loads(out)["events"]] == ["update", "unchanged", "add"]


def test_validate_exit_code_on_damage(doc: Path, data_root: Path) -> None:
    blz("add", "guide", str(doc))
    assert blz("validate")[0] == 0
    for f in (data_root / "sources" / "guide").iterdir():
        f.write_text("changed")
    code, out, _ = blz("validate", "--json")
    assert code == 7 and json.loads(out)["ok"] is False


def test_lookup_and_schema() -> None:
    code, out, _ = blz("lookup", "react", "--json")
    assert json.loads(out)["results"][0]["alias"] == "react"
    code, out, _ = blz("schema", "--json")
    assert set(json.loads(out)) == set(SCHEMAS)
    assert blz("schema", "nope")[0] == 2


def test_real_process_pipes_json_and_reports_exit_codes(doc: Path, data_root: Path) -> None:
    env = dict(os.environ, BLZ_DATA_DIR=str(data_root))
    env.pop("BLZ_OUTPUT_FORMAT", None)
    cmd = [sys.executable, "-m", "cairn_servers.blz.cli"]
    done = subprocess.run([*cmd, "add", "guide", str(doc)], capture_output=True, text=True, env=env)
    assert done.returncode == 0 and json.loads(done.stdout)["alias"] == "guide"  # piped: JSON
    done = subprocess.run([*cmd, "search", "hooks", "-s", "guide"], capture_output=True, text=True, env=env)
    assert json.loads(done.stdout)["hits"][0]["lines"] == "5-8"
    done = subprocess.run([*cmd, "get", "zzz:1-2"], capture_output=True, text=True, env=env)
    assert done.returncode == 3 and done.stdout == "" and "No source named 'zzz'" in done.stderr
    # The search path stays light: no HTTP client, no web framework, no numpy.
    probe = ("import sys, io; from cairn_servers.blz.cli import run; run(['search','hooks'], io.StringIO(), io.StringIO());"
             "print(sorted(m for m in ('httpx','starlette','numpy','cairn_servers.core.fetch','cairn_servers.mcp.server','cairn_servers.mcp.stdio') "
             "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    assert done.stdout.strip() == "[]", done.stderr


def test_find_command_mirrors_the_mcp_tool(doc: Path) -> None:
    """`blz find` (issue 14): search and cited lines in one answer, the MCP find tool's parameters."""
    blz("add", "guide", str(doc))
    code, out, _ = blz("find", "hooks", "--snippet", "guide:7", "-C", "1", "-s", "guide", "--json")
    got = json.loads(out)
    assert code == 0 and got["executed"] == {"searched": True, "retrievedSnippets": True}
    assert got["hits"][0]["lines"] == "5-8" and got["snippets"][0]["lines"] == "6-8"  # padding alone: symmetric
    code, out, _ = blz("find", "--snippet", "guide:1-1", "--text")
    assert code == 0 and out == "--- guide:1-1  Guide\n# Guide\n"
    code, out, _ = blz("find", "zzzqqq", "--text")
    assert code == 0 and out == "No results.\n"
    code, out, err = blz("find", "--json")
    assert code == 2 and out == "" and err.startswith("blz: error: Give a query to search, or snippets")
    code, _, err = blz("find", "x", "--context", "most")
    assert code == 2 and err == ('blz: error: Invalid parameter for \'find\': contextMode: "most" is not one of '
                                 '"none", "symmetric", "all"\n')


def test_list_with_registry_candidates_renders_as_text(doc: Path) -> None:
    blz("add", "guide", str(doc))
    code, out, _ = blz("list", "--registry", "--text")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("guide ") and "8 lines" in lines[0]
    assert any(line.startswith("react ") and "(registry)" in line for line in lines[1:])
