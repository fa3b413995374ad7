"""cairn_servers.core.argv: the plain command lines the stdio servers read without argparse, and everything
that must still go to argparse."""

from __future__ import annotations

import argparse

import pytest

from cairn_servers.core.argv import plain_flags

OPTIONS = {"--out": "out", "--log-level": "log_level"}
SWITCHES = {"--stdio": "stdio"}


def _argparse(args: list[str]) -> dict[str, object]:
    parser = argparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("--out", default=argparse.SUPPRESS)
    parser.add_argument("--log-level", default=argparse.SUPPRESS)
    parser.add_argument("--stdio", action="store_true", default=argparse.SUPPRESS)
    return vars(parser.parse_args(args))


@pytest.mark.parametrize("args", [
    [],
    ["--out", "d"],
    ["--out=d", "--log-level", "debug"],
    ["--log-level=info", "--stdio", "--out", "x y/z"],
    ["--stdio"],
    ["--out", "a=b"],
])
def test_plain_forms_read_as_argparse_reads_them(args: list[str]) -> None:
    assert plain_flags(args, OPTIONS, SWITCHES) == _argparse(args)


@pytest.mark.parametrize("args", [
    ["--help"],
    ["-h"],
    ["--out"],  # no value
    ["--out", "--stdio"],  # a flag where the value should be
    ["--out", "-x"],  # argparse reads a leading '-' as a flag
    ["--out="],
    ["--out", "a", "--out", "b"],  # repeated
    ["--stdio", "--stdio"],
    ["--stdio=yes"],
    ["--o", "d"],  # argparse's abbreviation: not ours to guess
    ["positional"],
    ["--other", "1"],
])
def test_anything_else_is_left_to_argparse(args: list[str]) -> None:
    assert plain_flags(args, OPTIONS, SWITCHES) is None


def test_brk_mcp_and_ctx_stdio_use_it() -> None:
    from cairn_servers.brk.cli import _fast_mcp
    from cairn_servers.ctx.cli import _fast_stdio

    brk = _fast_mcp(["mcp", "--out", "d"])
    assert brk is not None and (brk.out, brk.log_level) == ("d", None)
    assert _fast_mcp(["mcp", "--out", "d", "--help"]) is None
    ctx = _fast_stdio(["serve", "mcp", "--config", "c.toml", "--stdio"])
    assert ctx is not None and (ctx.config, ctx.log_level, ctx.stdio) == ("c.toml", None, True)
    assert _fast_stdio(["serve", "mcp", "--config", "c.toml"]) is None  # HTTP: argparse
