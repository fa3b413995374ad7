"""blz's on-disk state: one SQLite database (WAL) plus every source's file, byte-for-byte.

Layout under the data root (``$BLZ_DATA_DIR``, else ``$XDG_DATA_HOME/blz``)::

    blz.db                         sources, headings, history, versions (line maps between a source's
                                   versions), and ONE FTS5 table for every source
    sources/<alias>/<sha16>.txt    the fetched file exactly as received (content-addressed)

All sources share one FTS5 table, so BM25 statistics (document frequencies, average lengths) are
global and scores from different sources are comparable. Replacing a source writes its new file
beside the old one, then swaps rows in one transaction; the old file is deleted only after the
commit. A failure at any point leaves the previous file and index intact.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from array import array
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from cairn_servers.core.errors import StorageError

if TYPE_CHECKING:
    from collections.abc import Callable

    from cairn_servers.blz.llmstxt import Document

SCHEMA_VERSION = 4
SID_SHIFT = 32
LEVEL_SHIFT = 28  # rowid bits 28-31: the level of the heading a section is under (0: none)
PATH_SEP = "\x1f"  # joins heading paths in the hpath column (cheaper than JSON both ways)
# ends the hpath column's path, followed by the section's anchor (a hit gets it without another query)
ANCHOR_SEP = "\x1e"

_SECTIONS = """CREATE VIRTUAL TABLE IF NOT EXISTS {name} USING fts5(
    heading, path, body, first_line UNINDEXED, last_line UNINDEXED, hpath UNINDEXED,
    tokenize = 'unicode61 remove_diacritics 2');"""

# map: the line map from the version before (cairn_servers.blz.versions.LineMap.encode), NULL for the first;
# changes: {added, removed, changed} sections (by anchor) in that update, as compressed JSON (encode_changes).
_VERSIONS = """
CREATE TABLE IF NOT EXISTS versions(
    alias TEXT NOT NULL, version INTEGER NOT NULL, at TEXT NOT NULL, sha256 TEXT NOT NULL,
    lines INTEGER NOT NULL, map BLOB, changes TEXT, PRIMARY KEY(alias, version)) WITHOUT ROWID;
"""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sources(
    alias TEXT PRIMARY KEY, url TEXT NOT NULL, title TEXT, file TEXT NOT NULL, sha256 TEXT NOT NULL,
    bytes INTEGER, lines INTEGER, headings INTEGER, sections INTEGER, etag TEXT, last_modified TEXT,
    fetched_at TEXT, added_at TEXT, checked_at TEXT, sid INTEGER UNIQUE NOT NULL);
CREATE TABLE IF NOT EXISTS headings(
    alias TEXT NOT NULL, line INTEGER NOT NULL, level INTEGER NOT NULL, text TEXT NOT NULL,
    last_line INTEGER NOT NULL, PRIMARY KEY(alias, line)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS history(
    id INTEGER PRIMARY KEY, alias TEXT NOT NULL, action TEXT NOT NULL, at TEXT NOT NULL,
    url TEXT, sha256 TEXT, lines INTEGER, detail TEXT);
""" + _VERSIONS + """-- rowid = sid << 32 | level << 28 | n: one source's sections are one rowid range, and its sections
-- under headings of one level are a range inside it; FTS5 filters rowid ranges without reading row
-- contents (an UNINDEXED alias or level column costs a content lookup per match: 3x slower).
""" + _SECTIONS.format(name="sections") + """
CREATE VIRTUAL TABLE IF NOT EXISTS sections_vocab USING fts5vocab(sections, 'row');
"""


# Markdown links in headings: index the link text, not the URL (URL words would outrank real titles).
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")

_OPTIONS = "source:"  # meta key prefix of a source's indexing options (Store.options)

# BM25 column weights: the section's own heading, its ancestors' headings, its body.
WEIGHTS = (6.0, 2.0, 1.0)
_RANK_SQL = ("SELECT rowid, bm25(sections, {w0}, {w1}, {w2}) AS rank FROM sections WHERE sections MATCH ?{filter} "
             "ORDER BY rank LIMIT ?").format(w0=WEIGHTS[0], w1=WEIGHTS[1], w2=WEIGHTS[2], filter="{filter}")
_SECTION_SQL = "SELECT first_line, last_line, hpath, body FROM sections WHERE rowid = ?"


def _sha256() -> Any:
    """The SHA-256 constructor. The interpreter's built-in implementation when it has one: hashlib
    loads OpenSSL, which costs a long-running server 3.6 MB of resident memory for one digest."""
    try:
        from _sha256 import sha256  # type: ignore[import-not-found, unused-ignore]  # CPython <= 3.11
    except ImportError:
        try:
            from _sha2 import sha256  # type: ignore[import-not-found, no-redef, unused-ignore]  # CPython >= 3.12
        except ImportError:
            from hashlib import sha256
    return sha256


def sha256_hex(data: bytes) -> str:
    """SHA-256 of ``data``, in hex."""
    return str(_sha256()(data).hexdigest())


def file_digest(path: Path) -> tuple[str, int]:
    """SHA-256 (hex) and line count (as ``len(cairn_servers.blz.llmstxt.decode_lines(data))`` counts) of the file at
    ``path``, read in 1 MiB chunks: never the whole file in memory. Raises OSError."""
    digest = _sha256()()
    newlines, last = 0, b""
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
            newlines += chunk.count(b"\n")
            last = chunk[-1:]
    return str(digest.hexdigest()), newlines if newlines and last == b"\n" else newlines + 1


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class SourceRow(NamedTuple):
    alias: str
    url: str
    title: str
    file: str
    sha256: str
    bytes: int
    lines: int
    headings: int
    sections: int
    etag: str | None
    last_modified: str | None
    fetched_at: str
    added_at: str
    checked_at: str | None
    sid: int = 0

    @property
    def rowids(self) -> tuple[int, int]:
        """The first and last rowid this source's sections may use."""
        return self.sid << SID_SHIFT, ((self.sid + 1) << SID_SHIFT) - 1


class Store:
    """The database and files under one data root. Keep one per process: the connection, its page
    cache and the per-file line offsets stay warm across requests."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._db: sqlite3.Connection | None = None
        self._offsets: dict[str, array[int]] = {}
        self._by_sid: tuple[tuple[int, int], dict[int, tuple[str, str]]] | None = None
        self._versions: tuple[tuple[int, int], dict[str, int]] | None = None

    # -- connection ---------------------------------------------------------------------------

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = self._open()
        return self._db

    def _open(self) -> sqlite3.Connection:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.root / "blz.db", isolation_level=None, check_same_thread=False,
                                 timeout=10.0)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA cache_size=-2000")
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version != SCHEMA_VERSION:
                if version > SCHEMA_VERSION:
                    raise StorageError(f"{self.root / 'blz.db'} was written by a newer blz (schema "
                                       f"{version}). Upgrade blz or point BLZ_DATA_DIR elsewhere.")
                if version in (2, 3):
                    if version == 2:
                        _migrate_levels(db)
                    _migrate_versions(db)
                elif version:  # an older development schema: its sources must be added again
                    raise StorageError(f"{self.root / 'blz.db'} uses an older blz schema ({version}). "
                                       "Move it away and add your sources again.")
                else:
                    db.executescript(_SCHEMA)
                    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except sqlite3.Error as exc:
            raise StorageError(f"Cannot open the blz database in {self.root}: {exc}. "
                               f"{_open_hint(self.root)}") from exc
        return db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        self._by_sid = None  # a new connection counts its changes from 0 again
        self._versions = None

    # -- reads --------------------------------------------------------------------------------

    def source(self, alias: str) -> SourceRow | None:
        row = self.db.execute("SELECT * FROM sources WHERE alias = ?", (alias,)).fetchone()
        return SourceRow(*row) if row else None

    def sources(self) -> list[SourceRow]:
        return [SourceRow(*r) for r in self.db.execute("SELECT * FROM sources ORDER BY alias")]

    def file_path(self, row: SourceRow) -> Path:
        return self.root / "sources" / row.alias / row.file

    def aliases_by_sid(self) -> dict[int, tuple[str, str]]:
        """sid -> (alias, url) for every source (callers must not change the dict).

        Kept from the last call while the database is unchanged: ``PRAGMA data_version`` changes when
        another connection commits, the connection's ``total_changes`` when this one writes a row
        (every write to ``sources`` does). Checking costs a sixth of reading the table again, once per search."""
        db = self.db
        version = (db.execute("PRAGMA data_version").fetchone()[0], db.total_changes)
        cached = self._by_sid
        if cached is not None and cached[0] == version:
            return cached[1]
        by_sid = {sid: (alias, url) for alias, url, sid in db.execute("SELECT alias, url, sid FROM sources")}
        self._by_sid = (version, by_sid)
        return by_sid

    def current_versions(self, just_checked: bool = False) -> dict[str, int]:
        """alias -> its current version, for every source (callers must not change the dict); kept
        while the database is unchanged, as :meth:`aliases_by_sid` is. ``just_checked``: the caller
        called :meth:`aliases_by_sid` a moment ago (nothing written since): its check stands for this one."""
        cached = self._versions
        if just_checked and cached is not None and self._by_sid is not None and cached[0] == self._by_sid[0]:
            return cached[1]
        db = self.db
        key = (db.execute("PRAGMA data_version").fetchone()[0], db.total_changes)
        if cached is not None and cached[0] == key:
            return cached[1]
        found = {alias: int(v) for alias, v in db.execute("SELECT alias, MAX(version) FROM versions GROUP BY alias")}
        self._versions = (key, found)
        return found

    def versions(self, alias: str) -> list[tuple[int, str, int, bool]]:
        """``(version, at, lines, has a line map from the version before)`` of each version kept, oldest first."""
        return [(int(v), str(at), int(n), bool(has)) for v, at, n, has in self.db.execute(
            "SELECT version, at, lines, map IS NOT NULL FROM versions WHERE alias = ? ORDER BY version", (alias,))]

    def version_steps(self, alias: str, since: int) -> list[tuple[int, bytes | None, bytes | None]]:
        """``(version, line map, changes JSON)`` of every version after ``since``, oldest first."""
        return list(self.db.execute("SELECT version, map, changes FROM versions WHERE alias = ? AND version > ? "
                                    "ORDER BY version", (alias, since)))

    def heading_end(self, alias: str, line: int) -> int | None:
        """The last line of the section of the heading on ``line``, None when no heading is there."""
        found = self.db.execute("SELECT last_line FROM headings WHERE alias = ? AND line = ?", (alias, line)).fetchone()
        return int(found[0]) if found else None

    def anchored(self, alias: str) -> list[tuple[int, int, str, list[str], bool]]:
        """Each anchored run of ``alias``'s sections, in file order: ``(first_line, last_line, anchor,
        heading path, starts at a heading)``; a long section's windows are one run. The anchors are
        computed again from the stored paths (:func:`cairn_servers.blz.citation.section_anchors`), so
        sections indexed before anchors existed get the same ones."""
        from cairn_servers.blz.citation import section_anchors

        row = self.source(alias)
        if row is None:
            return []
        rows = self.db.execute("SELECT c3, c4, c0 != '', c5 FROM sections_content WHERE id BETWEEN ? AND ? "
                               "ORDER BY c3", row.rowids).fetchall()
        paths = [tuple(h.partition(ANCHOR_SEP)[0].split(PATH_SEP)) if h and h[0] != ANCHOR_SEP else ()
                 for _f, _l, _h, h in rows]
        anchors = section_anchors([(bool(head), path) for (_f, _l, head, _p), path in zip(rows, paths)])
        out: list[tuple[int, int, str, list[str], bool]] = []
        for (first, last, head, _h), path, anchor in zip(rows, paths, anchors):
            if not anchor:
                continue
            if out and out[-1][2] == anchor:
                out[-1] = (out[-1][0], int(last), anchor, out[-1][3], out[-1][4])
            else:
                out.append((int(first), int(last), anchor, list(path), bool(head)))
        return out

    def options(self, alias: str) -> dict[str, Any]:
        """What was chosen and left out when ``alias`` was indexed: ``allLanguages`` (bool) and,
        when pages in other languages were not indexed, ``skippedLines``, ``skippedPages`` and
        ``skippedLanguages`` (language -> pages). Kept in ``meta`` under ``source:ALIAS``."""
        found = self.db.execute("SELECT value FROM meta WHERE key = ?", (_OPTIONS + alias,)).fetchone()
        try:
            value = json.loads(found[0]) if found else {}
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    def other_names(self) -> dict[str, str]:
        """A source's other names (``blz add --alias``) -> its alias."""
        out: dict[str, str] = {}
        for key, value in self.db.execute("SELECT key, value FROM meta WHERE key >= ? AND key < ? ORDER BY key",
                                          (_OPTIONS, _OPTIONS[:-1] + chr(ord(_OPTIONS[-1]) + 1))):
            try:
                names = json.loads(value).get("aliases") or []
            except (ValueError, AttributeError):
                continue
            for name in names if isinstance(names, list) else []:
                out[str(name)] = key[len(_OPTIONS):]
        return out

    def tags(self) -> dict[str, list[str]]:
        """tag -> the aliases of the sources carrying it (sorted), from every source's options."""
        out: dict[str, list[str]] = {}
        for key, value in self.db.execute("SELECT key, value FROM meta WHERE key >= ? AND key < ? ORDER BY key",
                                          (_OPTIONS, _OPTIONS[:-1] + chr(ord(_OPTIONS[-1]) + 1))):
            try:
                tags = json.loads(value).get("tags") or []
            except (ValueError, AttributeError):
                continue
            for tag in tags if isinstance(tags, list) else []:
                out.setdefault(str(tag), []).append(key[len(_OPTIONS):])
        return out

    def headings(self, alias: str) -> list[tuple[int, int, str, int]]:
        return list(self.db.execute(
            "SELECT line, level, text, last_line FROM headings WHERE alias = ? ORDER BY line", (alias,)))

    def ancestors(self, alias: str, line: int) -> list[tuple[int, int, str, int]]:
        """The headings whose sections hold ``line`` (``(line, level, text, last_line)``, in file order):
        its heading path, as :func:`cairn_servers.blz.service.path_of` makes it from the whole outline (a
        section ends before the next heading of its level or higher, or at a page boundary, so no
        other heading is on the path). SQLite filters the rows: reading react's 1,912 headings into
        Python cost every cited range ~2.6 ms; this is 0.05-0.45 ms."""
        return self.db.execute("SELECT line, level, text, last_line FROM headings WHERE alias = ? AND line <= ? "
                               "AND last_line >= ? ORDER BY line", (alias, line, line)).fetchall()

    def enclosing_headings(self, alias: str, start: int, end: int) -> list[tuple[int, int, str, int]]:
        """What :func:`cairn_servers.blz.llmstxt.enclosing` needs to find the section holding ``start..end``: the
        source's first heading and the innermost heading whose section holds the range (either may be
        missing), in file order, as ``(line, level, text, last_line)``."""
        rows = self.db.execute("SELECT line, level, text, last_line FROM headings WHERE alias = ? ORDER BY line "
                               "LIMIT 1", (alias,)).fetchall()
        rows += self.db.execute("SELECT line, level, text, last_line FROM headings WHERE alias = ? AND line <= ? "
                                "AND last_line >= ? ORDER BY line DESC LIMIT 1", (alias, start, end)).fetchall()
        return sorted(set(rows))

    def outline(self, alias: str, max_level: int = 6, words: tuple[str, ...] = (), offset: int = 0,
                limit: int = 100, keep: Callable[[str], bool] | None = None
                ) -> tuple[int, list[tuple[int, int, str, int, tuple[str, ...]]]]:
        """One page of ``alias``'s stored outline: ``(total, [(line, level, text, last_line, path)])``.

        Headings of level ``max_level`` or above (H1 = 1), in file order; with ``words``, only those
        whose text (Markdown link targets left out, case-insensitive) contains every word; with ``keep``,
        only those whose lower-cased text it keeps. ``path``
        is the chain of heading texts down to the heading itself. The rows are streamed from the
        database: memory holds the ancestor stack and one page, never the whole outline."""
        link = _LINK.sub
        stack: list[tuple[int, str]] = []  # (level, text) of the current ancestors
        total, page = 0, []
        end = offset + limit
        # Every ancestor of a heading of level <= max_level has a lower level, so this filter keeps them.
        for line, level, text, last in self.db.execute(
                "SELECT line, level, text, last_line FROM headings WHERE alias = ? AND level <= ? ORDER BY line",
                (alias, max_level)):
            plain = link(r"\1", text) if "](" in text else text
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, plain))
            if words or keep is not None:
                low = plain.lower()
                if not all(w in low for w in words) or (keep is not None and not keep(low)):
                    continue
            if offset <= total < end:
                page.append((line, level, plain, last, tuple(t for _lv, t in stack)))
            total += 1
        return total, page

    # -- search reads (cairn_servers.blz.search) and integrity checks (cairn_servers.blz.service.validate) ---------

    def rank(self, match: str, sids: list[int], want: int,
             levels: tuple[int, ...] | None = None) -> list[tuple[int, float]]:
        """``(rowid, bm25)`` of the sections matching the FTS5 expression ``match``, best first, at
        most ``want``; only sources ``sids`` when given, only sections under headings of ``levels``
        (0: before any heading) when given. One rowid-range query per source and run of consecutive
        levels: FTS5 applies rowid ranges inside the index, and raw BM25 from one table merges
        soundly across them."""
        db = self.db
        if not sids and levels is None:
            return db.execute(_RANK_SQL.format(filter=""), (match, want)).fetchall()
        if not sids:
            sids = [sid for (sid,) in db.execute("SELECT sid FROM sources ORDER BY sid")]
        sql = _RANK_SQL.format(filter=" AND rowid BETWEEN ? AND ?")
        out: list[tuple[int, float]] = []
        ranges = 0
        for sid in sids:
            for lo, hi in rowid_ranges(sid, levels):
                out += db.execute(sql, (match, lo, hi, want)).fetchall()
                ranges += 1
        if ranges > 1:
            out.sort(key=lambda r: r[1])
        return out[:want]

    def section(self, rowid: int) -> tuple[int, int, str, str]:
        """``(first_line, last_line, hpath, body)`` of one indexed section."""
        row: tuple[int, int, str, str] = self.db.execute(_SECTION_SQL, (rowid,)).fetchone()
        return row

    def sections(self, rowids: list[int]) -> list[tuple[int, int, str, str]]:
        """:meth:`section` of each of ``rowids`` (which must exist), in their order: one query for a page
        of hits (ten lookups cost a warm find on react ~0.1 ms more)."""
        if len(rowids) <= 1:
            return [self.section(r) for r in rowids]
        # Read from the FTS5 table's own content table (columns c0.. in declaration order: c3 first_line,
        # c4 last_line, c5 hpath, c2 body): the same rows, without a virtual-table lookup per rowid
        # (a third fewer instructions for a page of hits).
        found = {r[0]: r[1:] for r in self.db.execute(
            f"SELECT id, c3, c4, c5, c2 FROM sections_content WHERE id IN ({','.join('?' * len(rowids))})", rowids)}
        return [found[r] for r in rowids]

    def has_term(self, word: str) -> bool:
        """Whether ``word`` is an indexed term (the FTS5 vocabulary)."""
        return self.db.execute("SELECT 1 FROM sections_vocab WHERE term = ?", (word,)).fetchone() is not None

    def terms_near(self, word: str, spread: int = 2) -> list[str]:
        """Indexed terms starting with ``word``'s first letter whose length is within ``spread`` of its."""
        return [t for (t,) in self.db.execute(
            "SELECT term FROM sections_vocab WHERE term >= ? AND term < ? AND length(term) BETWEEN ? AND ?",
            (word[0], word[0] + "\U0010ffff", len(word) - spread, len(word) + spread))]

    def indexed_counts(self, row: SourceRow) -> tuple[int, int]:
        """``(sections, headings)`` the index holds for one source (validate compares them with the row)."""
        sections = self.db.execute("SELECT count(*) FROM sections WHERE rowid BETWEEN ? AND ?",
                                   row.rowids).fetchone()[0]
        heads = self.db.execute("SELECT count(*) FROM headings WHERE alias = ?", (row.alias,)).fetchone()[0]
        return int(sections), int(heads)

    def index_bytes(self) -> int:
        """Bytes of the database files (blz.db and its WAL and shared-memory files)."""
        if not (self.root / "blz.db").exists():
            return 0
        return sum(p.stat().st_size for p in self.root.glob("blz.db*") if p.is_file())

    def index_ok(self) -> bool:
        """FTS5's own integrity check: False when the full-text index disagrees with its content."""
        try:
            self.db.execute("INSERT INTO sections(sections) VALUES('integrity-check')")
        except sqlite3.DatabaseError:
            return False
        return True

    def read_lines(self, row: SourceRow, start: int, end: int) -> list[str]:
        """Lines ``start..end`` (1-based, inclusive, clamped) of the stored file, without newlines."""
        path = self.file_path(row)
        try:
            with open(path, "rb") as fh:
                offsets = self._line_offsets(fh, path, row.sha256)
                total = len(offsets) - 1
                start, end = max(1, start), min(end, total)
                if start > end:
                    return []
                fh.seek(offsets[start - 1])
                data = fh.read(offsets[end] - offsets[start - 1])
        except OSError as exc:
            raise StorageError(f"Cannot read the stored file of {row.alias!r}: {exc}. Run `blz update "
                               f"{row.alias}` to fetch it again.") from exc
        text = data.decode("utf-8", errors="replace")
        if start == 1 and text.startswith("\ufeff"):
            text = text[1:]
        out = text.split("\n")
        if len(out) > end - start + 1:
            out.pop()
        return [ln[:-1] if ln.endswith("\r") else ln for ln in out]

    def _line_offsets(self, fh: Any, path: Path, sha: str) -> array[int]:
        """Where each line of the open file ``fh`` starts. Cached per file identity (inode, size,
        mtime): a stored file repaired since (by this process or by `blz update` in another) is
        a new file, whose offsets are computed afresh."""
        info = os.fstat(fh.fileno())
        key = f"{path}:{sha}:{info.st_ino}:{info.st_size}:{info.st_mtime_ns}"
        cached = self._offsets.get(key)
        if cached is not None:
            return cached
        data = fh.read()
        offsets = array("q", [0])
        find = data.find
        pos = find(b"\n")
        while pos != -1:
            offsets.append(pos + 1)
            pos = find(b"\n", pos + 1)
        if offsets[-1] != len(data):  # last line without a final newline
            offsets.append(len(data))
        if len(self._offsets) > 32:
            self._offsets.clear()
        self._offsets[key] = offsets
        return offsets

    def history(self, alias: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        sql = "SELECT alias, action, at, url, sha256, lines, detail FROM history"
        args: tuple[Any, ...] = ()
        if alias:
            sql += " WHERE alias = ?"
            args = (alias,)
        sql += " ORDER BY id DESC LIMIT ?"
        keys = ("alias", "action", "at", "url", "sha256", "lines", "detail")
        return [dict(zip(keys, r)) for r in self.db.execute(sql, (*args, limit))]

    # -- writes -------------------------------------------------------------------------------

    def write_file(self, alias: str, data: bytes) -> tuple[str, str]:
        """Write ``data`` beside any current file (atomically); returns ``(file name, sha256)``.

        Files are named by their content's hash, so a file of that name may exist already (the same
        content added again, or the current file being repaired). It is kept only if its bytes still
        hash to that name; a damaged one is replaced, atomically, by ``data``."""
        from cairn_servers.core.files import write_atomic

        sha = sha256_hex(data)
        folder = self.root / "sources" / alias
        name = f"{sha[:16]}.txt"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            target = folder / name
            if not _holds(target, sha):
                write_atomic(target, data)
        except OSError as exc:
            raise StorageError(f"Cannot write {folder}: {exc}. Check free space and permissions.") from exc
        return name, sha

    def replace_source(self, row: SourceRow, doc: Document, action: str, detail: str = "",
                       options: dict[str, Any] | None = None, *, line_map: bytes | None = None,
                       changes: dict[str, Any] | None = None) -> SourceRow:
        """Swap ``row.alias``'s index for ``doc``'s in one transaction, then drop stale files.
        ``options`` (see :meth:`options`) are stored in the same transaction. Returns the row as
        stored (with its sid).

        A new source starts at version 1; new content for an existing one is the next version, stored
        with ``line_map`` and ``changes`` (from the version before; None when they could not be made),
        and the versions older than the last :data:`cairn_servers.blz.limits.KEEP_VERSIONS` are dropped. The
        same content indexed again (a repair, another language choice) keeps its version."""
        from cairn_servers.blz.citation import section_anchors
        from cairn_servers.blz import limits

        lines = doc.lines
        sep = PATH_SEP
        link = _LINK.sub
        db = self.db
        anchors = section_anchors([(bool(s.heading), s.path) for s in doc.sections])
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                old = db.execute("SELECT sid, sha256 FROM sources WHERE alias = ?", (row.alias,)).fetchone()
                sid = old[0] if old else db.execute("SELECT COALESCE(MAX(sid), 0) + 1 FROM sources").fetchone()[0]
                row = row._replace(sid=sid)
                base = sid << SID_SHIFT
                if len(doc.sections) >= 1 << LEVEL_SHIFT:
                    raise StorageError(f"{row.alias!r} has {len(doc.sections):,} sections; at most "
                                       f"{(1 << LEVEL_SHIFT) - 1:,} fit one source.")
                level = level_at([(h.line, h.level, h.end) for h in doc.headings])
                sections = doc.sections
                rowid = [base | level(s.start) << LEVEL_SHIFT | n for n, s in enumerate(sections)]
                # Inserted in rowid order: FTS5 flushes its pending index to a new segment whenever a
                # rowid is lower than the last one, and more segments make every query slower.
                rows = ((rowid[n], link(r"\1", s.heading) if "](" in s.heading else s.heading,
                         link(r"\1", " ".join(s.path[:-1] if s.heading else s.path)),
                         # the heading line itself is in `heading`, not in the body
                         "\n".join(lines[(s.start if s.heading else s.start - 1):s.end]),
                         s.start, s.end, sep.join(s.path) + ANCHOR_SEP + anchors[n])
                        for n, s in sorted(enumerate(sections), key=lambda item: rowid[item[0]]))
                lo, hi = row.rowids
                db.execute("DELETE FROM sections WHERE rowid BETWEEN ? AND ?", (lo, hi))
                db.execute("DELETE FROM headings WHERE alias = ?", (row.alias,))
                db.executemany("INSERT INTO sections(rowid, heading, path, body, first_line, last_line, hpath) "
                               "VALUES (?,?,?,?,?,?,?)", rows)
                db.executemany("INSERT INTO headings VALUES (?,?,?,?,?)",
                               [(row.alias, h.line, h.level, h.text, h.end) for h in doc.headings])
                db.execute("INSERT OR REPLACE INTO sources VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", tuple(row))
                db.execute("DELETE FROM meta WHERE key = ?", (_OPTIONS + row.alias,))
                if options:
                    db.execute("INSERT INTO meta VALUES (?, ?)", (_OPTIONS + row.alias, json.dumps(options)))
                self._log(row.alias, action, row.url, row.sha256, row.lines, detail)
                last = db.execute("SELECT MAX(version) FROM versions WHERE alias = ?", (row.alias,)).fetchone()[0]
                if old is None or last is None:  # a new source (or one from before versions): version 1
                    db.execute("DELETE FROM versions WHERE alias = ?", (row.alias,))
                    db.execute("INSERT INTO versions(alias, version, at, sha256, lines) VALUES (?,1,?,?,?)",
                               (row.alias, row.fetched_at, row.sha256, row.lines))
                elif old[1] != row.sha256:
                    db.execute("INSERT INTO versions VALUES (?,?,?,?,?,?,?)",
                               (row.alias, last + 1, row.fetched_at, row.sha256, row.lines, line_map,
                                encode_changes(changes) if changes is not None else None))
                    # the base version of the oldest map kept stays citable; its own row goes
                    db.execute("DELETE FROM versions WHERE alias = ? AND version < ?", (row.alias, last + 2 - limits.KEEP_VERSIONS))
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:  # SQLite has already rolled back after SQLITE_FULL / IOERR
                    db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise StorageError(f"Indexing {row.alias!r} failed: {exc}. The previous index is unchanged; "
                               "check free space and retry.") from exc
        self._drop_stale_files(row.alias, keep=row.file)
        return row

    def touch(self, alias: str, *, etag: str | None, last_modified: str | None, detail: str) -> None:
        """Record a check that changed nothing (HTTP 304 or identical bytes)."""
        with self._tx():
            self.db.execute("UPDATE sources SET checked_at = ?, etag = COALESCE(?, etag), "
                            "last_modified = COALESCE(?, last_modified) WHERE alias = ?",
                            (now_iso(), etag, last_modified, alias))
            row = self.source(alias)
            self._log(alias, "unchanged", row.url if row else None, row.sha256 if row else None,
                      row.lines if row else None, detail)

    def delete_source(self, alias: str) -> None:
        with self._tx():
            row = self.source(alias)
            if row is not None:
                self.db.execute("DELETE FROM sections WHERE rowid BETWEEN ? AND ?", row.rowids)
            self.db.execute("DELETE FROM headings WHERE alias = ?", (alias,))
            self.db.execute("DELETE FROM sources WHERE alias = ?", (alias,))
            self.db.execute("DELETE FROM meta WHERE key = ?", (_OPTIONS + alias,))
            self.db.execute("DELETE FROM versions WHERE alias = ?", (alias,))
            self._log(alias, "remove", row.url if row else None, row.sha256 if row else None,
                      row.lines if row else None, "")
        self._drop_stale_files(alias, keep=None)

    def _log(self, alias: str, action: str, url: str | None, sha: str | None, lines: int | None,
             detail: str) -> None:
        self.db.execute("INSERT INTO history(alias, action, at, url, sha256, lines, detail) "
                        "VALUES (?,?,?,?,?,?,?)", (alias, action, now_iso(), url, sha, lines, detail))

    def _tx(self) -> _Transaction:
        return _Transaction(self.db)

    def tidy(self, row: SourceRow) -> None:
        """Delete files of ``row.alias`` other than its current one: a run killed between its commit
        and its clean-up leaves the previous file behind, and an unchanged update must not keep it."""
        self._drop_stale_files(row.alias, keep=row.file)

    def _drop_stale_files(self, alias: str, keep: str | None) -> None:
        folder = self.root / "sources" / alias
        if not folder.is_dir():
            return
        for child in folder.iterdir():
            if child.name != keep:
                child.unlink(missing_ok=True)
        if keep is None:
            try:
                folder.rmdir()
            except OSError:
                pass


def encode_changes(changes: dict[str, Any]) -> bytes:
    """A version's section changes as stored: JSON, compressed (``versions.changes``)."""
    import zlib

    return zlib.compress(json.dumps(changes, separators=(",", ":")).encode(), 6)


def decode_changes(blob: bytes | str | None) -> dict[str, Any]:
    """:func:`encode_changes` undone; {} for none."""
    if not blob:
        return {}
    import zlib

    found = json.loads(zlib.decompress(blob) if isinstance(blob, bytes) else blob)
    return found if isinstance(found, dict) else {}


def rowid_ranges(sid: int, levels: tuple[int, ...] | None = None) -> list[tuple[int, int]]:
    """The rowid ranges (inclusive) of source ``sid``'s sections, only those under headings of
    ``levels`` (sorted, 0-15; 0 is the text before any heading) when given: one range per run of
    consecutive levels."""
    base = sid << SID_SHIFT
    if levels is None:
        return [(base, base + (1 << SID_SHIFT) - 1)]
    out: list[tuple[int, int]] = []
    for level in levels:
        lo, hi = base | level << LEVEL_SHIFT, (base | (level + 1) << LEVEL_SHIFT) - 1
        if out and out[-1][1] + 1 == lo:
            out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def level_at(heads: list[tuple[int, int, int]]) -> Callable[[int], int]:
    """For headings ``(line, level, last_line)`` in file order: a function giving the level of the
    heading a section starting at a line is under (the nearest heading at or before that line
    whose section still runs there), 0 when there is none (text before the first heading, or
    after a page boundary ended the last heading's section)."""
    from bisect import bisect_right

    lines = [h[0] for h in heads]

    def level(start: int) -> int:
        k = bisect_right(lines, start) - 1
        return heads[k][1] if k >= 0 and heads[k][2] >= start else 0

    return level


def _migrate_levels(db: sqlite3.Connection) -> None:
    """Schema 2 -> 3: section rowids gain the heading level (bits 28-31) that the heading-level
    filter of search reads. Sources need not be added again: each section's level comes from the
    stored outline, and the stored rows are copied into a new FTS5 table one by one (the text is
    tokenized again: about as long as indexing every source once; memory holds two integers per
    section of one source). One transaction: another
    process opening the store meanwhile waits (as long as the migration takes, not the usual 10 s),
    then finds it migrated; a failure changes nothing."""
    db.execute("PRAGMA busy_timeout = 600000")
    try:
        db.execute("BEGIN IMMEDIATE")
    finally:
        db.execute("PRAGMA busy_timeout = 10000")  # sqlite3.connect(timeout=10.0)
    try:
        if db.execute("PRAGMA user_version").fetchone()[0] == 2:  # not done by another process meanwhile
            db.execute("DROP TABLE IF EXISTS sections_v3")
            db.execute(_SECTIONS.format(name="sections_v3"))
            for alias, sid in db.execute("SELECT alias, sid FROM sources ORDER BY sid").fetchall():
                level = level_at(db.execute("SELECT line, level, last_line FROM headings WHERE alias = ? "
                                            "ORDER BY line", (alias,)).fetchall())
                lo = sid << SID_SHIFT
                # (new rowid, old rowid), copied in new-rowid order (see replace_source)
                moves = sorted((old | level(first) << LEVEL_SHIFT, old) for old, first in db.execute(
                    "SELECT rowid, first_line FROM sections WHERE rowid BETWEEN ? AND ?",
                    (lo, lo + (1 << SID_SHIFT) - 1)))
                db.executemany("INSERT INTO sections_v3(rowid, heading, path, body, first_line, last_line, hpath) "
                               "SELECT ?, heading, path, body, first_line, last_line, hpath FROM sections "
                               "WHERE rowid = ?", moves)
            db.execute("DROP TABLE sections_vocab")
            db.execute("DROP TABLE sections")
            db.execute("ALTER TABLE sections_v3 RENAME TO sections")
            db.execute("CREATE VIRTUAL TABLE sections_vocab USING fts5vocab(sections, 'row')")
            db.execute("PRAGMA user_version=3")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def _migrate_versions(db: sqlite3.Connection) -> None:
    """Schema 3 -> 4: the versions table, with each installed source at version 1 (no line map yet).
    Sections indexed before carry no anchor in hpath; their anchors are computed when asked for."""
    with _Transaction(db):
        if db.execute("PRAGMA user_version").fetchone()[0] == 3:  # not done by another process meanwhile
            db.execute(_VERSIONS)
            db.execute("INSERT OR IGNORE INTO versions(alias, version, at, sha256, lines) "
                       "SELECT alias, 1, COALESCE(fetched_at, ''), sha256, COALESCE(lines, 0) FROM sources")
            db.execute("PRAGMA user_version=4")


def _holds(path: Path, sha: str) -> bool:
    """Whether the file at ``path`` exists and its bytes hash to ``sha``."""
    try:
        return file_digest(path)[0] == sha
    except OSError:
        return False


def _open_hint(root: Path) -> str:
    """The likely fix when SQLite cannot open the database: a full disk reads as "disk I/O error"."""
    import shutil

    try:
        free = shutil.disk_usage(root).free
    except OSError:
        free = None
    if free is not None and free < (1 << 20):
        return (f"No space left on the device holding it ({free:,} bytes free): free some space and "
                "retry; nothing stored was lost.")
    return "Check the directory's permissions, or set BLZ_DATA_DIR."


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StorageError(f"The blz database is busy or unwritable: {exc}. Retry in a moment.") from exc

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            if exc_type is None:
                self.db.execute("COMMIT")
                return
        except sqlite3.Error as failed:
            exc = failed
        if self.db.in_transaction:  # SQLite rolls back by itself after SQLITE_FULL / IOERR
            self.db.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise StorageError(f"Cannot write the blz database: {exc}. Nothing was changed; check free "
                               "space and retry.") from exc
