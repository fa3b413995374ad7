"""One command-line convention for blz, ctx and brk (cairn_servers/core/cli.py), checked on the installed
commands as a user runs them: ``--version``, ``--format`` for every value and its short forms, the
``<COMMAND>_OUTPUT_FORMAT`` variable (checked as ``--format`` is), one error prefix, the documented exit
codes ("no results" is 0 on all three), and a reader that goes away (``| head -1``) without a traceback."""

from __future__ import annotations

import csv
import fcntl
import io
import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from cairn_servers.brk.indexer import index
from cairn_servers.brk.sample import write_mainnet_sample
from cairn_servers.core.cli import EXIT_CODES
from cairn_servers.core.output import FORMATS

BIN = Path(sys.executable).parent


@dataclass
class Setup:
    env: dict[str, str]
    # per command: a listing, a search with no results, a command failing with "not found" (exit 3 or 7),
    # and a command printing well over a pipe buffer
    listing: dict[str, list[str]]
    empty: dict[str, list[str]]
    missing: dict[str, tuple[list[str], int]]
    long: dict[str, list[str]]


def run(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    base = tmp_path_factory.mktemp("convention")
    # PYTHONUNBUFFERED: an unbuffered stdout drops what a partial write to a closed pipe left unwritten,
    # silently; the commands run as users run them, buffered
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BLZ_", "CTX_", "BRK_", "PYTHONUNBUFFERED"))}
    env.update(BLZ_DATA_DIR=str(base / "blz"), XDG_DATA_HOME=str(base / "xdg"), XDG_CONFIG_HOME=str(base / "xdgc"),
               XDG_CACHE_HOME=str(base / "xdgcache"))
    llms = base / "llms.txt"
    sections = [f"## Topic {i}\n\n" + "\n".join(f"Line {j} of topic {i} about hooks and effects." for j in range(20))
                for i in range(60)]
    llms.write_text("# Demo\n\n> A demo source.\n\n" + "\n\n".join(sections) + "\n", encoding="utf-8")
    assert run(env, "blz", "add", "demo", str(llms), "--json").returncode == 0

    docs = base / "docs"
    docs.mkdir()
    (docs / "deploy.md").write_text("# Deploy\n\n" + "Rotate keys before a deploy. " * 2000 + "\n", encoding="utf-8")
    config = base / "ctx.toml"
    config.write_text(f'[db]\npath = "{base / "kb.sqlite"}"\n\n[embedding]\nprovider = "disabled"\n\n'
                      f'[connectors.filesystem.docs]\nroot = "{docs}"\n', encoding="utf-8")
    assert run(env, "ctx", "--config", str(config), "sync", "all", "--json").returncode == 0
    doc_id = json.loads(run(env, "ctx", "--config", str(config), "search", "rotate", "--json").stdout)[0]["id"]

    write_mainnet_sample(base / "blocks")
    index(base / "blocks", base / "vecs")
    vecs = str(base / "vecs")
    c = ["--config", str(config)]
    return Setup(
        env=env,
        listing={"blz": ["blz", "list"], "ctx": ["ctx", "sources", *c], "brk": ["brk", "status", "--out", vecs]},
        empty={"blz": ["blz", "search", "zzqxv"], "ctx": ["ctx", "search", "zzqxv", *c],
               "brk": ["brk", "query", "--out", vecs, "--index", "date", "--ids", "block_count", "--from", "0",
                       "--count", "0"]},
        missing={"blz": (["blz", "get", "nosuch:1-2"], 3), "ctx": (["ctx", "get", "nosuch", *c], 3),
                 "brk": (["brk", "status", "--out", str(base / "nope")], 7)},
        long={"blz": ["blz", "get", "demo:1-1200"], "ctx": ["ctx", "get", doc_id, *c],
              "brk": ["brk", "ids", "--out", vecs]},
    )


COMMANDS = ("blz", "ctx", "brk")


@pytest.mark.parametrize("command", COMMANDS)
def test_version_is_printed_alike(setup: Setup, command: str) -> None:
    r = run(setup.env, command, "--version")
    assert (r.returncode, r.stdout, r.stderr) == (0, f"{command} 0.1.0\n", "")


def test_brk_version_command_says_the_same() -> None:
    r = subprocess.run([str(BIN / "brk"), "version", "--format", "text"], capture_output=True, text=True)
    assert (r.returncode, r.stdout) == (0, "0.1.0\n")


def _check_format(fmt: str, text: str) -> None:
    """``text`` is well-formed ``fmt`` with at least one row."""
    assert text.endswith("\n") and text.strip(), (fmt, text)
    if fmt == "json":
        json.loads(text)
    elif fmt == "jsonl":
        for line in text.splitlines():
            json.loads(line)
    elif fmt in ("csv", "tsv"):
        rows = list(csv.reader(io.StringIO(text), delimiter="," if fmt == "csv" else "\t"))
        assert len(rows) >= 2 and all(len(r) == len(rows[0]) for r in rows), (fmt, text)
    elif fmt == "md":
        lines = text.splitlines()
        assert lines[0].startswith("| ") and set(lines[1]) <= set("|-"), text
    else:  # text: for people, not JSON
        assert not text.lstrip().startswith(("{", "[")), text


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_and_its_variable(setup: Setup, command: str, fmt: str) -> None:
    argv = setup.listing[command]
    by_flag = run(setup.env, *argv, "--format", fmt)
    assert by_flag.returncode == 0 and by_flag.stderr == "", by_flag.stderr
    _check_format(fmt, by_flag.stdout)
    by_env = run({**setup.env, f"{command.upper()}_OUTPUT_FORMAT": fmt}, *argv)
    assert by_env.stdout == by_flag.stdout
    if fmt in ("json", "jsonl", "text"):  # the short forms
        assert run(setup.env, *argv, f"--{fmt}").stdout == by_flag.stdout
    if fmt == "md":
        assert run(setup.env, *argv, "--format", "markdown").stdout == by_flag.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_unknown_formats_are_refused_from_the_flag_and_the_variable(setup: Setup, command: str) -> None:
    argv = setup.listing[command]
    flag = run(setup.env, *argv, "--format", "xml")
    assert flag.returncode == 2 and flag.stdout == ""
    assert flag.stderr.splitlines()[-1].startswith(f"{command}: error: argument --format: invalid choice: 'xml'")
    var = f"{command.upper()}_OUTPUT_FORMAT"
    env = run({**setup.env, var: "csvx"}, *argv)
    assert (env.returncode, env.stdout) == (2, "")
    assert env.stderr == (f"{command}: error: Unknown output format 'csvx' in ${var}. "
                          "Use one of: json, jsonl, text, csv, tsv, md (markdown = md).\n")


@pytest.mark.parametrize("command", COMMANDS)
def test_one_error_prefix_and_the_documented_exit_codes(setup: Setup, command: str) -> None:
    argv, code = setup.missing[command]
    r = run(setup.env, *argv)
    assert r.returncode == code and r.stdout == "", (r.returncode, r.stdout)
    assert r.stderr.startswith(f"{command}: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.stderr
    usage = run(setup.env, command, "--no-such-flag")
    assert usage.returncode == 2 and usage.stderr.splitlines()[-1].startswith(f"{command}: error: ")
    helped = run(setup.env, command, "--help")
    assert EXIT_CODES in helped.stdout  # the same table in every --help


@pytest.mark.parametrize("command", COMMANDS)
def test_no_results_is_exit_0_with_an_empty_answer(setup: Setup, command: str) -> None:
    argv = setup.empty[command]
    r = run(setup.env, *argv, "--format", "json")
    assert (r.returncode, r.stderr) == (0, "")
    data = json.loads(r.stdout)
    assert data in ([], {}) or data.get("hits") == [], data
    tsv = run(setup.env, *argv, "--format", "tsv")
    assert tsv.returncode == 0
    header = tsv.stdout.splitlines()
    assert len(header) == 1 and header[0] not in ("", "value"), tsv.stdout  # the columns are named


def test_ctx_search_tsv_with_no_results_names_the_columns(setup: Setup) -> None:
    r = run(setup.env, *setup.empty["ctx"], "--format", "tsv")
    assert r.stdout == "id\tscore\ttitle\tsource\tsource_id\tupdated_at\tsnippet\tsource_url\tlocation\n"


def _small_pipe() -> tuple[int, int]:
    r, w = os.pipe()
    fcntl.fcntl(w, 1031, 4096)  # F_SETPIPE_SZ: one page, so that the output cannot fit before the reader leaves
    return r, w


@pytest.mark.parametrize("command", COMMANDS)
def test_a_reader_that_goes_away_ends_the_command_quietly(setup: Setup, command: str) -> None:
    argv = setup.long[command]
    full = run(setup.env, *argv, "--format", "text")
    assert full.returncode == 0 and len(full.stdout) > 3 * 4096, len(full.stdout)
    r, w = _small_pipe()
    proc = subprocess.Popen([str(BIN / argv[0]), *argv[1:], "--format", "text"], env=setup.env, stdout=w,
                            stderr=subprocess.PIPE, text=True)
    os.close(w)
    with os.fdopen(r, "rb") as reader:
        first = reader.readline()
    assert first  # read one line, then the reader is gone
    _, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) == (141, ""), err
    # the shell pipeline of a user: only head's line, nothing on stderr
    shell = subprocess.run(f"{shlex.join([str(BIN / argv[0]), *argv[1:]])} --format text | head -1", shell=True,
                           env=setup.env, capture_output=True, text=True, timeout=60)
    assert shell.stdout == full.stdout.splitlines(keepends=True)[0] and shell.stderr == "", shell.stderr
