"""The warm-find fast paths (h-blzfind) give exactly what the code they replaced gave.

Each rewritten piece is compared with the code it replaced, kept here as the reference, on many
generated inputs (property style, fixed seeds): the snippet window, the public form of a tool result,
the section reads, the cached source list.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest

from cairn_servers.blz import tools
from cairn_servers.blz.search import SNIPPET_CHARS, snippet
from cairn_servers.core import sanitize
from cairn_servers.core.sanitize import scrub
from cairn_servers.mcp.content import ToolResult
from cairn_servers.mcp.content import text as content_text
from cairn_servers.mcp.jsonrpc import JsonText


def snippet_before(body: str, needles: list[str], width: int = SNIPPET_CHARS) -> str:
    """cairn_servers.blz.search.snippet as it was before h-blzfind (5eda24d)."""
    low = body.lower()
    hits: list[tuple[int, int]] = []  # (position, word index)
    for k, word in enumerate(needles):
        pos = low.find(word)
        count = 0
        while pos != -1 and count < 20:
            hits.append((pos, k))
            pos = low.find(word, pos + len(word))
            count += 1
    start = 0
    if hits:
        hits.sort()
        best, ahead = -1, 0
        inside: dict[int, int] = {}  # word index -> hits in the window
        for pos, k in hits:
            while ahead < len(hits) and hits[ahead][0] < pos + width - 40:
                inside[hits[ahead][1]] = inside.get(hits[ahead][1], 0) + 1
                ahead += 1
            if len(inside) > best:
                best, start = len(inside), pos
            if inside[k] == 1:
                del inside[k]
            else:
                inside[k] -= 1
        start = max(0, start - 40)
        if start:
            space = body.rfind(" ", 0, start)
            start = space + 1 if space > start - 20 else start
    end = min(len(body), start + width)
    if end < len(body):
        space = body.rfind(" ", start + width // 2, end)
        end = space if space > 0 else end
    text = " ".join(body[start:end].split())
    return ("…" if start > 0 else "") + text + ("…" if end < len(body) else "")


# Words that overlap (state/usestate, use/user), differ in case, repeat, or change length when
# lowered (İ), so needles meet at the same or overlapping positions.
_WORDS = ["state", "useState", "use", "user", "hook", "hooks", "a", "aa", "İstanbul", "ß", "effect",
          "useEffect", "x", "the", "é", "Ωmega", "\u212a", "k"]
_GLUE = [" ", "  ", "\n", "", "-", ".", "\t", " \n ", "—", "\u00a0"]


def _body(rng: random.Random) -> str:
    size = rng.choice([0, 1, 3, 10, 40, 120, 400, 1200])
    parts = []
    for _ in range(size):
        parts.append(rng.choice(_WORDS) if rng.random() < 0.6 else "".join(
            rng.choice("abcdefghijklmnopqrstuvwxyzABC ") for _ in range(rng.randint(1, 12))))
        parts.append(rng.choice(_GLUE))
    return "".join(parts)


def test_snippet_matches_the_code_it_replaced() -> None:
    rng = random.Random(16)
    checked = 0
    for _ in range(3000):
        body = _body(rng)
        needles = list(dict.fromkeys(w.lower() for w in rng.sample(_WORDS, rng.randint(1, 4))))
        width = SNIPPET_CHARS if rng.random() < 0.7 else rng.randint(41, 400)
        assert snippet(body, needles, width) == snippet_before(body, needles, width), (body, needles, width)
        checked += 1
    assert checked == 3000


def test_snippet_edge_cases_match() -> None:
    cases: list[tuple[str, list[str]]] = [
        ("", ["a"]), ("a", ["a"]), ("no hit here", ["zzz"]), ("x" * 500, ["x"]), ("x" * 500, ["x", "y"]),
        ("y " * 300 + "x", ["x"]), ("y" * 300 + "x", ["x"]), ("a" * 10 + " " + "b" * 300 + "x", ["x", "b"]),
        (" " * 30 + "hook" + " " * 300, ["hook"]), ("İ" * 100 + " state", ["state"]), ("ab" * 400, ["ab", "ba"]),
        ("use " * 30 + "state " * 30, ["use", "state"]), ("word " * 100, ["word", "word"]),
        # y exactly one window (200 characters) after the first x: the window starting at y holds more
        ("x" + " " * 199 + "y" + " " * 49 + "x" + " " * 300, ["x", "y"]),
        ("x" + " " * 198 + "y" + " " * 49 + "x" + " " * 300, ["x", "y"]),
    ]
    for body, needles in cases:
        for width in (SNIPPET_CHARS, 41, 60, 500):
            assert snippet(body, needles, width) == snippet_before(body, needles, width), (body, needles, width)


# -- public_result: the public form of each hit's sourceUrl, made once, leaves the scrub nothing to change --


def _hide_local_paths_before(text: str) -> str:
    """cairn_servers.blz.tools._hide_local_paths as it was before h-blzfind (5eda24d)."""
    def short(m: re.Match[str]) -> str:
        parts = [p for p in m.group(1).split("/") if p]
        return "file://<local>/" + "/".join(parts[-2:])

    return re.sub(r"file://(/[^\s\"'<>]*)", short, text)


def public_result_before(value: dict[str, Any]) -> ToolResult:
    """cairn_servers.blz.tools.public_result as it was before h-blzfind (5eda24d)."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except ValueError:
        scrubbed = tools.public(value)
        return ToolResult([content_text(str(scrubbed))], structured=scrubbed)
    cleaned = _hide_local_paths_before(scrub(text))
    structured = value if cleaned == text else json.loads(cleaned)
    return ToolResult([content_text(JsonText(cleaned, structured))], structured=structured)


def _url(rng: random.Random, home: str, root: str) -> Any:
    parts = ["docs", "llms.txt", "a b", "x\"y", "q'r", "<p>", "ü", "rootfs", "a\\b", "tab\tx", "@", "u:p@h",
             home.strip("/"), root.strip("/"), "", ".", "-x"]
    path = "/".join(rng.choice(parts) for _ in range(rng.randint(0, 4)))
    return rng.choice([
        f"file://{home}/{path}", f"file://{root}/{path}", f"file://{root}", f"file://{home}", f"file:///{path}",
        f"file://{path}", f"https://user:secret@example.com/{path}", f"https://example.com/{path}",
        f"{home}/{path}", f"{root}/{path}", f"http://127.0.0.1:8000/{path}", "file:///", "", f"file://<local>/{path}",
        f"s3://tok@{path}", None, 5, f"file://{home}/{path}\n", f"file://{root}/{path} file://{home}/x",
    ])


def test_public_result_matches_the_code_it_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = str(tmp_path / "home")
    root = str(tmp_path / "data")
    monkeypatch.setenv("HOME", home)
    rng = random.Random(16)
    try:
        sanitize.register_root(root, "<blz-data>")
        for n in range(2500):
            if n == 2000:  # a secret is masked wherever it occurs, here across a URL's opening quote
                sanitize.register_secret('"sourceUrl": "file://' + home[:4])
            urls = [_url(rng, home, root) for _ in range(rng.randint(0, 3))]
            hits: list[Any] = []
            for _ in range(rng.randint(0, 6)):
                hit: dict[str, Any] = {"alias": "react", "lines": "1-2", "snippet": rng.choice(
                    ["plain", f"see {home}/notes", f"file://{root}/x", "a\"b"]), "score": 1.5}
                if urls and rng.random() < 0.9:
                    hit["sourceUrl"] = rng.choice(urls)
                hits.append(hit if rng.random() < 0.95 else "not a hit")
            value: dict[str, Any] = {"snippets": [], "hits": hits, "executed": {"searched": True}}
            if rng.random() < 0.1:
                value["correctedQuery"] = f"{home}/x"
            try:
                old = public_result_before(value)
            except ValueError:  # the mask broke the JSON: so it does in the new code
                with pytest.raises(ValueError):
                    tools.public_result(value)
                continue
            new = tools.public_result(value)
            assert new.structured == old.structured, (value, new.structured, old.structured)
            assert str(new.content[0]["text"]) == str(old.content[0]["text"]), value
            assert value["hits"] == hits  # the caller's result is not changed
    finally:
        sanitize.clear_secrets()
        sanitize.clear_roots()


def test_public_result_parses_nothing_again_for_local_sources(tmp_path: Path) -> None:
    """The point of the change: a find over local files no longer re-parses its scrubbed text."""
    url = (tmp_path / "docs" / "llms.txt").as_uri()
    value = {"hits": [{"alias": "docs", "sourceUrl": url, "snippet": "x"}] * 10}
    result = tools.public_result(value)
    assert result.structured is not None
    assert all(h["sourceUrl"] == "file://<local>/docs/llms.txt" for h in result.structured["hits"])
    assert json.loads(str(result.content[0]["text"])) == result.structured
    # Unchanged by the scrub: the structured value is the one serialized, not a re-parse of the text.
    assert result.content[0]["text"].value is result.structured


# -- Store.aliases_by_sid: kept while the database is unchanged, read again after any commit ------------


def test_aliases_by_sid_sees_every_change_from_this_and_other_connections(tmp_path: Path) -> None:
    from cairn_servers.blz import sources
    from cairn_servers.blz.store import Store

    doc = tmp_path / "llms.txt"
    doc.write_text("# Title\n\n## Part\n\nSome text about hooks.\n", encoding="utf-8")
    root = tmp_path / "data"
    mine, other = Store(root), Store(root)  # two connections, as a server and a `blz add` process have

    def fresh() -> dict[int, tuple[str, str]]:
        return {sid: (alias, url) for alias, url, sid in mine.db.execute("SELECT alias, url, sid FROM sources")}

    try:
        assert mine.aliases_by_sid() == {} == fresh()
        sources.add(other, "one", str(doc))  # another connection commits
        assert [a for a, _u in mine.aliases_by_sid().values()] == ["one"]
        sources.add(mine, "two", str(doc))  # this connection writes
        assert sorted(a for a, _u in mine.aliases_by_sid().values()) == ["one", "two"]
        assert mine.aliases_by_sid() is mine.aliases_by_sid()  # unchanged: kept, not read again
        other.db.execute("UPDATE sources SET url = 'https://example.com/llms.txt' WHERE alias = 'one'")
        assert mine.aliases_by_sid() == fresh() and "https://example.com/llms.txt" in str(mine.aliases_by_sid())
        sources.remove(other, "two")
        assert mine.aliases_by_sid() == fresh() and len(fresh()) == 1
        mine.delete_source("one")
        assert mine.aliases_by_sid() == {} == fresh()
        mine.close()  # a new connection: its own change count starts again
        sources.add(mine, "three", str(doc))
        assert [a for a, _u in mine.aliases_by_sid().values()] == ["three"] and mine.aliases_by_sid() == fresh()
    finally:
        mine.close()
        other.close()


def test_sections_reads_what_the_fts_table_returns(tmp_path: Path) -> None:
    """Store.sections reads the FTS5 content table directly: the same values as selecting from the table."""
    from cairn_servers.blz import sources
    from cairn_servers.blz.store import Store

    rng = random.Random(16)
    doc = tmp_path / "llms.txt"
    doc.write_text("# Title\n\nIntro with ü and \u2026.\n\n" + "".join(
        f"## Part {i}\n\n{'word ' * rng.randint(0, 50)}line {i}\n\n### Sub {i}\n\nmore\n\n" for i in range(60)),
        encoding="utf-8")
    store = Store(tmp_path / "data")
    try:
        sources.add(store, "one", str(doc))
        sources.add(store, "two", str(doc))
        rowids = [r for (r,) in store.db.execute("SELECT rowid FROM sections")]
        assert len(rowids) > 200
        for _ in range(200):
            pick = rng.sample(rowids, rng.randint(2, 12))
            expected = [store.db.execute("SELECT first_line, last_line, hpath, body FROM sections WHERE rowid = ?",
                                         (r,)).fetchone() for r in pick]
            assert store.sections(pick) == expected
    finally:
        store.close()
