"""The query interface: the logic behind brk's ten operations (declared once in ``cairn_servers.brk.ops``, from
which the MCP tools, the HTTP routes, OpenAPI and the CLI are generated).

Numbers may arrive as strings (``"-1"``), ``ids`` as a list or a comma/space separated string. Ids and
index names are lower-cased and ``-`` is read as ``_``. Unknown indexes and ids fail with a
``NotFound`` naming the closest matches (never the asked name itself; see ``suggest``), the indexes an
id exists on when it is asked on another one, and ``brk price import`` when the id is a dollar series
and the store has no prices yet.

``get_vecs`` returns :class:`Vecs` (the ids and their columns); the adapters render it
(``cairn_servers.brk.ops.render_vecs``: json, csv, tsv, md).
"""

from __future__ import annotations

import math
import threading

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the stdio servers' start-up path
if TYPE_CHECKING:
    from typing import Any

from cairn_servers.brk import version as version  # re-exported: brk's operations and HTTP app name it here
from cairn_servers.core.errors import InvalidInput, NotFound, TooLarge

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np

    from cairn_servers.brk.catalog import Recipe, Vec
    from cairn_servers.brk.esplora import Explorer

# The catalog (and the readers behind it) is imported by ``Interface()``, not here: the operations
# (``cairn_servers.brk.ops``) import this module to declare themselves.

PAGE_SIZE = 1000
MAX_CELLS = 1_000_000  # values (ids x rows) one get_vecs may return
FORMATS = ("json", "csv", "tsv", "md")
FORMAT_ALIASES = {"markdown": "md"}
PRICE_HINT = ("Dollar prices appear after `brk price import FILE.csv` (a daily CSV) or `brk price fetch` "
              "(downloads them from Kraken); `brk run` and `brk index --watch` fetch them by themselves when "
              "online.")
# Unit words stripped before comparing names: a bare value series is in sats (``fee`` = ``fee_sats``),
# and ``block_size`` is in bytes.
UNITS = frozenset({"sats", "sat", "satoshis", "bytes", "byte", "btc", "usd"})


def _accepted_lookup() -> dict[str, str]:
    from cairn_servers.brk.catalog import ACCEPTED

    return {name: index for index, names in ACCEPTED.items() for name in names}


class Vecs:
    """The answer of ``get_vecs``: one column of values per id, and the format the caller asked for."""

    __slots__ = ("ids", "columns", "format")

    def __init__(self, ids: list[str], columns: list[list[Any]], format: str = "json") -> None:
        self.ids = ids
        self.columns = columns
        self.format = format

    def __repr__(self) -> str:
        return f"Vecs(ids={self.ids!r}, rows={len(self.columns[0]) if self.columns else 0}, format={self.format!r})"

    def value(self) -> Any:
        """The JSON shape: one id and one row -> the value; one id, several rows -> a list; several ids ->
        a column-major matrix (one list per id)."""
        if len(self.columns) == 1:
            return self.columns[0][0] if len(self.columns[0]) == 1 else self.columns[0]
        return self.columns


class Interface:
    """Queries over one output directory; safe to share between threads."""

    def __init__(self, out: Path, *, max_cells: int = MAX_CELLS) -> None:
        from cairn_servers.brk.catalog import Source

        self.out = out
        self.max_cells = max_cells
        self.source = Source(out)
        self._lookup = _accepted_lookup()
        self._lock = threading.Lock()
        self._catalog_prices: bool | None = None
        self._tables: dict[str, dict[str, Recipe]] = {}  # index -> id -> recipe, each built on first use
        self._ids: list[str] = []
        self._id_indexes: dict[str, tuple[str, ...]] = {}
        self._index_ids: dict[str, list[str]] = {}
        self._refresh()

    # -- state ------------------------------------------------------------------------------------
    def _refresh(self) -> None:
        from cairn_servers.brk.catalog import INDEXES, ids

        self.source.refresh()
        prices = self.source.has_prices
        if prices != self._catalog_prices:
            with self._lock:
                # Only the names are kept (one string per id, one tuple per set of indexes): the readers
                # of an index are made when a query first reads it (``_table``).
                index_ids = {index: ids(index, prices) for index in INDEXES}
                names: dict[str, str] = {}
                on: dict[str, list[str]] = {}
                for index in INDEXES:
                    row = index_ids[index] = [names.setdefault(vec_id, vec_id) for vec_id in index_ids[index]]
                    for vec_id in row:
                        on.setdefault(vec_id, []).append(index)
                shared: dict[tuple[str, ...], tuple[str, ...]] = {}
                id_indexes: dict[str, tuple[str, ...]] = {}
                for vec_id, indexes in on.items():
                    key = tuple(indexes)
                    id_indexes[vec_id] = shared.setdefault(key, key)
                self._id_indexes = id_indexes
                self._index_ids = index_ids
                self._ids = sorted(on)
                self._tables = {}
                self._catalog_prices = prices

    def _table(self, index: str) -> dict[str, Recipe]:
        from cairn_servers.brk.catalog import table

        tables = self._tables  # swapped whole by _refresh
        row = tables.get(index)
        if row is None:
            with self._lock:
                row = tables.get(index)
                if row is None:
                    row = tables[index] = table(index, bool(self._catalog_prices))
        return row

    @property
    def explorer(self) -> Explorer:
        """The block explorer's look-ups (``cairn_servers.brk.esplora``), opened on first use."""
        found = self.__dict__.get("_explorer")
        if found is None:
            from cairn_servers.brk.esplora import Explorer

            with self._lock:
                found = self.__dict__.setdefault("_explorer", Explorer(self.out))
        return found  # type: ignore[no-any-return]

    def tip(self) -> int:
        """The committed height served (-1 when nothing is computed yet)."""
        self._refresh()
        return self.source.tip()

    def etag(self) -> str:
        self._refresh()
        prices = f"1-{self.source.price_tag}" if self.source.has_prices else "0"  # a price import changes it
        return f'"{self.source.generation}-{self.source.tip()}-{prices}"'

    # -- the operations (declared in cairn_servers.brk.ops) ------------------------------------------------------
    @staticmethod
    def get_index_count() -> int:
        from cairn_servers.brk.catalog import INDEXES

        return len(INDEXES)

    def get_vecid_count(self) -> int:
        self._refresh()
        return len(self._ids)

    def get_vec_count(self) -> int:
        self._refresh()
        return sum(len(v) for v in self._id_indexes.values())

    @staticmethod
    def get_indexes() -> list[str]:
        from cairn_servers.brk.catalog import INDEXES

        return list(INDEXES)

    @staticmethod
    def get_accepted_indexes() -> dict[str, list[str]]:
        from cairn_servers.brk.catalog import ACCEPTED, INDEXES

        return {index: list(ACCEPTED[index]) for index in INDEXES}

    def get_vecids(self, page: Any = 0) -> list[str]:
        self._refresh()
        return _page(self._ids, _int(page, "page", minimum=0))

    def get_index_to_vecids(self, index: Any, page: Any = 0) -> list[str]:
        self._refresh()
        return _page(self._index_ids[self.resolve_index(index)], _int(page, "page", minimum=0))

    def id_indexes(self) -> dict[str, tuple[str, ...]]:
        """Every served id -> the indexes it is on. Replaced whole, never changed, when the catalogue
        changes (prices arrive), so callers may key caches on the object (``cairn_servers.brk.idsearch``)."""
        self._refresh()
        return self._id_indexes

    def get_vecid_to_indexes(self, vec_id: Any) -> list[str]:
        self._refresh()
        return list(self._id_indexes[self.resolve_id(vec_id)])

    def get_vecs(self, index: Any, ids: Any, from_: Any = None, to: Any = None, count: Any = None) -> Vecs:
        """Rows ``[from, to)`` (or ``count`` rows from ``from``) of one or more vecs on one index."""
        if index is None or not str(index).strip():
            raise InvalidInput("get_vecs needs an index, e.g. index=date (see get_indexes).")
        index = self.resolve_index(index)
        names = parse_ids(ids)
        self._refresh()
        vecs = [self._vec(index, vec_id) for vec_id in names]
        length = self.source.length(index)
        start, stop = resolve_range(length, from_, to, count)
        cells = (stop - start) * len(vecs)
        if cells > self.max_cells:
            raise TooLarge(f"This query asks for {cells:,} values ({len(vecs)} ids x {stop - start:,} rows); "
                           f"the limit is {self.max_cells:,}. Narrow it with from/to/count or ask for fewer ids.")
        return Vecs([v.id for v in vecs], [to_list(v.read(self.source, start, stop), stop - start) for v in vecs])

    # -- resolution -----------------------------------------------------------------------------------
    def resolve_index(self, name: Any) -> str:
        key = _key(name)
        index = self._lookup.get(key)
        if index is None:
            close = suggest(key, list(self._lookup), n=3, cutoff=0.5)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            raise NotFound(f"Unknown index {name!r}.{hint} See get_indexes (or /api/vecs/indexes).")
        return index

    def resolve_id(self, name: Any) -> str:
        key = _key(name)
        if key not in self._id_indexes:
            priced = self._priced_only()
            if key in priced:
                raise NotFound(f"Vec id {name!r} is computed from dollar prices, which this store does not "
                               f"have yet (it will exist on: {', '.join(priced[key])}). {PRICE_HINT}")
            close = self._suggest(key, self._ids, list(priced))
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            if any(c in priced for c in close):
                hint += " " + PRICE_HINT
            raise NotFound(f"Unknown vec id {name!r}.{hint} List ids with get_vecids.")
        return key

    @staticmethod
    def _suggest(name: str, available: list[str], priced: list[str], n: int = 5) -> list[str]:
        """Suggestions among the ids that exist, then (to fill up) among those that need prices."""
        close = suggest(name, available, n)
        return close + suggest(name, priced, n - len(close)) if len(close) < n and priced else close

    def _priced_only(self) -> dict[str, list[str]]:
        """Ids that exist only once prices are imported -> the indexes they will be on ({} with prices)."""
        if self.source.has_prices:
            return {}
        from cairn_servers.brk.catalog import INDEXES, ids

        out: dict[str, list[str]] = {}
        for index in INDEXES:
            have = set(self._index_ids[index])
            for vec_id in ids(index, True):
                if vec_id not in have:
                    out.setdefault(vec_id, []).append(index)
        return out

    def _vec(self, index: str, name: str) -> Vec:
        recipe = self._table(index).get(name)
        if recipe is not None:
            from cairn_servers.brk.catalog import Vec

            return Vec(name, index, recipe)
        if name in self._id_indexes:
            raise NotFound(f"Vec {name!r} is not available on {index}; it exists on: "
                           f"{', '.join(self._id_indexes[name])}.")
        priced = self._priced_only()
        if index in priced.get(name, ()):
            raise NotFound(f"Vec {name!r} on {index} is computed from dollar prices, which this store does not "
                           f"have yet. {PRICE_HINT}")
        if name in priced:
            raise NotFound(f"Vec {name!r} is not available on {index}; once prices are imported it exists on: "
                           f"{', '.join(priced[name])}. {PRICE_HINT}")
        here = [vec_id for vec_id, indexes in priced.items() if index in indexes]
        close = self._suggest(name, self._index_ids[index], here)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        if any(c in priced for c in close) or (priced and name.endswith("_usd")):
            hint += " " + PRICE_HINT
        if not close:  # nothing alike on this index: maybe on another one
            elsewhere = suggest(name, self._ids, n=3)
            if elsewhere:
                hint = " Similar ids on other indexes: " + "; ".join(
                    f"{c} ({', '.join(self._id_indexes[c])})" for c in elsewhere) + "."
        raise NotFound(f"Unknown vec id {name!r} on {index}.{hint} List them with get_index_to_vecids.")


# -- parameters ----------------------------------------------------------------------------------------
def _key(name: Any) -> str:
    return str(name).strip().lower().replace("-", "_")


def normalize_format(value: Any) -> str:
    """``json`` (default), ``csv``, ``tsv`` or ``md`` (``markdown`` accepted), lower-cased."""
    fmt = str(value or "json").strip().lower()
    fmt = FORMAT_ALIASES.get(fmt, fmt)
    if fmt not in FORMATS:
        raise InvalidInput(f"Unknown format {value!r}. Use one of: {', '.join(FORMATS)} (markdown = md).")
    return fmt


def _core(name: str) -> tuple[str, ...]:
    """The words of a name without its unit words: ``fee_sats`` -> ``("fee",)``."""
    words = tuple(w for w in name.split("_") if w)
    core = tuple(w for w in words if w not in UNITS)
    return core or words


def suggest(name: str, candidates: list[str], n: int = 5, cutoff: float = 0.6) -> list[str]:
    """The candidates most like ``name``, best first, never ``name`` itself.

    A candidate matches when its words without units equal the asked name's (``fee_sats`` -> ``fee``),
    when the asked words are a prefix or suffix of its words (``size`` -> ``block_size``, ``tx`` ->
    ``tx_count``), when it holds every asked word, when it starts with the asked text (three letters or
    more: ``dat`` -> ``dateindex``), or when the spelling is close (difflib ratio ``cutoff`` or more:
    ``suply`` -> ``supply``). Fewer extra words rank higher, so the base series comes before its
    ``_avg``/``_cumulative`` forms.
    """
    import difflib

    key = _core(name)
    n_key = len(key)
    matcher = difflib.SequenceMatcher()
    matcher.set_seq2(name)
    scored: list[tuple[float, int, str]] = []
    for cand in set(candidates):
        if cand == name:
            continue
        words = _core(cand)
        extra = len(words) - n_key
        if words == key:
            score = 3.0
        elif extra > 0 and (words[:n_key] == key or words[-n_key:] == key):
            score = 2.0 - 0.1 * extra
        elif extra > 0 and set(key) <= set(words):
            score = 1.5 - 0.1 * extra
        elif len(name) >= 3 and cand.startswith(name):
            score = 1.2
        else:
            matcher.set_seq1(cand)
            if matcher.real_quick_ratio() < cutoff or matcher.quick_ratio() < cutoff:
                continue
            ratio = matcher.ratio()
            if ratio < cutoff:
                continue
            score = ratio
        scored.append((-score, len(cand), cand))
    return [cand for _, _, cand in sorted(scored)[:n]]


def parse_ids(ids: Any) -> list[str]:
    if ids is None or ids == "" or ids == []:
        raise InvalidInput("get_vecs needs ids, e.g. ids=close,tx_count (see get_vecids).")
    if isinstance(ids, str):
        parts = ids.replace(",", " ").split()
    elif isinstance(ids, (list, tuple)):
        parts = [p for item in ids for p in str(item).replace(",", " ").split()]
    else:
        raise InvalidInput(f"ids must be a string or a list of strings, not {type(ids).__name__}.")
    if not parts:
        raise InvalidInput("get_vecs needs ids, e.g. ids=close,tx_count (see get_vecids).")
    return [_key(p) for p in parts]


def _int(value: Any, name: str, *, minimum: int | None = None) -> int:
    if isinstance(value, bool):
        raise InvalidInput(f"{name} must be an integer, not a boolean.")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    else:
        text = str(value).strip()
        try:
            number = int(text)
        except ValueError:
            raise InvalidInput(f"{name} must be an integer, got {value!r}.") from None
    if minimum is not None and number < minimum:
        raise InvalidInput(f"{name} must be {minimum} or more, got {number}.")
    return number


def _opt_int(value: Any, name: str, *, minimum: int | None = None) -> int | None:
    return None if value is None or value == "" else _int(value, name, minimum=minimum)


def resolve_range(length: int, frm: Any, to: Any, count: Any) -> tuple[int, int]:
    """``[start, stop)`` from from (inclusive), to (exclusive; wins over count) and count; negative = from the end."""
    f = _opt_int(frm, "from")
    t = _opt_int(to, "to")
    c = _opt_int(count, "count", minimum=0)
    start = 0 if f is None else (f + length if f < 0 else f)
    start = min(max(start, 0), length)
    if t is not None:
        stop = t + length if t < 0 else t
    elif c is not None:
        stop = start + c
    else:
        stop = length
    return start, min(max(stop, start), length)


def _page(items: list[str], page: int) -> list[str]:
    start = page * PAGE_SIZE
    return items[start:start + PAGE_SIZE]


# -- output -----------------------------------------------------------------------------------------
def to_list(values: np.ndarray | list[Any], rows: int) -> list[Any]:
    """JSON-ready values: numpy scalars as Python numbers, NaN and infinities as None (JSON has neither:
    a market cap that overflows, or a price stored before imports refused such values, reads null)."""
    if isinstance(values, list):
        return values[:rows]
    out: list[Any] = values[:rows].tolist()
    if values.dtype.kind == "f":
        import numpy as np

        if not np.isfinite(values[:rows]).all():
            out = [v if math.isfinite(v) else None for v in out]
    return out
