"""docs/blz.md must match the code: commands, MCP tools, exit codes, schemas, registry, limits."""

from __future__ import annotations

import re
from pathlib import Path

from cairn_servers.blz import registry
from cairn_servers.blz.cli import build_parser
from cairn_servers.blz.limits import MAX_LIMIT, MAX_PADDING, WHITELIST
from cairn_servers.blz.schemas import SCHEMAS
from cairn_servers.blz.tools import build_server
from cairn_servers.core import errors

DOC = (Path(__file__).resolve().parents[2] / "docs" / "blz.md").read_text()


def test_every_command_is_documented() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    commands = set(sub.choices)  # type: ignore[arg-type]
    documented = set(re.findall(r"^\| `blz ([a-z]+)", DOC, re.M))
    assert documented == commands


def test_every_mcp_tool_resource_and_prompt_is_documented(data_root: Path) -> None:
    server = build_server()
    table = set(re.findall(r"^\| `([a-z-]+)` \|", DOC, re.M))
    assert set(server.tools) <= table
    for uri in [*server.resources, *(t.uri_template for t in server.templates)]:
        assert f"`{uri}`" in DOC
    for name in server.prompts:
        assert f"`{name}(" in DOC
    assert ", ".join(f"`{c}`" for c in WHITELIST) in DOC
    assert f"`maxResults` (1–{MAX_LIMIT}, default 10)" in DOC and f"`linePadding` (0–{MAX_PADDING})" in DOC


def test_exit_code_table_matches_the_error_taxonomy() -> None:
    rows = dict(re.findall(r"^\| (\d+) \| (.+) \|$", DOC, re.M))
    used = {errors.InvalidInput, errors.NotFound, errors.Conflict, errors.NetworkError, errors.Timeout,
            errors.StorageError, errors.TooLarge}
    assert set(map(int, rows)) == {0, errors.EXIT_INTERNAL} | {cls.exit_code for cls in used}


def test_schema_and_registry_lists_match() -> None:
    listed = re.search(r"JSON Schemas of the outputs \(([^)]*)\)", DOC)
    assert listed and re.findall(r"`([a-z]+)`", listed.group(1)) == list(SCHEMAS)
    reg = re.search(r"Built in \(see `blz lookup`\): ([^.]+)\.", DOC)
    assert reg and [a.strip() for a in reg.group(1).replace("\n", " ").split(",")] == \
        sorted(e.alias for e in registry.REGISTRY)
