"""Versions of a source and the line maps between them: what keeps ``alias:120-142@V`` citable after updates.

Every update that changes a source's content gives it a new version (1 at ``blz add``) and stores a
*line map* from the previous version to the new one, computed from the two texts:

- ``same``: runs of lines whose text is unchanged, ``(old_start, new_start, length)``: the lines that
  stayed in place, shifted by insertions and deletions above them, and runs that moved elsewhere;
- ``changed``: old runs whose text was edited, ``(old_start, old_len, new_start, new_len)``: the
  new lines that replaced them;
- any old line in neither was deleted.

A map is a few entries per edited place (never a per-line table and never the old text), kept with the
sections added, removed and changed in that update (by anchor), for the last
:data:`cairn_servers.blz.limits.KEEP_VERSIONS` updates.
Old files are not kept.

The diff is a patience diff (lines unique in both texts anchor the alignment, the longest increasing
run of them is kept, matches are grown around each anchor, and the gaps are aligned again inside),
then unique lines that the alignment left out are matched as moved runs. On react.dev's 92k-line file
it takes ~0.1 s where ``difflib.SequenceMatcher`` takes over a second.
"""

from __future__ import annotations

import json
import zlib
from bisect import bisect_left
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from cairn_servers.blz.store import Store

_MOVE_MIN_CHARS = 6  # a one-line moved run counts when its line holds this much text (else 2+ lines)
_SMALL_GAP = 400  # gaps up to this many lines a side are aligned by difflib when no line is unique


class LineMap(NamedTuple):
    """Old version (``old`` lines) to new version (``new`` lines); ranges 1-based."""

    old: int
    new: int
    same: list[tuple[int, int, int]]  # (old_start, new_start, length), sorted by old_start
    changed: list[tuple[int, int, int, int]]  # (old_start, old_len, new_start, new_len)

    def encode(self) -> bytes:
        return zlib.compress(json.dumps([self.old, self.new, self.same, self.changed],
                                        separators=(",", ":")).encode(), 6)

    @staticmethod
    def decode(blob: bytes) -> LineMap:
        old, new, same, changed = json.loads(zlib.decompress(blob))
        return LineMap(old, new, [tuple(s) for s in same], [tuple(c) for c in changed])


# -- the diff ----------------------------------------------------------------------------------------

def line_map(a: list[str], b: list[str]) -> LineMap:
    """The line map from ``a`` (old lines) to ``b`` (new lines)."""
    blocks: list[tuple[int, int, int]] = []  # 0-based (i, j, n), monotonic
    _align(a, b, 0, len(a), 0, len(b), blocks)
    blocks.sort()
    used_a = bytearray(len(a))
    used_b = bytearray(len(b))
    for i, j, n in blocks:
        used_a[i:i + n] = b"\x01" * n
        used_b[j:j + n] = b"\x01" * n
    moved = _moves(a, b, used_a, used_b)
    # Changed: within each gap between consecutive monotonic blocks, the old lines left unmatched
    # against the new lines left unmatched (after moves).
    changed: list[tuple[int, int, int, int]] = []
    pi, pj = 0, 0
    for i, j, n in [*blocks, (len(a), len(b), 0)]:
        olds = [k for k in range(pi, i) if not used_a[k]]
        news = [k for k in range(pj, j) if not used_b[k]]
        if olds and news:
            changed.append((olds[0] + 1, olds[-1] - olds[0] + 1, news[0] + 1, news[-1] - news[0] + 1))
        pi, pj = i + n, j + n
    same = sorted((i + 1, j + 1, n) for i, j, n in [*blocks, *moved])
    return LineMap(len(a), len(b), _joined(same), changed)


def _joined(same: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    out: list[tuple[int, int, int]] = []
    for i, j, n in same:
        if out and out[-1][0] + out[-1][2] == i and out[-1][1] + out[-1][2] == j:
            out[-1] = (out[-1][0], out[-1][1], out[-1][2] + n)
        else:
            out.append((i, j, n))
    return out


def _align(a: list[str], b: list[str], alo: int, ahi: int, blo: int, bhi: int,
           out: list[tuple[int, int, int]]) -> None:
    """Append monotonic equal runs of ``a[alo:ahi]`` and ``b[blo:bhi]`` to ``out`` (0-based). The gaps
    between runs are aligned in turn from a work list (no recursion: a file can nest gaps deeply)."""
    work = [(alo, ahi, blo, bhi)]
    while work:
        _align_one(a, b, *work.pop(), out, work)


def _align_one(a: list[str], b: list[str], alo: int, ahi: int, blo: int, bhi: int,
               out: list[tuple[int, int, int]], work: list[tuple[int, int, int, int]]) -> None:
    """One step of :func:`_align`: runs of this gap to ``out``, its inner gaps to ``work``."""
    while alo < ahi and blo < bhi and a[alo] == b[blo]:  # common head
        n = 1
        while alo + n < ahi and blo + n < bhi and a[alo + n] == b[blo + n]:
            n += 1
        out.append((alo, blo, n))
        alo, blo = alo + n, blo + n
    tail = 0
    while ahi - tail > alo and bhi - tail > blo and a[ahi - tail - 1] == b[bhi - tail - 1]:
        tail += 1
    if tail:
        out.append((ahi - tail, bhi - tail, tail))
        ahi, bhi = ahi - tail, bhi - tail
    if alo >= ahi or blo >= bhi:
        return
    anchors = _unique_lis(a, b, alo, ahi, blo, bhi)
    if not anchors:
        if (ahi - alo) <= _SMALL_GAP and (bhi - blo) <= _SMALL_GAP:
            import difflib

            for i, j, n in difflib.SequenceMatcher(None, a[alo:ahi], b[blo:bhi], autojunk=False).get_matching_blocks():
                # blank lines alone say nothing about where text went (and would block a move's run)
                if n and any(line.strip() for line in a[alo + i:alo + i + n]):
                    out.append((alo + i, blo + j, n))
        return
    # Grow each anchor into a run, then align the gaps between runs.
    pi, pj = alo, blo
    for i, j in anchors:
        if i < pi or j < pj:  # inside the previous run
            continue
        s = 0
        while i - s - 1 >= pi and j - s - 1 >= pj and a[i - s - 1] == b[j - s - 1]:
            s += 1
        e = 1
        while i + e < ahi and j + e < bhi and a[i + e] == b[j + e]:
            e += 1
        if i - s > pi and j - s > pj:
            work.append((pi, i - s, pj, j - s))
        out.append((i - s, j - s, s + e))
        pi, pj = i + e, j + e
    if pi < ahi and pj < bhi:
        work.append((pi, ahi, pj, bhi))


def _unique_lis(a: list[str], b: list[str], alo: int, ahi: int, blo: int,
                bhi: int) -> list[tuple[int, int]]:
    """Lines occurring once in ``a[alo:ahi]`` and once in ``b[blo:bhi]``, as ``(i, j)``: the longest
    run increasing in both (patience sorting)."""
    count: dict[str, int] = {}
    for k in range(alo, ahi):
        line = a[k]
        count[line] = 2 if line in count else 1  # 1: once in a so far; 2: more
    where: dict[str, int] = {}
    for k in range(blo, bhi):
        line = b[k]
        c = count.get(line)
        if c == 1:
            count[line] = 3  # once in a, once in b so far
            where[line] = k
        elif c == 3:
            count[line] = 2
            del where[line]
    # a blank line, even unique in a gap, anchors nothing
    pairs = [(k, where[a[k]]) for k in range(alo, ahi) if a[k] in where and a[k].strip()]
    if not pairs:
        return []
    tails: list[int] = []  # tails[n]: the smallest j ending an increasing run of n + 1
    tail_at: list[int] = []
    prev = [-1] * len(pairs)
    for p, (_i, j) in enumerate(pairs):
        k = bisect_left(tails, j)
        if k == len(tails):
            tails.append(j)
            tail_at.append(p)
        else:
            tails[k] = j
            tail_at[k] = p
        prev[p] = tail_at[k - 1] if k else -1
    run: list[tuple[int, int]] = []
    p = tail_at[-1]
    while p != -1:
        run.append(pairs[p])
        p = prev[p]
    run.reverse()
    return run


def _moves(a: list[str], b: list[str], used_a: bytearray, used_b: bytearray) -> list[tuple[int, int, int]]:
    """Runs of lines left unmatched in both texts that hold a line unique to both (a moved section):
    ``(i, j, n)`` 0-based; marks them used."""
    free_b: dict[str, int] = {}
    dup: set[str] = set()
    for k, line in enumerate(b):
        if not used_b[k] and line.strip():
            if line in free_b:
                dup.add(line)
            free_b[line] = k
    seen_a: dict[str, int] = {}
    for k, line in enumerate(a):
        if not used_a[k] and line in free_b:
            if line in seen_a:
                dup.add(line)
            seen_a[line] = k
    out: list[tuple[int, int, int]] = []
    for line, i in sorted(seen_a.items(), key=lambda item: item[1]):
        if line in dup or used_a[i]:
            continue
        j = free_b[line]
        if used_b[j]:
            continue
        s = 0
        while i - s - 1 >= 0 and j - s - 1 >= 0 and not used_a[i - s - 1] and not used_b[j - s - 1] \
                and a[i - s - 1] == b[j - s - 1]:
            s += 1
        e = 1
        while i + e < len(a) and j + e < len(b) and not used_a[i + e] and not used_b[j + e] and a[i + e] == b[j + e]:
            e += 1
        n = s + e
        if n < 2 and len(line.strip()) < _MOVE_MIN_CHARS:
            continue
        used_a[i - s:i + e] = b"\x01" * n
        used_b[j - s:j + e] = b"\x01" * n
        out.append((i - s, j - s, n))
    return out


# -- following a range through maps ---------------------------------------------------------------

class Piece(NamedTuple):
    """Part of a cited range: old lines ``was`` (at the cited version), now at ``now`` (None:
    removed), ``kind``: ``same`` (the text is unchanged), ``changed`` (edited: ``now`` holds the
    lines that replaced it) or ``removed`` (in version ``at``)."""

    was: tuple[int, int]
    now: tuple[int, int] | None
    kind: str
    at: int | None = None


def follow(start: int, end: int, maps: list[tuple[int, LineMap]]) -> list[Piece]:
    """Where lines ``start..end`` of the version before ``maps[0]`` are after the last map: pieces in
    old-line order. ``maps``: ``(version, map from version - 1)``, oldest first."""
    pieces = [Piece((start, end), (start, end), "same")]
    for version, m in maps:
        nxt: list[Piece] = []
        for p in pieces:
            if p.now is None:
                nxt.append(p)
                continue
            nxt += _through(p, m, version)
        pieces = nxt
    return pieces


def _through(p: Piece, m: LineMap, version: int) -> list[Piece]:
    """Piece ``p`` carried through one map. A piece already changed maps its whole new span."""
    assert p.now is not None
    s, e = p.now
    was_s, was_e = p.was
    hits: list[tuple[int, int, tuple[int, int], str]] = []  # (old s, old e, new span, kind)
    for i, j, n in m.same:
        lo, hi = max(s, i), min(e, i + n - 1)
        if lo <= hi:
            hits.append((lo, hi, (j + lo - i, j + hi - i), "same"))
    for i, n, j, k in m.changed:
        lo, hi = max(s, i), min(e, i + n - 1)
        if lo <= hi:
            hits.append((lo, hi, (j, j + k - 1), "changed"))
    hits.sort()
    out: list[Piece] = []
    pos = s
    exact = p.kind == "same" and (was_e - was_s) == (e - s)  # old lines still line-for-line

    def was(lo: int, hi: int) -> tuple[int, int]:
        return (was_s + lo - s, was_s + hi - s) if exact else (was_s, was_e)

    for lo, hi, span, kind in hits:
        if lo > pos:
            out.append(Piece(was(pos, lo - 1), None, "removed", version))
        kind = "changed" if p.kind == "changed" else kind
        out.append(Piece(was(lo, hi), span, kind))
        pos = max(pos, hi + 1)
    if pos <= e:
        out.append(Piece(was(pos, e), None, "removed", p.at or version))
    if not exact:  # several pieces of one changed span: one piece, its new lines together
        spans = [q.now for q in out if q.now is not None]
        if spans:
            return [Piece(p.was, (min(x[0] for x in spans), max(x[1] for x in spans)), "changed")]
        return [Piece(p.was, None, "removed", version)]
    return _merge(out)


def _merge(pieces: list[Piece]) -> list[Piece]:
    """Adjacent pieces of one kind whose old and new lines both continue, joined."""
    out: list[Piece] = []
    for p in pieces:
        q = out[-1] if out else None
        if (q is not None and q.kind == p.kind and q.was[1] + 1 == p.was[0]
                and ((q.now is None and p.now is None and q.at == p.at)
                     or (q.now is not None and p.now is not None and q.now[1] + 1 == p.now[0]))):
            out[-1] = Piece((q.was[0], p.was[1]), None if q.now is None or p.now is None else (q.now[0], p.now[1]),
                            q.kind, q.at)
        else:
            out.append(p)
    return out


# -- sections added, removed and changed -----------------------------------------------------------

def own_spans(heads: list[tuple[int, str]], total: int) -> dict[str, tuple[int, int]]:
    """``anchor -> (first, last)`` of each anchored section's own lines (to the next anchor), from
    ``(first_line, anchor)`` in file order."""
    out: dict[str, tuple[int, int]] = {}
    for k, (line, anchor) in enumerate(heads):
        last = heads[k + 1][0] - 1 if k + 1 < len(heads) else total
        out.setdefault(anchor, (line, last))
    return out


def section_changes(old_lines: list[str], old_heads: list[tuple[int, str, list[str]]],
                    new_lines: list[str], new_heads: list[tuple[int, str, list[str]]]) -> dict[str, Any]:
    """Sections (by anchor) added, removed and changed between two versions, each with its heading
    path; a removed one with its old lines. ``*_heads``: ``(first_line, anchor, path)`` in file order."""
    def digests(lines: list[str], heads: list[tuple[int, str, list[str]]]) -> dict[str, tuple[int, int, int]]:
        spans = own_spans([(h[0], h[1]) for h in heads], len(lines))
        # the text between the anchor and the next, blank lines around it aside (the last section of a
        # file gains one when another follows it)
        return {a: (s, e, hash("\n".join(lines[s - 1:e]).strip())) for a, (s, e) in spans.items()}

    old, new = digests(old_lines, old_heads), digests(new_lines, new_heads)
    paths = {h[1]: h[2] for h in old_heads}
    paths.update({h[1]: h[2] for h in new_heads})
    added = [{"anchor": a, "headingPath": paths[a]} for a in new if a not in old]
    removed = [{"anchor": a, "headingPath": paths[a], "was": f"{old[a][0]}-{old[a][1]}"} for a in old if a not in new]
    changed = [{"anchor": a, "headingPath": paths[a]} for a in new if a in old and old[a][2] != new[a][2]]
    return {"added": added, "removed": removed, "changed": changed}


# -- resolving durable citations and listing changes (the store's side) -----------------------------

def _steps(store: Store, alias: str, since: int, current: int, what: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """The stored steps from version ``since`` to ``current``, or the reason they cannot be followed."""
    from cairn_servers.blz import limits
    from cairn_servers.core.errors import InvalidInput, NotFound

    if since > current:
        raise NotFound(f"{alias} has no version {since}: its current version is {current}.")
    steps = store.version_steps(alias, since)
    chain = [v for v, m, _c in steps]
    oldest = current
    for v, m, _c in reversed(steps):  # the oldest version every later map reaches
        if m is None or v != oldest:
            break
        oldest = v - 1
    if since < oldest or chain != list(range(since + 1, current + 1)):
        raise InvalidInput(f"{what} cannot be followed to version {current}: "
                           + (f"{alias}'s versions {oldest}-{current} are kept (the line maps of the last {limits.KEEP_VERSIONS} "
                              f"updates)" if oldest < current else f"{alias} keeps no line map before version {current}")
                           + f". Cite its current lines instead: find gives them with version {current}.")
    return steps


def resolve_lines(store: Store, alias: str, ranges: list[tuple[int, int]], version: int,
                  citation: str) -> tuple[list[tuple[int, int]], dict[str, Any]]:
    """The current lines holding the text ``ranges`` held in ``version`` of ``alias``, and a report:
    ``status`` (unchanged, moved, changed, partly removed, removed), ``parts`` (each old part:
    ``was``, ``now`` or ``removedIn``, and whether its text is ``same``, ``changed`` or ``removed``)
    and a one-line ``message``."""
    from cairn_servers.core.errors import InvalidInput

    current = store.current_versions().get(alias, 1)
    steps = _steps(store, alias, version, current, citation)
    maps = [(v, LineMap.decode(m)) for v, m, _c in steps if m is not None]
    total = maps[0][1].old if maps else next((n for v, _a, n, _h in store.versions(alias) if v == version), 0)
    pieces: list[Piece] = []
    for start, end in ranges:
        if start > total:
            raise InvalidInput(f"{citation} starts past the end: version {version} of {alias} had {total} lines.")
        pieces += follow(start, min(end, total), maps)
    now = sorted(p.now for p in pieces if p.now is not None)
    spans: list[tuple[int, int]] = []
    for s, e in now:
        if spans and s <= spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], max(spans[-1][1], e))
        else:
            spans.append((s, e))
    parts = []
    for p in pieces:
        part: dict[str, Any] = {"was": f"{p.was[0]}-{p.was[1]}", "text": p.kind}
        if p.now is not None:
            part["now"] = f"{p.now[0]}-{p.now[1]}"
        else:
            part["removedIn"] = p.at
        parts.append(part)
    kinds = {p.kind for p in pieces}
    if kinds == {"removed"}:
        status = "removed"
    elif "removed" in kinds:
        status = "partly removed"
    elif "changed" in kinds:
        status = "changed"
    elif all(p.now == p.was for p in pieces):
        status = "unchanged"
    else:
        status = "moved"
    words = []
    for part in parts:
        if part["text"] == "removed":
            words.append(f"{part['was']} removed in version {part['removedIn']}")
        elif part["text"] == "changed":
            words.append(f"{part['was']} edited, now {part['now']}")
        else:
            words.append(f"{part['was']} now {part['now']}")
    message = f"{citation} (version {version}) in version {current}: " + ("; ".join(words) if status != "unchanged"
                                                                            else "unchanged")
    report = {"citation": citation, "version": current, "status": status,
              "lines": ",".join(f"{s}-{e}" for s, e in spans) or None, "parts": parts, "message": message}
    return spans, report


def resolve_anchor(store: Store, alias: str, anchor: str, citation: str) -> tuple[tuple[int, int] | None, dict[str, Any]]:
    """The current lines of the section ``anchor`` names in ``alias`` (exact; else ignoring '-' and
    '_'; else the one anchor ending with it), with a report; None and a report saying when it was
    removed, if the kept versions recorded that. NotFound or InvalidInput (several match) otherwise."""
    from cairn_servers.core.errors import InvalidInput, NotFound

    runs = store.anchored(alias)
    current = store.current_versions().get(alias, 1)

    def loose(a: str) -> str:
        return a.replace("-", "").replace("_", "")

    tests = (lambda a: a == anchor, lambda a: loose(a) == loose(anchor), lambda a: a.endswith("/" + anchor),
             lambda a: loose(a).endswith("/" + loose(anchor)))
    found: list[tuple[int, int, str, list[str], bool]] = []
    for test in tests:
        found = [r for r in runs if test(r[2])]
        if found:
            break
    if len(found) > 1:
        names = ", ".join(f"{alias}#{r[2]}" for r in found[:5])
        raise InvalidInput(f"{citation} names {len(found)} sections: {names}{', ...' if len(found) > 5 else ''}. "
                           "Give more of the heading path.")
    if found:
        first, last, name, path, head = found[0]
        if head:
            last = store.heading_end(alias, first) or last
        return (first, last), {"citation": citation, "version": current, "status": "found", "anchor": f"{alias}#{name}",
                               "headingPath": path, "lines": f"{first}-{last}",
                               "message": f"{citation} in version {current}: lines {first}-{last}"}
    from cairn_servers.blz.store import decode_changes

    removed = [(v, gone) for v, _m, changes in reversed(store.version_steps(alias, 0))
               for gone in decode_changes(changes).get("removed", [])]
    for test in tests:  # the latest removal of a section the anchor names, matched as above
        for v, gone in removed:
            if test(str(gone.get("anchor", ""))):
                return None, {"citation": citation, "version": current, "status": "removed", "removedIn": v,
                              "headingPath": gone.get("headingPath", []), "was": f"{alias}:{gone['was']}@{v - 1}",
                              "message": f"{citation}: section removed in version {v} (it was {alias}:"
                                         f"{gone['was']}@{v - 1})"}
    raise NotFound(f"No section {alias}#{anchor} in {alias} (version {current}). Hits of find carry their section's "
                   f"anchor; `blz toc {alias}` lists the headings.")


def diff(store: Store, alias: str, since: int | None = None) -> dict[str, Any]:
    """(``alias``: an installed source's own alias.) Sections added, removed and changed in ``alias`` since version ``since`` (default: the version
    before the current one), by anchor: added and changed ones with their current lines, removed
    ones with the version that removed them and their last lines (``was``: a citation of that version)."""
    from cairn_servers.core.errors import InvalidInput

    current = store.current_versions().get(alias, 1)
    if since is None:
        since = max(1, current - 1)
    if since < 1:
        raise InvalidInput(f"since must be a version number from 1, not {since}.")
    steps = _steps(store, alias, since, current, f"{alias}@{since}") if since != current else []
    state: dict[str, tuple[str, dict[str, Any], int]] = {}  # anchor -> (status, entry, version)
    from cairn_servers.blz.store import decode_changes

    for v, _m, changes in steps:
        found = decode_changes(changes)
        for kind in ("added", "removed", "changed"):
            for entry in found.get(kind, []):
                a = entry["anchor"]
                before = state.get(a, (None, entry, v))[0]
                if before == "added" and kind == "removed":
                    del state[a]
                    continue
                status = ("added" if before == "added" else "changed" if before == "removed" and kind == "added"
                          else kind)
                state[a] = (status, entry, v)
    runs = {r[2]: r for r in store.anchored(alias)} if state else {}
    out: dict[str, Any] = {"alias": alias, "version": current, "since": since, "added": [], "removed": [],
                           "changed": []}
    for a, (status, entry, v) in state.items():
        item: dict[str, Any] = {"anchor": f"{alias}#{a}", "headingPath": entry.get("headingPath", [])}
        if status == "removed":
            item.update(removedIn=v, was=f"{alias}:{entry['was']}@{v - 1}")
        else:
            run = runs.get(a)
            if run is None:
                continue
            item.update(lines=f"{run[0]}-{run[1]}", version=current)
            if status == "changed":
                item["changedIn"] = v
            else:
                item["addedIn"] = v
        out[status].append(item)
    for key in ("added", "removed", "changed"):
        out[key].sort(key=lambda i: (int(i["lines"].split("-")[0]) if "lines" in i else 0, i["anchor"]))
    out["message"] = (f"{alias}: version {since} -> {current}: {len(out['added'])} sections added, "
                      f"{len(out['removed'])} removed, {len(out['changed'])} changed"
                      if since != current else f"{alias} is at version {current}; nothing to compare"
                      + (" (give --since with an older version)" if current > 1 else " yet"))
    return out
