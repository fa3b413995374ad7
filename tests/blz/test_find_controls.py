"""Issue 16 item 4: the search controls upstream BLZ has — several sources in one search, headingsOnly,
a heading-level filter (-H), maxLines per span, get -A/-B — and the schema-3 store they need
(section rowids carry their heading level), migrated from schema 2 on open.

Retrieval (maxLines, -A/-B) is also covered in test_service.py; CLI/MCP agreement in test_parity.py.
"""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from cairn_servers.blz import llmstxt, service, sources, store as store_module
from cairn_servers.blz.cli import run
from cairn_servers.blz.search import heading_levels, search
from cairn_servers.blz.store import LEVEL_SHIFT, SID_SHIFT, Store
from cairn_servers.core.errors import InvalidInput, NotFound, StorageError

# Every section holds "marker"; each heading names its level. Beta2 is long enough to be indexed as
# several windows (continuation sections, whose heading column is empty, keep Beta2's level). The
# front matter starts a page whose first section has no heading (level 0), as the preamble has.
LONG = "\n".join(f"marker line {i} of the long section" for i in range(150))
LEVELS = f"""Preamble marker text before any heading.

# Alpha1

marker in alpha one.

## Beta2

{LONG}

### Gamma3

marker in gamma three.

## Delta2

marker in delta two.

---
url: https://example.com/next
title: Next page
---

marker in the page's text before its first heading.

# Eps1

marker in eps one.

###### Zeta6

marker in zeta six.
"""
EXPECTED = {0: {"", "Next page"}, 1: {"Alpha1", "Eps1"}, 2: {"Beta2", "Delta2"}, 3: {"Gamma3"}, 6: {"Zeta6"}}

ALPHA = "# Alpha Guide\n\nIntro text about alpha.\n\n## Installing\n\nRun the installer with pip.\n\n## Widgets\n\nWidgets are frobnicated.\n"
BETA = "# Beta\n\n## Widgets in beta\n\nBeta has widgets.\n\n## Installing beta\n\npip install beta\n"
GAMMA = "# Gamma\n\n## Widgets\n\nGamma widgets.\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def ranked(hits: list[dict[str, Any]]) -> list[tuple[str, str, float]]:
    """Hits as (alias, lines, score), best first; ties (equal scores) in a fixed order."""
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    return sorted(((h["alias"], h["lines"], h["score"]) for h in hits), key=lambda t: (-t[2], t[0], t[1]))


def last_heading(hit: dict[str, Any]) -> str:
    return hit["headingPath"][-1] if hit["headingPath"] else ""


@pytest.fixture
def levels_store(store: Store, tmp_path: Path) -> Store:
    doc = llmstxt.parse(LEVELS)
    assert len(doc.pages) == 2 and sum(1 for s in doc.sections if s.path[-1:] == ("Beta2",)) == 3, \
        "the fixture must hold a page boundary and a section split into windows"
    sources.add(store, "levels", str(write(tmp_path, "levels.txt", LEVELS)))
    return store


# -- the heading-level filter -------------------------------------------------------------------

@pytest.mark.parametrize("spec, levels", [
    (2, (2,)), ("2", (2,)), ("1-2", (1, 2)), (" 2 - 4 ", (2, 3, 4)), ("1,3", (1, 3)), ("<=2", (1, 2)),
    ("<3", (1, 2)), (">=5", (5, 6)), (">4", (5, 6)), ("=6", (6,)), ([1, "3-4"], (1, 3, 4)), (["2", 2], (2,)),
    ("6-6", (6,)), ("1-6", (1, 2, 3, 4, 5, 6)),
])
def test_heading_level_specs(spec: Any, levels: tuple[int, ...]) -> None:
    assert heading_levels(spec) == levels


@pytest.mark.parametrize("spec, reason", [
    ("3-1", "'3-1' is an empty range: the first level must not be greater than the last (e.g. \"1-3\")"),
    ("0", "'0': heading levels are 1-6, not 0"),
    (0, "'0': heading levels are 1-6, not 0"),
    ("7", "'7': heading levels are 1-6, not 7"),
    ("1-9", "'1-9': heading levels are 1-6, not 9"),
    ("<1", "'<1' keeps no heading level (levels are 1-6)"),
    (">6", "'>6' keeps no heading level (levels are 1-6)"),
    ("h2", "'h2' is not a heading level filter"),
    ("", "an empty level"),
    ("1,,2", "an empty level"),
    ([], "give at least one level"),
    ([True], "True is not a heading level"),
])
def test_bad_heading_level_specs_say_why(spec: Any, reason: str) -> None:
    with pytest.raises(ValueError) as err:
        heading_levels(spec)
    assert str(err.value).startswith(reason)


@pytest.mark.parametrize("levels", [(1,), (2,), (3,), (6,), (1, 2), (2, 3), (1, 3), (1, 2, 3, 4, 5, 6), (4, 5)])
def test_level_filter_keeps_exactly_the_sections_under_those_levels(levels_store: Store,
                                                                    levels: tuple[int, ...]) -> None:
    hits = search(levels_store, "marker", ["levels"], 50, levels=levels)["hits"]
    assert {last_heading(h) for h in hits} == set().union(*(EXPECTED.get(n, set()) for n in levels))
    if 2 in levels:  # every window of the long section is kept, not only the one holding its heading
        assert sum(1 for h in hits if last_heading(h) == "Beta2") == 3


def test_no_level_filter_keeps_text_before_headings(levels_store: Store) -> None:
    hits = search(levels_store, "marker", None, 50)["hits"]
    assert {last_heading(h) for h in hits} == set().union(*EXPECTED.values())


def test_level_filter_over_every_source_and_several(store: Store, tmp_path: Path) -> None:
    for alias, text in (("alpha", ALPHA), ("beta", BETA), ("gamma", GAMMA)):
        sources.add(store, alias, str(write(tmp_path, f"{alias}.txt", text)))
    top = search(store, "widgets", None, 50, levels=(1,))["hits"]
    assert top == []  # "widgets" only occurs under level-2 headings
    second = search(store, "widgets", None, 50, levels=(2,))["hits"]
    assert {h["alias"] for h in second} == {"alpha", "beta", "gamma"}
    assert ranked(second) == ranked(search(store, "widgets", None, 50)["hits"])  # the same hits and scores
    some = search(store, "widgets", ["alpha", "gamma"], 50, levels=(2, 3))["hits"]
    assert {(h["alias"], h["lines"]) for h in some} == {(h["alias"], h["lines"]) for h in second if h["alias"] != "beta"}


# -- headingsOnly -------------------------------------------------------------------------------

def test_headings_only_matches_each_sections_own_heading(store: Store, tmp_path: Path) -> None:
    sources.add(store, "alpha", str(write(tmp_path, "a.txt", ALPHA)))

    def where(query: str, **kw: Any) -> list[str]:
        return [h["lines"] for h in search(store, query, None, 10, **kw)["hits"]]

    assert where("installer") == ["5-8"]
    assert where("installer", headings_only=True) == []  # body text only
    assert where("installing", headings_only=True) == ["5-8"]
    assert where("frobnicated widgets", headings_only=True) == ["9-11"]  # any-term fallback, headings only
    # "Alpha" is in every section's path but only one section's own heading.
    assert len(where("alpha")) == 3 and where("alpha", headings_only=True) == ["1-4"]
    # The typo fallback still applies, to headings.
    found = search(store, "instaling", None, 10, headings_only=True)
    assert found["fallback"] == "corrected" and [h["lines"] for h in found["hits"]] == ["5-8"]


def test_headings_only_and_level_filter_combine(levels_store: Store) -> None:
    assert [last_heading(h) for h in search(levels_store, "gamma3", None, 10, headings_only=True)["hits"]] == ["Gamma3"]
    assert search(levels_store, "gamma3", None, 10, headings_only=True, levels=(1, 2))["hits"] == []
    assert search(levels_store, "marker", None, 10, headings_only=True)["hits"] == []


# -- several sources ----------------------------------------------------------------------------

def test_several_sources_as_a_list_or_commas(store: Store, tmp_path: Path) -> None:
    for alias, text in (("alpha", ALPHA), ("beta", BETA), ("gamma", GAMMA)):
        sources.add(store, alias, str(write(tmp_path, f"{alias}.txt", text)))
    every = search(store, "widgets", None, 50)["hits"]
    two = search(store, "widgets", ["alpha", "beta"], 50)
    assert two["sources"] == ["alpha", "beta"]
    assert {(h["alias"], h["lines"]) for h in two["hits"]} == {
        (h["alias"], h["lines"]) for h in every if h["alias"] in ("alpha", "beta")}
    ranked(two["hits"])  # best first across both sources
    assert search(store, "widgets", "alpha,beta", 50)["hits"] == two["hits"]
    assert search(store, "widgets", ["BETA , alpha", "alpha"], 50)["hits"] == two["hits"]
    assert service.find(store, "widgets", source=["alpha", "beta"], limit=50)["hits"] == two["hits"]
    assert service.find(store, "widgets", source="alpha,beta", limit=50)["hits"] == two["hits"]
    assert search(store, "widgets", [], 50)["hits"] == every  # an empty list: every source
    with pytest.raises(NotFound) as err:
        search(store, "widgets", ["alpha", "nope"], 50)
    assert err.value.message == ("No source named 'nope' (source: alpha, nope). Installed: alpha, beta, gamma. "
                                 "Add it with `blz add nope`.")
    with pytest.raises(InvalidInput, match="alias"):
        search(store, "widgets", ["alpha", "Bad/Alias"], 50)


# -- the command line ---------------------------------------------------------------------------

def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def test_cli_flags(data_root: Path, tmp_path: Path) -> None:
    for alias, text in (("alpha", ALPHA), ("beta", BETA), ("gamma", GAMMA)):
        assert cli("add", alias, str(write(tmp_path, f"{alias}.txt", text)), "--json")[0] == 0
    for command in ("search", "find"):
        code, out, err = cli(command, "widgets", "-s", "alpha,beta", "-H", "2", "--json")
        assert code == 0 and {h["alias"] for h in json.loads(out)["hits"]} == {"alpha", "beta"}, err
        code, out, _ = cli(command, "widgets", "-s", "alpha", "-s", "gamma", "--heading-level", "<=1", "--json")
        assert code == 0 and json.loads(out)["hits"] == []
        code, out, _ = cli(command, "installing", "--headings-only", "--json")
        assert code == 0 and {(h["alias"], h["lines"]) for h in json.loads(out)["hits"]} == {
            ("alpha", "5-8"), ("beta", "7-9")}
        code, out, _ = cli(command, "pip", "--headings-only", "--json")
        assert code == 0 and json.loads(out)["hits"] == []
        code, out, err = cli(command, "widgets", "-H", "3-1")
        assert (code, out) == (2, "") and err == (
            f"blz: error: Invalid parameter for '{command}': headingLevel: '3-1' is an empty range: the first "
            "level must not be greater than the last (e.g. \"1-3\")\n"), err
        code, out, err = cli(command, "widgets", "-s", "alpha,nope")
        assert (code, out) == (3, "") and err.startswith("blz: error: No source named 'nope' (source: alpha, nope). ")
    code, out, err = cli("get", "alpha:7", "-A", "2", "-B", "1", "--json")
    assert code == 0 and json.loads(out)["snippets"][0]["lines"] == "6-9", err
    code, out, err = cli("get", "alpha:1-11", "--max-lines", "3", "--text")
    assert code == 0 and out.splitlines()[0] == "--- alpha:1-3  Alpha Guide  (truncated; the rest: alpha:4-11)"
    assert out.splitlines()[1:] == ALPHA.splitlines()[:3]
    code, out, err = cli("get", "alpha:1-11", "--max-lines", "0")
    assert (code, out) == (2, "") and err == \
        "blz: error: Invalid parameter for 'get': maxLines: 0 is less than the minimum of 1\n", err
    code, out, err = cli("find", "--snippet", "alpha:5", "--snippet", "beta:1-9", "--max-lines", "2", "-A", "9", "--json")
    assert code == 0, err
    assert [(s["lines"], s.get("remaining")) for s in json.loads(out)["snippets"]] == [
        ("5-6", "alpha:7-11"), ("1-2", "beta:3-9")]
    code, _, err = cli("get", "alpha:7", "-A", "51")
    assert code == 2 and "linesAfter: 51 is greater than the maximum of 50" in err


def test_help_names_the_new_flags() -> None:
    code, out, _ = cli("find", "--help")
    assert code == 0
    for flag in ("--headings-only", "-H LEVELS, --heading-level LEVELS", "--max-lines N", "-A N, --after-context N",
                 "-B N, --before-context N", "-s ALIAS[,ALIAS], --source ALIAS[,ALIAS]"):
        assert flag in out, flag
    code, out, _ = cli("get", "--help")
    assert code == 0 and "-A N, --after-context N" in out and "-C N, --context-lines N" in out
    code, out, _ = cli("search", "--help")
    assert code == 0 and "--headings-only" in out and "-H LEVELS" in out


# -- the store: schema 3, migrated from schema 2 --------------------------------------------------

def downgrade_to_schema_2(root: Path) -> None:
    """Rewrite a schema-3 store as schema 2 wrote it: the same tables, section rowids without the level bits."""
    db = sqlite3.connect(root / "blz.db", isolation_level=None)
    try:
        db.execute("BEGIN")
        db.execute(store_module._SECTIONS.format(name="old"))
        db.execute("INSERT INTO old(rowid, heading, path, body, first_line, last_line, hpath) "
                   "SELECT rowid & ~(15 << 28), heading, path, body, first_line, last_line, hpath FROM sections")
        db.execute("DROP TABLE sections_vocab")
        db.execute("DROP TABLE sections")
        db.execute("ALTER TABLE old RENAME TO sections")
        db.execute("CREATE VIRTUAL TABLE sections_vocab USING fts5vocab(sections, 'row')")
        db.execute("PRAGMA user_version=2")
        db.execute("COMMIT")
    finally:
        db.close()


def rowids(root: Path) -> list[int]:
    db = sqlite3.connect(root / "blz.db")
    try:
        return [r for (r,) in db.execute("SELECT rowid FROM sections ORDER BY rowid")]
    finally:
        db.close()


def version(root: Path) -> int:
    db = sqlite3.connect(root / "blz.db")
    try:
        return int(db.execute("PRAGMA user_version").fetchone()[0])
    finally:
        db.close()


def answers(store: Store) -> list[Any]:
    out = []
    for levels in (None, (0,), (1,), (2,), (3,), (6,), (1, 2)):
        out.append(search(store, "marker", None, 50, levels=levels)["hits"])
        out.append(search(store, "widgets", ["alpha", "levels"], 50, levels=levels)["hits"])
    out.append(search(store, "gamma3", None, 10, headings_only=True)["hits"])
    return out


def test_schema_2_store_is_migrated_on_open(data_root: Path, tmp_path: Path) -> None:
    store = Store(data_root)
    sources.add(store, "levels", str(write(tmp_path, "levels.txt", LEVELS)))
    sources.add(store, "alpha", str(write(tmp_path, "alpha.txt", ALPHA)))
    before, ids = answers(store), rowids(data_root)
    assert any(r >> LEVEL_SHIFT & 15 for r in ids)
    store.close()
    downgrade_to_schema_2(data_root)
    assert version(data_root) == 2 and not any(r >> LEVEL_SHIFT & 15 for r in rowids(data_root))

    store = Store(data_root)
    try:
        assert answers(store) == before  # the level filter works on the migrated store
        assert version(data_root) == store_module.SCHEMA_VERSION == 4 and rowids(data_root) == ids
        assert service.validate(store)["ok"] is True
        assert store.has_term("marker")  # the vocabulary table follows the new table
        sources.add(store, "beta", str(write(tmp_path, "beta.txt", BETA)))  # writes work as before
        assert {h["alias"] for h in search(store, "widgets", None, 50, levels=(2,))["hits"]} == {"alpha", "beta"}
    finally:
        store.close()
    Store(data_root).close()  # a second open finds schema 3: nothing to do
    assert rowids(data_root)[:len(ids)] == ids


def test_a_failed_migration_changes_nothing_and_is_retried(data_root: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(data_root)
    sources.add(store, "levels", str(write(tmp_path, "levels.txt", LEVELS)))
    sources.add(store, "alpha", str(write(tmp_path, "alpha.txt", ALPHA)))
    before = answers(store)
    store.close()
    downgrade_to_schema_2(data_root)
    old = rowids(data_root)

    def broken(heads: list[tuple[int, int, int]]) -> Any:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(store_module, "level_at", broken)
    with pytest.raises(StorageError, match="Cannot open the blz database"):
        Store(data_root).db
    assert version(data_root) == 2 and rowids(data_root) == old
    monkeypatch.undo()
    store = Store(data_root)
    try:
        assert answers(store) == before and version(data_root) == 4
    finally:
        store.close()


def test_level_bits_leave_room_for_every_section() -> None:
    """sid << 32 | level << 28 | n: levels 0-6 fit in 4 bits, and n stays below them."""
    assert SID_SHIFT - LEVEL_SHIFT == 4 and 6 < 1 << (SID_SHIFT - LEVEL_SHIFT)
    assert store_module.rowid_ranges(1, (1, 2, 4)) == [
        ((1 << 32) | (1 << 28), (1 << 32) | (3 << 28) - 1), ((1 << 32) | (4 << 28), (1 << 32) | (5 << 28) - 1)]
    assert store_module.rowid_ranges(2) == [(2 << 32, (3 << 32) - 1)]


def test_integer_valued_floats_are_integers(store: Store, tmp_path: Path) -> None:
    """Regression (found by tests/hardening/test_fuzz_tools.py): JSON Schema counts 2.0 as an integer;
    find with headingLevel 0.0 was an internal error, and so was linePadding 1.0 before issue 16."""
    from cairn_servers.blz.ops import OPS

    sources.add(store, "alpha", str(write(tmp_path, "a.txt", ALPHA)))
    got = OPS["find"].call(store, {"query": "widgets", "headingLevel": [2.0], "maxResults": 5.0,
                                   "snippets": ["alpha:7"], "linePadding": 1.0, "maxLines": 1.0, "linesAfter": 0.0})
    assert [h["lines"] for h in got["hits"]] == ["9-11"]
    assert [(s["lines"], s["remaining"]) for s in got["snippets"]] == [("6-6", "alpha:7-7")]
    with pytest.raises(InvalidInput, match="headingLevel: '0': heading levels are 1-6, not 0"):
        OPS["find"].call(store, {"query": "widgets", "headingLevel": 0.0})


def test_processes_opening_a_schema_2_store_at_once_migrate_it_once(data_root: Path, tmp_path: Path) -> None:
    """Several blz processes (an MCP server, a command) may open an old store together: one migrates,
    the others wait for it and then find schema 3; every one answers the same."""
    import subprocess
    import sys

    store = Store(data_root)
    sources.add(store, "levels", str(write(tmp_path, "levels.txt", LEVELS)))
    sources.add(store, "alpha", str(write(tmp_path, "alpha.txt", ALPHA)))
    expected = search(store, "marker", None, 50, levels=(2,))["hits"]
    store.close()
    downgrade_to_schema_2(data_root)
    code = ("import json, sys; from pathlib import Path; from cairn_servers.blz.store import Store; "
            "from cairn_servers.blz.search import search; s = Store(Path(sys.argv[1])); "
            "print(json.dumps(search(s, 'marker', None, 50, levels=(2,))['hits']))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(data_root)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert json.loads(out) == expected
    assert version(data_root) == 4
