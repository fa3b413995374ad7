"""Durable citations: versions with line maps, ``alias:lines@V``, heading anchors, and ``blz diff``.

A source is updated (a local file rewritten, then ``update``) to versions with sections inserted,
deleted, moved and edited; every citation made in an older version must lead to the lines that hold
its text now, or say it was removed. Checked on the service, the CLI and a real ``blz mcp`` over stdio.
"""

from __future__ import annotations

import asyncio
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from cairn_servers.blz import service, sources, versions
from cairn_servers.blz.cli import run
from cairn_servers.blz.citation import parse_ref, slug
from cairn_servers.blz.store import Store
from cairn_servers.core.errors import InvalidInput, NotFound

pytestmark = [pytest.mark.filterwarnings("ignore:.*(removed|deprecated) as of 2026"), pytest.mark.timeout(60)]


def body(name: str, n: int = 4) -> list[str]:
    return [f"{name} line {k}: text only the {name} section holds." for k in range(1, n + 1)]


def render(order: list[str], edits: dict[str, list[str]] | None = None) -> str:
    """A file: a title, then one ``## name`` section per name (a ``### name details`` sub-section each)."""
    edits = edits or {}
    out = ["# Guide", "", "Intro of the guide.", ""]
    for name in order:
        out += [f"## {name.capitalize()} api", "", *edits.get(name, body(name)), "",
                f"### {name} details", "", f"Details of {name}.", ""]
    return "\n".join(out) + "\n"


def sections_of(text: str) -> dict[str, tuple[int, int]]:
    """name -> (first, last) line of its ``##`` section (with its sub-section, blank line after left out)."""
    lines = text.split("\n")
    starts = [(i + 1, ln[3:].split()[0].lower()) for i, ln in enumerate(lines) if ln.startswith("## ")]
    out = {}
    for k, (first, name) in enumerate(starts):
        nxt = starts[k + 1][0] if k + 1 < len(starts) else len(lines)
        out[name] = (first, nxt - 2)
    return out


V1 = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
# v2: "new" inserted before beta, gamma deleted, epsilon moved before beta, a line of delta edited
V2 = ["alpha", "epsilon", "new", "beta", "delta", "zeta"]
EDIT = {"delta": [*body("delta")[:2], "delta line 3: EDITED in version 2.", body("delta")[3]]}


def lines_of(text: str, first: int, last: int) -> str:
    return "\n".join(text.split("\n")[first - 1:last])


@pytest.fixture
def doc(tmp_path: Path) -> Path:
    path = tmp_path / "guide.txt"
    path.write_text(render(V1))
    return path


def update_to(store: Store, path: Path, text: str) -> None:
    path.write_text(text)
    assert sources.update(store, "guide")["status"] == "updated"


def test_every_old_citation_of_a_kept_section_resolves_and_a_removed_one_says_so(store: Store, doc: Path) -> None:
    sources.add(store, "guide", str(doc))
    v1 = doc.read_text()
    old = sections_of(v1)
    v2 = render(V2, EDIT)
    update_to(store, doc, v2)
    new = sections_of(v2)
    assert store.current_versions()["guide"] == 2
    for name, (first, last) in old.items():
        got = service.get(store, [f"guide:{first}-{last}@1"])
        report = got["citations"][0]
        if name == "gamma":  # deleted: said so, part by part, and no lines returned
            assert report["status"] == "removed" and got["snippets"] == []
            assert all(p["text"] == "removed" and p["removedIn"] == 2 for p in report["parts"])
            assert "removed in version 2" in report["message"]
            continue
        assert [s["lines"] for s in got["snippets"]] == [f"{new[name][0]}-{new[name][1]}"], name
        assert got["snippets"][0]["cited"] == f"guide:{first}-{last}@1" and got["snippets"][0]["version"] == 2
        content = got["snippets"][0]["content"]
        if name == "delta":  # edited: the edited line is the one that replaced it
            assert report["status"] == "changed" and "EDITED in version 2" in content
            assert [p["text"] for p in report["parts"]] == ["same", "changed", "same"]
        else:
            assert content == lines_of(v1, first, last), name
            assert report["status"] == ("unchanged" if old[name] == new[name] else "moved"), name
    # a range across a kept and a deleted section: which part went where
    first, last = old["beta"][0], old["gamma"][1]
    report = service.get(store, [f"guide:{first}-{last}@1"])["citations"][0]
    assert report["status"] == "partly removed"
    kept = [p for p in report["parts"] if p["text"] == "same"]
    gone = [p for p in report["parts"] if p["text"] == "removed"]
    assert kept[0]["now"] == f"{new['beta'][0]}-{new['beta'][1] + 1}" and f"{old['gamma'][0]}-" in gone[0]["was"]


def test_anchors_and_old_citations_resolve_across_three_updates(store: Store, doc: Path) -> None:
    sources.add(store, "guide", str(doc))
    v1 = doc.read_text()
    eps = sections_of(v1)["epsilon"]
    hit = service.find(store, "epsilon line")["hits"][0]
    assert hit["anchor"] == "guide#guide/epsilon-api" and hit["version"] == 1
    orders = [V2, ["zeta", *V2[:-1]], ["epsilon", "zeta", "alpha", "new", "delta"]]
    for n, order in enumerate(orders, start=2):
        update_to(store, doc, render(order, EDIT) + f"\nA closing line of version {n}.\n")
        text = doc.read_text()
        now = sections_of(text)
        got = service.get(store, ["guide#guide/epsilon-api"])
        # the heading's section: to the line before the next heading of its level
        assert got["snippets"][0]["lines"] == f"{now['epsilon'][0]}-{now['epsilon'][1] + 1}"
        assert got["citations"][0]["status"] == "found" and got["snippets"][0]["version"] == n
        hit = service.find(store, "epsilon line")["hits"][0]  # the same store: its cached versions renewed
        assert (hit["anchor"], hit["version"], hit["lines"]) == ("guide#guide/epsilon-api", n,
                                                                 f"{now['epsilon'][0]}-{now['epsilon'][0] + 6}")
        # the sub-section's anchor, by its last segments too
        sub = service.get(store, ["guide#epsilon-details"])["snippets"][0]
        assert sub["content"].startswith("### epsilon details")
        # the version-1 citation still finds the same text after every update
        old = service.get(store, [f"guide:{eps[0]}-{eps[1]}@1"])
        assert old["snippets"][0]["content"] == lines_of(v1, *eps) and old["citations"][0]["status"] == "moved"
    # beta was removed in version 4: its anchor says so, with its last lines
    gone = service.get(store, ["guide#guide/beta-api"])
    assert gone["snippets"] == [] and gone["citations"][0]["status"] == "removed"
    assert gone["citations"][0]["removedIn"] == 4 and gone["citations"][0]["was"].endswith("@3")
    assert service.get(store, ["guide#betaapi"])["citations"][0]["removedIn"] == 4  # by its last segment, loosely
    with pytest.raises(NotFound, match="No section guide#guide/never"):
        service.get(store, ["guide#guide/never"])
    # diff: since version 1, and since the version before
    d = versions.diff(store, "guide", 1)
    assert {e["anchor"] for e in d["added"]} == {"guide#guide/new-api", "guide#guide/new-api/new-details"}
    assert {e["anchor"] for e in d["removed"]} >= {"guide#guide/gamma-api", "guide#guide/beta-api"}
    assert "guide#guide/delta-api" in {e["anchor"] for e in d["changed"]}
    last = versions.diff(store, "guide")
    assert last["since"] == 3 and {e["anchor"] for e in last["removed"]} == {
        "guide#guide/beta-api", "guide#guide/beta-api/beta-details"}
    assert last["added"] == []


def test_versions_kept_and_refused_beyond(store: Store, doc: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import cairn_servers.blz.limits as limits

    monkeypatch.setattr(limits, "KEEP_VERSIONS", 2)
    sources.add(store, "guide", str(doc))
    for n in range(2, 5):
        update_to(store, doc, render(V1) + f"\nVersion {n}.\n")
    assert [v for v, *_r in store.versions("guide")] == [3, 4]
    assert service.get(store, ["guide:1-3@2"])["snippets"][0]["content"] == "# Guide\n\nIntro of the guide."
    with pytest.raises(InvalidInput, match=r"versions 2-4 are kept \(the line maps of the last 2 updates\)"):
        service.get(store, ["guide:1-3@1"])
    with pytest.raises(NotFound, match="guide has no version 9: its current version is 4"):
        service.get(store, ["guide:1-3@9"])
    with pytest.raises(InvalidInput, match="starts past the end: version 2 of guide had"):
        service.get(store, ["guide:900-901@2"])
    sources.remove(store, "guide")
    assert store.versions("guide") == []


def test_citation_forms_are_parsed_or_refused() -> None:
    ref = parse_ref("React:1-3,5-9@v4")
    assert (ref.alias, ref.ranges, ref.version, ref.anchor) == ("react", [(1, 3), (5, 9)], 4, None)
    ref = parse_ref("react#Hooks/use-effect/")
    assert (ref.alias, ref.ranges, ref.anchor) == ("react", [], "hooks/use-effect")
    assert slug("useEffect") == "use-effect" and slug("[Props](https://x) & refs!") == "props-refs"
    assert slug("Initial render {/*initial-render*/}") == "initial-render" and slug("???") == "_"
    for bad, message in (("react:1-3@0", "Invalid version '0'"), ("react:1-3@x", "Invalid version 'x'"),
                         ("react#a b", "Invalid anchor 'a b'"), ("react#hooks@2", "an anchor names a section")):
        with pytest.raises(InvalidInput, match=message):
            parse_ref(bad)


def test_line_map_is_compact_and_exact() -> None:
    old = [f"line {k}" for k in range(1, 2001)]
    new = old[:100] + ["inserted"] * 3 + old[100:500] + old[600:1500] + old[500:600] + old[1500:]
    new[1700] = "edited"
    m = versions.line_map(old, new)
    for i, j, n in m.same:  # every kept run holds the same text
        assert old[i - 1:i - 1 + n] == new[j - 1:j - 1 + n]
    assert sum(n for _i, _j, n in m.same) == 1999 and len(m.same) <= 6 and len(m.encode()) < 200
    assert versions.LineMap.decode(m.encode()) == m
    moved = versions.follow(501, 600, [(2, m)])
    assert [(p.kind, p.now) for p in moved] == [("same", (1404, 1503))]


# -- the CLI and MCP surfaces ----------------------------------------------------------------------

def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def test_cli_get_at_a_version_anchor_and_diff(data_root: Path, doc: Path) -> None:
    v1 = doc.read_text()
    assert cli("add", "guide", str(doc), "--json")[0] == 0
    zeta = sections_of(v1)["zeta"]
    gamma = sections_of(v1)["gamma"]
    doc.write_text(render(V2, EDIT))
    assert cli("update", "guide", "--json")[0] == 0
    code, out, err = cli("get", f"guide:{zeta[0]}-{zeta[1]}@1", f"guide:{gamma[0]}-{gamma[1]}@1", "--json")
    assert code == 0 and err == ""
    answer = json.loads(out)
    assert [c["status"] for c in answer["citations"]] == ["unchanged", "removed"]
    assert answer["snippets"][0]["content"] == lines_of(v1, *zeta)
    code, out, _ = cli("get", f"guide:{gamma[0]}-{gamma[1]}@1", "--text")
    assert code == 0 and out == (f"(guide:{gamma[0]}-{gamma[1]}@1 (version 1) in version 2: {gamma[0]}-{gamma[1]} "
                                 "removed in version 2)\n")
    code, out, err = cli("get", f"guide:{gamma[0]}-{gamma[1]}@1", "--jsonl")  # rows are snippets: told on stderr
    assert code == 0 and out == "" and err == (f"blz: note: guide:{gamma[0]}-{gamma[1]}@1 (version 1) in version 2: "
                                               f"{gamma[0]}-{gamma[1]} removed in version 2\n")
    code, out, _ = cli("get", "guide#delta-api", "--text")
    assert code == 0 and out.startswith("(guide#delta-api in version 2: lines ") and "EDITED in version 2" in out
    code, out, _ = cli("diff", "guide", "--since", "1", "--text")
    assert code == 0 and "- guide#guide/gamma-api  removed in version 2; was guide:" in out
    assert "+ guide#guide/new-api  guide:" in out and "~ guide#guide/delta-api  guide:" in out
    assert out.rstrip().endswith("guide: version 1 -> 2: 2 sections added, 2 removed, 1 changed")
    code, out, err = cli("diff", "guide", "--since", "7")
    assert code == 3 and err == "blz: error: guide has no version 7: its current version is 2.\n"
    code, out, _ = cli("search", "zeta line", "--json")
    hit = json.loads(out)["hits"][0]
    assert hit["anchor"] == "guide#guide/zeta-api" and hit["version"] == 2


async def _over_mcp(params: StdioServerParameters, gamma: str, zeta: str) -> dict[str, Any]:
    async with Client(params, cache=None) as client:
        found = await client.call_tool("find", {"query": "epsilon line", "snippets": [zeta, gamma, "guide#epsilon-api"]})
        assert not found.is_error, found.content
        diff = await client.call_tool("diff", {"source": "guide", "since": 1})
        assert not diff.is_error, diff.content
        with pytest.raises(MCPError, match="since: 0 is less than the minimum of 1"):
            await client.call_tool("diff", {"source": "guide", "since": 0})
        return {"find": found.structured_content, "diff": diff.structured_content}


def test_mcp_find_follows_durable_citations_and_diff_lists_sections(data_root: Path, doc: Path) -> None:
    store = Store(data_root)
    sources.add(store, "guide", str(doc))
    v1 = doc.read_text()
    zeta, gamma = sections_of(v1)["zeta"], sections_of(v1)["gamma"]
    update_to(store, doc, render(V2, EDIT))
    store.close()
    params = StdioServerParameters(command=sys.executable, args=["-m", "cairn_servers.blz.cli", "mcp"],
                                   env={"BLZ_DATA_DIR": str(data_root)})
    got = asyncio.run(asyncio.wait_for(_over_mcp(params, f"guide:{gamma[0]}-{gamma[1]}@1",
                                                 f"guide:{zeta[0]}-{zeta[1]}@1"), 50))
    found = got["find"]
    assert found["hits"][0]["anchor"] == "guide#guide/epsilon-api" and found["hits"][0]["version"] == 2
    assert [c["status"] for c in found["citations"]] == ["unchanged", "removed", "found"]
    assert found["snippets"][0]["content"] == lines_of(v1, *zeta)
    assert found["snippets"][1]["content"].startswith("## Epsilon api")
    assert {e["anchor"] for e in got["diff"]["removed"]} == {"guide#guide/gamma-api", "guide#guide/gamma-api/gamma-details"}


def test_line_map_of_unrelated_and_repetitive_texts() -> None:
    """Nothing in common, and a text of repeated lines: bounded work, every kept run exact."""
    m = versions.line_map([f"a{k}" for k in range(3000)], [f"b{k}" for k in range(2000)])
    assert m.same == [] and m.changed == [(1, 3000, 1, 2000)]
    old = ["x", "y"] * 3000 + [f"u{k}" for k in range(3000)]
    new = [f"u{k}" for k in range(0, 3000, 2)] + ["y", "x"] * 2900
    m = versions.line_map(old, new)
    for i, j, n in m.same:
        assert old[i - 1:i - 1 + n] == new[j - 1:j - 1 + n]


def test_sections_indexed_without_stored_anchors_get_the_same_ones(store: Store, doc: Path) -> None:
    """A store from before anchors were kept with each section: hits compute the same anchors."""
    sources.add(store, "guide", str(doc))
    before = [(h["lines"], h["anchor"]) for h in service.find(store, "details", limit=20)["hits"]]
    assert before and all(a for _l, a in before)
    store.db.execute("UPDATE sections SET hpath = substr(hpath, 1, instr(hpath, char(30)) - 1)")
    assert store.db.execute("SELECT count(*) FROM sections WHERE instr(hpath, char(30)) > 0").fetchone()[0] == 0
    assert [(h["lines"], h["anchor"]) for h in service.find(store, "details", limit=20)["hits"]] == before
