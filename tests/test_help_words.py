"""Command-line help speaks in command-line words (``--dry-run``, ``-n``/``--limit``, ``--depth``,
``brk ids``), never in the MCP wire names of the same parameters (``dryRun``, ``maxResults``,
``maxDepth``) or MCP tool names (``get_index_to_vecids``); the MCP tools keep their own words."""

from __future__ import annotations

import argparse
import re

import pytest

from cairn_servers.blz.cli import build_parser as blz_parser
from cairn_servers.blz.ops import OPS as BLZ
from cairn_servers.brk.cli import build_parser as brk_parser
from cairn_servers.brk.ops import OPS as BRK
from cairn_servers.core.ops import Registry, mcp_tool
from cairn_servers.ctx.cli import _parser as ctx_parser
from cairn_servers.ctx.ops import OPS as CTX

REGISTRIES: list[Registry] = [BLZ, CTX, BRK]


def _helps(parser: argparse.ArgumentParser, prog: str) -> dict[str, str]:
    out = {prog: parser.format_help()}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.update(_helps(sub, f"{prog} {name}"))
    return out


def _mcp_words() -> set[str]:
    """Every camelCase wire name of a parameter, and every MCP tool name with an underscore."""
    words = set()
    for registry in REGISTRIES:
        for op in registry.ops.values():
            words |= {w for p in op.params for w in (p.wire, *p.aliases) if w != w.lower()}
            if op.mcp and "_" in op.mcp:
                words.add(op.mcp)
    return words


@pytest.mark.parametrize("prog,parser", [("blz", blz_parser), ("ctx", ctx_parser), ("brk", brk_parser)])
def test_help_has_no_mcp_parameter_or_tool_names(prog: str, parser: object) -> None:
    words = _mcp_words()
    assert {"dryRun", "maxResults", "maxDepth", "linePadding", "get_index_to_vecids"} <= words
    pattern = re.compile(r"\b(" + "|".join(sorted(words, key=len, reverse=True)) + r")\b")
    assert callable(parser)
    found = {name: sorted(set(pattern.findall(text))) for name, text in _helps(parser(), prog).items()}
    assert {name: hits for name, hits in found.items() if hits} == {}


def test_the_cli_words_replace_them() -> None:
    helps = _helps(blz_parser(), "blz")
    assert "--dry-run fetches and parses but writes nothing" in helps["blz add"]
    assert "Only heading levels 1..N (1-6)" in helps["blz toc"]
    assert "(0-50; overrides\n                        --context-lines on that side)" in helps["blz find"]
    assert "those available on that index" in " ".join(_helps(brk_parser(), "brk")["brk ids"].split())


def test_mcp_keeps_its_own_words() -> None:
    add = mcp_tool(BLZ["source-add"], lambda args: None)
    assert "dryRun: true fetches and parses" in add.description and "BLZ_MCP_FILE_ROOTS" in add.description
    find = mcp_tool(BLZ["find"], lambda args: None)
    assert "linePadding" in find.input_schema["properties"]["contextMode"]["description"]
