"""The query syntax (+required, -excluded, "phrases", title:/heading:) on every surface: the parser,
search itself, `blz search` / `blz find` in every output format, and `find` over MCP (a real client on
a real `blz mcp` over stdio). CLI/MCP agreement on the same queries is in test_parity.py."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

import mcp_types as t
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from cairn_servers.blz import sources
from cairn_servers.blz.cli import run
from cairn_servers.blz.query import Term, match, parse
from cairn_servers.blz.search import search
from cairn_servers.blz.store import Store
from cairn_servers.core.errors import InvalidInput

from .conftest import blz

DOC = """# Guide

Intro to the guide.

## Async functions

async functions return promises. Await them.

## Hooks

Hooks let you reuse state. Hooks are not classes.

## Class components

Class components hold state in this.state; async work goes in lifecycle methods. They cannot use hooks.

## Deprecated APIs

The old async API is deprecated.
"""
ASYNC, HOOKS, CLASS, DEPRECATED = "5-8", "9-12", "13-16", "17-19"


def lines(result: dict[str, Any]) -> set[str]:
    return {h["lines"] for h in result["hits"]}


@pytest.fixture
def guide(store: Store, tmp_path: Path) -> Store:
    path = tmp_path / "guide.txt"
    path.write_text(DOC)
    sources.add(store, "guide", str(path))
    return store


def T(text: str, heading: bool = False, quoted: bool = False) -> Term:
    return Term(text, heading, quoted, tuple(re.findall(r"\w+", text)))


# -- the parser ---------------------------------------------------------------------------------

def test_terms_by_kind() -> None:
    q = parse('hooks +async -class "return promises" title:guide -title:"old api" +heading:Hooks')
    assert q.plain == (T("hooks"), T("return promises", quoted=True), T("guide", heading=True))
    assert q.required == (T("async"), T("Hooks", heading=True))
    assert q.excluded == (T("class"), T("old api", heading=True, quoted=True))


@pytest.mark.parametrize("text, plain", [
    ("--force", ("--force",)),  # a sign is one + or - before a word: flags and C++ are plain words
    ("C++ x", ("C++", "x")),
    ("use-effect", ("use-effect",)),  # a phrase for FTS5, as before
    ("a - b", ("a", "b")),  # a lone sign has no word: dropped
    ("title: hooks", ("title:", "hooks")),  # title: must touch its word
    ("std::vector", ("std::vector",)),
])
def test_what_is_not_an_operator(text: str, plain: tuple[str, ...]) -> None:
    q = parse(text)
    assert tuple(term.text for term in q.plain) == plain
    assert not q.required and not q.excluded and not any(term.heading for term in q.plain)


def test_fields_are_case_insensitive() -> None:
    assert parse("TITLE:x Heading:y").plain == (T("x", heading=True), T("y", heading=True))


def test_a_required_term_is_not_also_plain() -> None:
    assert parse("async +async").plain == () and parse("async +async").required == (T("async"),)


def test_the_expression_quotes_every_term() -> None:
    q = parse('a +"b c" -d title:e')
    assert match(q) == '("a" AND heading : "e" AND "b c") NOT ("d")'
    assert match(q, any_plain=True) == '(("a" OR heading : "e") AND "b c") NOT ("d")'
    assert match(q, headings_only=True) == '(heading : ("a" AND heading : "e" AND "b c")) NOT ("d")'
    assert match(parse('x AND OR NOT "y""')) == '"x" AND "AND" AND "OR" AND "NOT" AND "y"'


def test_only_excluding_is_refused() -> None:
    with pytest.raises(InvalidInput) as err:
        parse("-class -title:old")
    assert err.value.message == ("The query '-class -title:old' only excludes words (-word); add a word to search "
                                 "for, e.g. 'hooks -class'.")


@pytest.mark.parametrize("sign", ["+", "-", "title:", "+heading:"])
def test_the_phrase_cap_counts_signed_and_titled_phrases(sign: str) -> None:
    phrase = sign + '"' + " ".join(["hooks"] * 4097) + '"'
    with pytest.raises(InvalidInput, match="The query.s phrases hold 4,098 words; the limit is 4,096"):
        parse("x " + phrase)
    parse("x " + sign + '"' + " ".join(["hooks"] * 40) + '"')


def test_the_term_cap_holds_with_signs() -> None:
    with pytest.raises(InvalidInput, match="The query has 257 distinct words; the limit is 256"):
        parse(" ".join(f"+w{i}" for i in range(257)))
    with pytest.raises(InvalidInput, match="The query has 257 distinct words"):
        parse("x " + " ".join(f"-w{i}" for i in range(256)))


# -- search -------------------------------------------------------------------------------------

def test_a_required_word_holds_through_the_fallbacks(guide: Store) -> None:
    assert lines(search(guide, "async zzzqqq")) >= {ASYNC}  # plain: any word may match
    for query in ("+zzzqqq +async", "+zzzqqq async", "async +zzzqqq", '+"promises return" async'):
        result = search(guide, query)
        assert result["hits"] == [] and result["fallback"] is None, query
    required = search(guide, "+async")
    assert lines(required) == {ASYNC, CLASS, DEPRECATED}
    # any-term keeps the required word: promises OR hooks, AND async
    fell = search(guide, "promises hooks +async")
    assert fell["fallback"] == "any-term" and lines(fell) == {ASYNC, CLASS}


def test_an_excluded_word_removes_hits(guide: Store) -> None:
    assert lines(search(guide, "async")) == {ASYNC, CLASS, DEPRECATED}
    assert lines(search(guide, "async -class")) == {ASYNC, DEPRECATED}
    assert lines(search(guide, "async -class -deprecated")) == {ASYNC}
    assert lines(search(guide, 'async -"return promises"')) == {CLASS, DEPRECATED}
    # excluded through the fallbacks too
    fell = search(guide, "promises state -hooks")
    assert fell["fallback"] == "any-term" and lines(fell) == {ASYNC}
    typo = search(guide, "asynk -deprecated")
    assert typo["fallback"] == "corrected" and typo["correctedQuery"] == "async -deprecated"
    assert lines(typo) == {ASYNC, CLASS}
    # excluded wherever it is, with --headings-only too: "Async functions" says promises in its body
    assert lines(search(guide, "async", headings_only=True)) == {ASYNC}
    assert search(guide, "async -promises", headings_only=True)["hits"] == []


def test_title_terms_match_the_heading_only(guide: Store) -> None:
    assert lines(search(guide, "hooks")) == {HOOKS, CLASS}
    assert lines(search(guide, "title:hooks")) == {HOOKS}
    assert lines(search(guide, "heading:HOOKS state")) == {HOOKS}
    assert lines(search(guide, "async -title:class")) == {ASYNC, DEPRECATED}
    assert lines(search(guide, 'title:"class components"')) == {CLASS}
    assert search(guide, "title:promises")["hits"] == []  # in a body, not a heading
    assert lines(search(guide, "+title:deprecated async")) == {DEPRECATED}


def test_an_unmatched_phrase_falls_back_and_says_so(guide: Store) -> None:
    assert lines(search(guide, '"return promises"')) == {ASYNC}
    fell = search(guide, '"promises return"')
    assert fell["fallback"] == "any-term" and lines(fell) == {ASYNC}
    assert fell["note"] == ("nothing matches all of '\"promises return\"' (as a phrase or every word); "
                            "showing sections with any of its words")
    signed = search(guide, '"promises return" -class')
    assert signed["note"].endswith("; +required and -excluded terms still apply")
    assert "note" not in search(guide, '"return promises"')


def test_the_snippet_centres_on_required_words(guide: Store) -> None:
    hit = search(guide, "+lifecycle")["hits"][0]
    assert "lifecycle" in hit["snippet"]


# -- the command line ---------------------------------------------------------------------------

@pytest.fixture
def cli_guide(tmp_path: Path, data_root: Path) -> None:
    path = tmp_path / "guide.txt"
    path.write_text(DOC)
    assert blz("add", "guide", str(path))[0] == 0


@pytest.mark.usefixtures("cli_guide")
@pytest.mark.parametrize("command", ["search", "find"])
def test_cli_query_syntax(command: str) -> None:
    def hits(query: str) -> set[str]:
        code, out, err = blz(command, "--json", "--", query)
        assert code == 0 and err == "", err
        return {h["lines"] for h in json.loads(out)["hits"]}

    assert hits("+zzzqqq +async") == set()
    assert hits("async -class") == {ASYNC, DEPRECATED}
    assert hits("title:hooks") == {HOOKS}
    assert hits('"return promises"') == {ASYNC}
    code, out, err = blz(command, "-class -deprecated", "--json")  # a space: argparse takes it as the query
    assert (code, out) == (2, "") and err == ("blz: error: The query '-class -deprecated' only excludes words "
                                              "(-word); add a word to search for, e.g. 'hooks -class'.\n")
    code, out, err = blz(command, " ".join(f"+w{i}" for i in range(300)), "--json")
    assert (code, out) == (2, "") and err.startswith("blz: error: The query has 300 distinct words; the limit is 256.")
    code, out, _ = blz(command, "--text", "--", "--force")  # one word starting with -: after --
    assert code == 0 and "No results" in out
    # A query starting with an excluded word is the query, even where its letters spell a short option
    # (-h, -s, -n): argparse would take "-sync x" as -s "ync x".
    for query, found in (("-hooks async", {ASYNC, DEPRECATED}), ("-sync async", {ASYNC, CLASS, DEPRECATED}),
                         ("-new async -class", {ASYNC, DEPRECATED})):
        code, out, err = blz(command, query, "--json")
        assert code == 0 and {h["lines"] for h in json.loads(out)["hits"]} == found, (query, err)
    code, out, err = blz(command, "async", "-s", "guide", "-n", "1", "--json")  # options still work
    assert code == 0 and len(json.loads(out)["hits"]) == 1


@pytest.mark.usefixtures("cli_guide")
@pytest.mark.parametrize("command", ["search", "find"])
def test_a_fallback_is_said_in_every_output_format(command: str) -> None:
    query = '"promises return" -class'
    note = ("nothing matches all of '\"promises return\" -class' (as a phrase or every word); showing sections "
            "with any of its words; +required and -excluded terms still apply")
    code, out, err = blz(command, query, "--json")
    data = json.loads(out)
    assert code == 0 and err == "" and data["fallback"] == "any-term" and data["note"] == note
    code, out, err = blz(command, query, "--text")
    assert code == 0 and out.startswith(f"({note})\n{'guide:' + ASYNC}") and err == ""
    for fmt in ("jsonl", "csv", "tsv", "md"):
        code, out, err = blz(command, query, "--format", fmt)
        assert code == 0 and ASYNC in out and err == f"blz: note: {note}\n", (fmt, err)
    typo = "no exact match; showing results for 'async -class'"
    code, out, err = blz(command, "asynk -class", "--format", "csv")
    assert code == 0 and err == f"blz: note: {typo}\n"
    code, out, err = blz(command, "asynk -class", "--text")
    assert out.startswith(f"({typo})\n")
    for fmt in ("json", "jsonl", "csv", "text"):  # no fallback: nothing said
        code, out, err = blz(command, "async -class", "--format", fmt)
        assert code == 0 and err == "" and "note" not in out and "(nothing" not in out


def test_the_syntax_is_in_the_help() -> None:
    code, out, _ = blz("search", "--help")
    assert code == 0
    text = " ".join(out.split())
    for part in ('"a phrase" matches those words in that order', "+word is required even when the search falls "
                 "back", "-word (or -\"a phrase\") drops every section holding it", "title:word (or heading:word",
                 "blz search -- --force", 'in "fallback" and "note" in JSON'):
        assert part in text, part


# -- MCP find over stdio ------------------------------------------------------------------------

def _data(res: t.CallToolResult) -> Any:
    assert not res.is_error, res.content
    body = json.loads(res.content[0].text)  # type: ignore[union-attr]
    assert res.structured_content == body
    return body


async def _mcp(params: StdioServerParameters) -> None:
    async with Client(params, cache=None) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        described = " ".join((tools["find"].description or "").split())
        for part in ("+word is required even when the search falls back", "-word (or -\"a phrase\") drops",
                     "title:word (or heading:word", '(fallback: "any-term")', "note says what was done"):
            assert part in described, part

        async def found(query: str) -> dict[str, Any]:
            result: dict[str, Any] = _data(await client.call_tool("find", {"query": query, "source": "guide"}))
            return result

        none = await found("+zzzqqq +async")
        assert none["hits"] == [] and "fallback" not in none
        assert {h["lines"] for h in (await found("async"))["hits"]} == {ASYNC, CLASS, DEPRECATED}
        assert {h["lines"] for h in (await found("async -class"))["hits"]} == {ASYNC, DEPRECATED}
        assert {h["lines"] for h in (await found("title:hooks"))["hits"]} == {HOOKS}
        fell = await found('"promises return"')
        assert fell["fallback"] == "any-term" and fell["note"].startswith("nothing matches all of")
        assert [h["lines"] for h in fell["hits"]] == [ASYNC]
        with pytest.raises(MCPError) as bad:
            await client.call_tool("find", {"query": " ".join(f"+w{i}" for i in range(300))})
        assert bad.value.error.code == -32602 and "the limit is 256" in bad.value.message
        with pytest.raises(MCPError) as only:
            await client.call_tool("find", {"query": "-class"})
        assert only.value.error.code == -32602 and "only excludes words" in only.value.message


def test_mcp_find_query_syntax(tmp_path: Path, data_root: Path) -> None:
    path = tmp_path / "guide.txt"
    path.write_text(DOC)
    store = Store(data_root)
    sources.add(store, "guide", str(path))
    store.close()
    params = StdioServerParameters(command=sys.executable, args=["-m", "cairn_servers.blz.cli", "mcp"],
                                   env={"BLZ_DATA_DIR": str(data_root)})
    asyncio.run(asyncio.wait_for(_mcp(params), 60))
