"""Address cohorts (BRK's ids): supply, address count, realized and unrealized value of the addresses grouped by
balance band and by address type, per height in ``OUT/addrcohorts/``.

An address is *funded* while it holds at least one unspent output (as in BRK, so an address holding only 0-sat
outputs is in ``addrs_0sats``). A funded address is in:

* one balance band: ``addrs_0sats``, ``addrs_1sat_to_10sats`` .. ``addrs_10k_btc_to_100k_btc``,
  ``addrs_over_100k_btc`` (BRK's amount boundaries, powers of ten), plus the sums ``addrs_over_<amount>`` /
  ``addrs_under_<amount>``;
* one type cohort: ``p2pk65_addrs`` .. ``p2a_addrs`` (the address types of ``cairn_servers.brk.addresses``).

So the bands sum to every funded address and its supply, and so do the types (outputs without an address, bare
multisig, OP_RETURN and non-standard, are in no address cohort).

An address's realized value is the sum, over the outputs it holds, of value x the close of each output's
creation day (else the last earlier close, else 0): each output received adds its value at that price, each
output spent removes its own (BRK's address realized cap). Its cost basis is realized value / balance.

* supply, ``addr_count``, ``realized_cap``: sums over the cohort's funded addresses after the block.
* flows of a block (``realized_profit``, ``realized_loss``, ``value_created``, ``value_destroyed``): over the
  outputs the block spends, by the cohort of the spending address *after the block's receipts and before its
  spends* (BRK applies a block's receipts first, then each spend in turn from the address's bucket at that
  moment; here all of a block's spends from one address count in the cohort it is in before the first of them).
* unrealized figures at a block, against the close of its day: each address is classified by its cost basis.
  The state is bounded: per cohort, a histogram of supply, realized value and count by cost-basis bucket
  (``BUCKETS_PER_DECADE`` log-spaced buckets a decade from $0.01 to $100M, bucket 0 for a zero basis). Buckets
  below the close's are in profit, those above in loss, and the close's own bucket (the only approximation) is
  in profit when its average cost basis is below the close, in loss when above. So ``supply_in_profit`` /
  ``_loss`` and ``unrealized_*`` are exact but for the addresses whose basis is within one bucket (1.2 %) of
  the close.

**Bounded state.** Per address: its balance, realized value (integer milli-dollars, so every sum is exact and
a rerun gives the same bits) and unspent-output count, in three fixed-width files indexed by address id
(``balance.bin``, ``realized.bin``, ``utxos.bin``) grown as ids grow; the per-cohort histogram
(``state/hist-<H>.bin``, written before the manifest naming ``H`` commits). Before a chunk changes the files,
every address it touches is saved with its state before the chunk in ``undo/<a>-<b>.npy`` (fsynced): a kill
before the commit is undone on the next open; a reorg or a price change from height ``f`` undoes the chunks
from the one holding ``f`` (the histogram follows from the undo rows), kept for ``UNDO_HEIGHTS`` heights; deeper,
or prices first stored after indexing, the pass starts again from 0.

It reads what the address pass (``cairn_servers.brk.addresses``) committed (address ids of outputs, address
types) and never goes past the heights it committed that agree with the raw chain. It runs in another process
than the address pass (``brk index --jobs``) without its lock: it reads committed rows only, and a chunk whose
reads may have met an address-pass rollback (the address store's generation changed) is not committed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn_servers.brk.cohorts import (AMOUNT_EDGES, AMOUNT_LABELS, METRIC_LINES, _amount_words, close_of,
                                      creation_prices, ids_of, pattern_lines)
from cairn_servers.brk.addresses import undo_files
from cairn_servers.brk.faults import fault as _fault
from cairn_servers.brk.gather import Rows, gather
from cairn_servers.brk.reader import StoreReader
from cairn_servers.brk.vecs import VecSpec, VecStore
from cairn_servers.core.files import atomic_file, fsync_file, grow_file, replace_file

if TYPE_CHECKING:
    import numpy as np

SATS = 100_000_000.0
MILLI = 1000.0  # realized values are kept in integer milli-dollars
TYPE_CODES = (0, 1, 2, 4, 6, 7, 8, 9)  # the raw type codes of the address types (``addresses.ADDRESS_TYPES``)
TYPE_NAMES = ("p2pk65", "p2pk33", "p2pkh", "p2sh", "p2wpkh", "p2wsh", "p2tr", "p2a")
BAND_COHORTS = ("addrs_0sats", *(f"addrs_{AMOUNT_LABELS[i]}_to_{AMOUNT_LABELS[i + 1]}" for i in range(13)),
                "addrs_over_100k_btc")
TYPE_COHORTS = tuple(f"{t}_addrs" for t in TYPE_NAMES)
ATOMIC = (*BAND_COHORTS, *TYPE_COHORTS)  # the stored columns
NBAND, NC = len(BAND_COHORTS), len(ATOMIC)
BUCKETS_PER_DECADE = 200
P_MIN = 0.01
NB = 2 + 10 * BUCKETS_PER_DECADE  # bucket 0: zero basis; 1 ..: from $0.01 up; the last: $100M and above
STATES = ("supply", "addr_count", "realized_cap", "supply_in_profit", "supply_in_loss", "unrealized_profit",
          "unrealized_loss")
FLOWS = ("realized_profit", "realized_loss", "value_created", "value_destroyed")
METRICS = (*STATES, *FLOWS)
SATS_METRICS = ("supply", "supply_in_profit", "supply_in_loss")
DERIVED = ("realized_price", "net_realized_pnl", "sopr", "mvrv", "nupl", "supply_rel_to_circulating_supply")
ALIASES: dict[str, str] = {}  # none: BRK's addr_count only (an alias doubled every count id in the search)
UNDO_HEIGHTS = 10_000
CHUNK_ROWS = int(os.environ.get("CAIRN_BRK_ADDRCOHORT_ROWS", "250000"))  # inputs + outputs a chunk (memory)
CHUNK_BLOCKS = 2000  # and blocks a chunk at most: its per-block rows (23 cohorts x 11 metrics) stay a few MB
NONE = (1 << 32) - 1
NO_OUTPUT = (1 << 64) - 1
VERSION = 1


def _cohort_columns() -> dict[str, tuple[int, ...]]:
    """Every address cohort id -> the atomic columns it sums (a run of adjacent ones)."""
    cols: dict[str, tuple[int, ...]] = {name: (i,) for i, name in enumerate(ATOMIC)}
    for i, label in enumerate(AMOUNT_LABELS):
        if i <= 12:
            cols[f"addrs_over_{label}"] = tuple(range(i + 1, NBAND))
        if i >= 1:
            cols[f"addrs_under_{label}"] = tuple(range(0, i + 1))
    return cols


COHORTS = _cohort_columns()
assert all(cols == tuple(range(cols[0], cols[-1] + 1)) for cols in COHORTS.values())


def addrcohorts_dir(out: Path) -> Path:
    return out / "addrcohorts"


def specs() -> list[VecSpec]:
    return [VecSpec("height_to_blockhash", "height", "u1", 32, VERSION),
            *(VecSpec(f"height_to_{m}", "height", "<f8", NC, VERSION) for m in METRICS),
            VecSpec("dateindex_to_close", "dateindex", "<f8", 1, VERSION)]


def update(out: Path, *, durable: bool = True, progress: Callable[..., None] | None = None,
           stop: Callable[[], bool] | None = None) -> dict[str, Any] | None:
    """Bring ``OUT/addrcohorts`` up to the address pass's committed tip (None when there is no address pass)."""
    if not (out / "addresses" / "manifest.json").exists():
        return None
    p = _AddrCohortPass(out, durable)
    try:
        return p.run(progress, stop)
    finally:
        p.close()


def bucket_of(price: np.ndarray) -> np.ndarray:
    """Cost-basis bucket of prices in dollars per BTC (0 for a zero or missing price)."""
    import numpy as np

    p = np.asarray(price, dtype=np.float64)
    ok = p > 0
    safe = np.where(ok, p, P_MIN)
    b = np.floor(np.log10(np.maximum(safe, P_MIN) / P_MIN) * BUCKETS_PER_DECADE).astype(np.int64) + 1
    result: np.ndarray = np.where(ok, np.minimum(b, NB - 1), 0)
    return result


def _basis_bucket(bal: np.ndarray, real: np.ndarray) -> np.ndarray:
    """The bucket of addresses' cost basis: realized (milli-dollars) / balance (sats)."""
    import numpy as np

    price = np.divide(real.astype(np.float64) * (SATS / MILLI), bal.astype(np.float64),
                      out=np.zeros(bal.shape[0]), where=bal > 0)
    return bucket_of(price)


def band_of(bal: np.ndarray) -> np.ndarray:
    import numpy as np

    result: np.ndarray = np.searchsorted(np.asarray(AMOUNT_EDGES, dtype=np.int64), bal, "right")
    return result


class _AddrCohortPass:
    def __init__(self, out: Path, durable: bool) -> None:
        import numpy as np

        from cairn_servers.brk.utxo import _Chain

        self.out = out
        self.root = addrcohorts_dir(out)
        self.durable = durable
        self.store = VecStore(self.root, specs(), durable=durable)
        self.state_dir = self.root / "state"
        self.state_dir.mkdir(exist_ok=True)
        self.undo_dir = self.root / "undo"
        self.undo_dir.mkdir(exist_ok=True)
        self.chain = _Chain(out)
        self.addr = StoreReader(out / "addresses")
        self.addr.refresh()
        self.addr_generation = int(self.addr.meta.get("generation", 0))
        prices = StoreReader(out / "prices")
        prices.refresh()
        self.close_ = (prices.read("dateindex_to_close").astype(np.float64)
                       if prices.exists and prices.length("dateindex_to_close") else np.zeros(0))
        prices.close()
        filled = self.close_.copy()
        idx = np.where(~np.isnan(filled), np.arange(filled.shape[0]), -1)
        np.maximum.accumulate(idx, out=idx)
        self.basis_known = np.where(idx >= 0, filled[np.maximum(idx, 0)], 0.0)
        # The address pass's committed heights that agree with the raw chain: this pass's reach.
        n = self.chain.n
        n_addr = min(n, self.addr.length("height_to_blockhash"))
        have = self.store.lengths["height_to_blockhash"]
        lo = min(have, n_addr)
        if lo < n_addr:
            ours = self.addr.read("height_to_blockhash", lo, n_addr)
            theirs = self.chain.hashes(lo, n_addr)
            differ = np.flatnonzero((ours != theirs).any(axis=1))
            n_addr = lo + int(differ[0]) if differ.size else n_addr
        self.n = n_addr
        self.hist = np.zeros((NC, NB, 3), np.int64)  # per cohort and bucket: supply, realized (milli), count

    def close(self) -> None:
        self.chain.close()
        self.addr.close()

    # -- prices -------------------------------------------------------------------------------------
    def basis(self, days: np.ndarray) -> np.ndarray:
        return creation_prices(self.basis_known, days)

    def today(self, day: int) -> float:
        return close_of(self.close_, day)

    # -- per-address files and undo rows ------------------------------------------------------------
    FILES = (("balance.bin", "<i8"), ("realized.bin", "<i8"), ("utxos.bin", "<i8"))

    def _grow(self, n: int) -> int:
        """Make each per-address file hold at least ``n`` rows (new ones 0); returns the rows they hold."""
        rows = n
        for name, _ in self.FILES:
            with open(self.root / name, "ab") as fh:
                grow_file(fh, 8 * n)
                rows = max(rows, fh.seek(0, os.SEEK_END) // 8)
        return rows

    def _get(self, ids: np.ndarray) -> np.ndarray:
        """(n, 3) balance, realized, unspent count of address ids (0 past the files' end)."""
        import numpy as np

        result = np.zeros((ids.shape[0], 3), np.int64)
        if not ids.shape[0]:
            return result
        rows = self._grow(int(ids.max()) + 1)
        r = Rows(ids)
        for k, (name, dtype) in enumerate(self.FILES):
            result[:, k] = r.take(self.root / name, dtype, rows)
        return result

    def _put(self, ids: np.ndarray, state: np.ndarray) -> None:
        if not ids.shape[0]:
            return
        rows = self._grow(int(ids.max()) + 1)
        r = Rows(ids)
        for k, (name, dtype) in enumerate(self.FILES):
            r.put(self.root / name, dtype, rows, state[:, k].astype(dtype))
        if self.durable:
            for name, _ in self.FILES:
                fsync_file(self.root / name)

    def _undo_files(self) -> list[tuple[int, int, Path]]:
        return undo_files(self.undo_dir)

    def _types(self, ids: np.ndarray) -> np.ndarray:
        """The type cohort (0 .. 7) of address ids."""
        import numpy as np

        code_to = np.zeros(16, np.int64)
        for i, code in enumerate(TYPE_CODES):
            code_to[code] = i
        if not ids.shape[0]:
            return np.zeros(0, np.int64)
        codes = gather(self.addr.root / "vecs" / "addressindex_to_type.bin", "u1",
                       self.addr.length("addressindex_to_type"), ids).astype(np.int64)
        result: np.ndarray = code_to[codes]
        return result

    def _contrib(self, state: np.ndarray, typ: np.ndarray, sign: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Histogram items of addresses in ``state`` (funded ones only): cohort, bucket, (n, 3) fields x sign; each
        address twice (its band, its type)."""
        import numpy as np

        funded = state[:, 2] > 0
        st, ty = state[funded], typ[funded]
        bkt = _basis_bucket(st[:, 0], st[:, 1])
        f = np.stack((st[:, 0], st[:, 1], np.ones(st.shape[0], np.int64)), axis=1) * sign
        coh = np.concatenate((band_of(st[:, 0]), NBAND + ty))
        return coh, np.concatenate((bkt, bkt)), np.concatenate((f, f))

    def _hist_path(self, h: int) -> Path:
        return self.state_dir / f"hist-{h}.bin"

    def _save_hist(self, h: int) -> None:
        tmp = self.state_dir / "hist.tmp"
        with open(tmp, "wb") as f:
            f.write(self.hist.astype("<i8").tobytes())
        replace_file(tmp, self._hist_path(h), durable=self.durable)

    def _load_hist(self, h: int) -> bool:
        import numpy as np

        if h == 0:
            self.hist = np.zeros((NC, NB, 3), np.int64)
            return True
        path = self._hist_path(h)
        if not path.exists() or path.stat().st_size != NC * NB * 3 * 8:
            return False
        self.hist = np.fromfile(path, dtype="<i8").reshape(NC, NB, 3).astype(np.int64)
        return True

    def _restored(self, files: list[tuple[int, int, Path]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The addresses the undo ``files`` touch, their state before the oldest of them and their type cohort
        (the one they had then: after a reorg the address pass may have given their ids to other addresses)."""
        import numpy as np

        rows = np.concatenate([np.load(p) for _, _, p in files]).astype(np.int64)  # oldest file first
        ids, first = np.unique(rows[:, 0], return_index=True)  # each id's row of the oldest file holding it
        return ids, rows[first, 1:4], rows[first, 4]

    def _reset(self, meta: dict[str, Any]) -> None:
        import numpy as np

        for _, _, p in self._undo_files():
            p.unlink()
        for name, _ in self.FILES:
            (self.root / name).unlink(missing_ok=True)
        for p in self.state_dir.glob("hist-*.bin"):
            p.unlink()
        self.hist = np.zeros((NC, NB, 3), np.int64)
        meta["generation"] = int(meta["generation"]) + 1
        meta["height"] = -1
        self.store.truncate({name: 0 for name in self.store.lengths}, meta)

    # -- the pass -------------------------------------------------------------------------------------
    def run(self, progress: Callable[..., None] | None, should_stop: Callable[[], bool] | None) -> dict[str, Any]:
        import numpy as np

        from cairn_servers.brk.progress import Stage
        from cairn_servers.brk.utxo import _fork

        s = self.store
        chain = self.chain
        meta = dict(s.meta)
        meta.setdefault("generation", 0)
        have = s.lengths["height_to_blockhash"]
        # 1. An interrupted chunk (or an interrupted rollback): the undo rows past the committed height bring the
        # per-address files back to it (newest first: older rows overwrite newer ones; idempotent).
        late = [f for f in self._undo_files() if f[1] > have]
        for _, _, p in reversed(late):
            rows = np.load(p).astype(np.int64)
            self._put(rows[:, 0], rows[:, 1:4])
        for _, _, p in late:
            p.unlink()
        if any(s.lengths[f"height_to_{m}"] != have for m in METRICS) or not self._load_hist(have):
            self._reset(meta)  # a vec was reset (a version change) or the state is missing: start again
            have = 0
        for p in self.state_dir.glob("hist-*.bin"):
            if p != self._hist_path(have):
                p.unlink()
        # 2. A reorg, or closes that changed, from ``fork``: the chunks from the one holding it are undone.
        fork = _fork(s, chain, have)
        old = np.asarray(s.read("dateindex_to_close"))
        m = min(old.shape[0], self.close_.shape[0])
        same = (old[:m] == self.close_[:m]) | (np.isnan(old[:m]) & np.isnan(self.close_[:m]))
        changed = int(np.argmin(same)) if not same.all() else (m if old.shape[0] != self.close_.shape[0] else -1)
        if changed >= 0:
            fork = min(fork, int(np.searchsorted(chain.dateindex[:chain.n], changed, "left")))
        restart, reset = have, False
        if fork < have:
            files = [f for f in self._undo_files() if f[1] > fork]
            if not files or files[0][0] > fork:  # the undo rows do not reach back to the fork: from 0
                self._reset(meta)
                restart, reset = 0, True
            else:
                restart = files[0][0]
                ids, then, typ = self._restored(files)
                for state, sign in ((self._get(ids), -1), (then, 1)):
                    coh, bkt, f = self._contrib(state, typ, sign)
                    for k in range(3):
                        np.add.at(self.hist[:, :, k], (coh, bkt), f[:, k])
                self._save_hist(restart)  # before the manifest names ``restart``
        if restart != have or changed >= 0 or reset:
            meta["generation"] = int(meta["generation"]) + 1
            lengths = {name: restart for name in s.lengths}
            lengths["dateindex_to_close"] = 0
            meta["height"] = restart - 1
            s.truncate(lengths, meta)
            s.append("dateindex_to_close", self.close_)
            s.commit(meta)
        if restart < have and not reset:  # then the files (a kill from here on: step 1 finishes it)
            files = [f for f in self._undo_files() if f[1] > restart]
            ids, then, _ = self._restored(files)
            self._put(ids, then)
            for _, _, p in files:
                p.unlink()
            self._hist_path(have).unlink(missing_ok=True)
        start, done = restart, 0
        if start < self.n:
            rows_at = chain.rows
            stage = Stage(progress, "addrcohorts", chain.raw, start, self.n, should_stop)
            # While the address pass is behind the raw chain (a long indexing run), only whole chunks: each commit
            # costs a dozen fsyncs, and the rest comes with the address pass's next commits (or at the end).
            behind = self.n < chain.n
            while start < self.n:
                limit = int(np.searchsorted(rows_at, int(rows_at[start]) + CHUNK_ROWS, "right"))
                stop = max(start + 1, min(self.n, limit, start + CHUNK_BLOCKS))
                if behind and stop == self.n and int(rows_at[stop] - rows_at[start]) < CHUNK_ROWS // 2:
                    break
                if not self._chunk(start, stop, meta):
                    break
                done += stop - start
                start = stop
                if stage.done(stop):
                    break
        return {"height": s.lengths["height_to_blockhash"] - 1, "computed_heights": done,
                "restarted_from": restart if restart != have else None}

    # -- one chunk ------------------------------------------------------------------------------------
    def _chunk(self, a: int, b: int, meta: dict[str, Any]) -> bool:  # noqa: C901 - one vectorised pass
        import numpy as np

        chain = self.chain
        nb = b - a
        day = chain.dateindex
        closes = np.array([self.today(int(d)) for d in day[a:b]])
        # Outputs received by an address.
        o0, o1 = int(chain.first_out[a]), int(chain.first_out[b])
        out_addr = self.addr.read("outputindex_to_addressindex", o0, o1).astype(np.int64)
        o_val = chain.raw.read("outputindex_to_value", o0, o1).astype(np.int64)
        o_blk = np.repeat(np.arange(nb), np.diff(chain.first_out[a:b + 1]))
        o_real = np.rint(o_val.astype(np.float64) * (MILLI / SATS) * self.basis(day[a + o_blk])).astype(np.int64)
        keep = out_addr != NONE
        # Outputs spent from an address: their address, value, creation height.
        i0, i1 = int(chain.first_in[a]), int(chain.first_in[b])
        spent = chain.raw.read("inputindex_to_outputindex", i0, i1)
        i_blk = np.repeat(np.arange(nb), np.diff(chain.first_in[a:b + 1]))
        real = spent != np.uint64(NO_OUTPUT)
        so = spent[real].astype(np.int64)
        s_blk = i_blk[real]
        s_addr = np.full(so.shape[0], NONE, np.int64)
        inner = so >= o0
        s_addr[inner] = out_addr[so[inner] - o0]
        if (~inner).any():
            s_addr[~inner] = gather(self.addr.root / "vecs" / "outputindex_to_addressindex.bin", "<u4",
                                    self.addr.length("outputindex_to_addressindex"), so[~inner]).astype(np.int64)
        has = s_addr != NONE
        so, s_blk, s_addr = so[has], s_blk[has], s_addr[has]
        s_val = gather(self.out / "vecs" / "outputindex_to_value.bin", "<u8", chain.n_out, so).astype(np.int64)
        s_basis = self.basis(day[np.searchsorted(chain.first_out, so, "right") - 1])
        s_real = np.rint(s_val.astype(np.float64) * (MILLI / SATS) * s_basis).astype(np.int64)
        r_addr, r_blk, r_val, r_real = out_addr[keep], o_blk[keep], o_val[keep], o_real[keep]
        # (address, block) rows: received and sent per field; sorted by address then block.
        keys = np.concatenate((r_addr * nb + r_blk, s_addr * nb + s_blk))
        ukey, inv = np.unique(keys, return_inverse=True)
        nr = r_addr.shape[0]
        nu = ukey.shape[0]

        def sums(sel: slice, w: np.ndarray | None) -> np.ndarray:
            out: np.ndarray = np.rint(np.bincount(inv[sel], weights=None if w is None else w.astype(np.float64),
                                                  minlength=nu)).astype(np.int64)
            return out

        recv = np.stack((sums(slice(0, nr), r_val), sums(slice(0, nr), r_real), sums(slice(0, nr), None)), axis=1)
        sent = np.stack((sums(slice(nr, None), s_val), sums(slice(nr, None), s_real), sums(slice(nr, None), None)),
                        axis=1)
        delta = recv - sent
        u_addr, u_blk = ukey // nb, ukey % nb
        first_of = np.ones(nu, dtype=bool)
        first_of[1:] = u_addr[1:] != u_addr[:-1]
        starts = np.flatnonzero(first_of)
        start_state = self._get(u_addr[starts])
        cs = np.cumsum(delta, axis=0)
        seg = np.cumsum(first_of) - 1
        after = (start_state - (cs[starts] - delta[starts]))[seg] + cs
        before = after - delta
        if (after < 0).any():
            raise RuntimeError(f"heights {a}..{b - 1}: an address's state went negative (vecs inconsistent)")
        typ_s = self._types(u_addr[starts])
        typ_u = typ_s[seg]
        # Undo rows first (durable), then the per-address files: (id, balance, realized, unspent count, type).
        undo = np.concatenate((u_addr[starts][:, None], start_state, typ_s[:, None]), axis=1).astype(np.int64)
        with atomic_file(self.undo_dir / f"{a}-{b}.npy", durable=self.durable) as fh:
            np.save(fh, undo)
        last = np.append(starts[1:] - 1, nu - 1)
        self._put(u_addr[last], after[last])
        _fault("addrcohorts-undo")  # the crash tests kill here: the files ahead of the manifest

        # -- histogram items: each row moves its address from its state before to its state after ------------
        # (a row's state before is the one after the address's previous row, else its state at the chunk start)
        k_a = _basis_bucket(after[:, 0], after[:, 1])
        k_b = np.empty_like(k_a)
        k_b[1:] = k_a[:-1]
        k_b[starts] = _basis_bucket(start_state[:, 0], start_state[:, 1])
        ib, ia = np.flatnonzero(before[:, 2] > 0), np.flatnonzero(after[:, 2] > 0)  # funded before / after
        ty = NBAND + typ_u
        it_blk = np.concatenate((u_blk[ib], u_blk[ib], u_blk[ia], u_blk[ia]))
        it_coh = np.concatenate((band_of(before[ib, 0]), ty[ib], band_of(after[ia, 0]), ty[ia]))
        it_bkt = np.concatenate((k_b[ib], k_b[ib], k_a[ia], k_a[ia]))
        fb, fa = before[ib].astype(np.float64), after[ia].astype(np.float64)
        fb[:, 2], fa[:, 2] = -1.0, 1.0
        fb[:, :2] *= -1.0
        it_f = np.concatenate((fb, fb, fa, fa))
        # per block, per cohort: supply, count, realized and the profit (p) / loss (l) parts
        st = np.zeros((nb, NC, 7))
        bdays = day[a:b]
        runs = np.flatnonzero(np.concatenate(([True], bdays[1:] != bdays[:-1])))
        bounds = np.append(runs, nb)
        run_of = (np.cumsum(np.concatenate(([True], bdays[1:] != bdays[:-1]))) - 1)[it_blk]  # a day's blocks: a run
        hist = self.hist
        for r, (g0, g1) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist())):
            sel = slice(None) if len(runs) == 1 else np.flatnonzero(run_of == r)
            r_blk, r_coh, r_bkt, r_f = it_blk[sel], it_coh[sel], it_bkt[sel], it_f[sel]
            c = closes[g0]
            kc = int(bucket_of(np.array([c]))[0]) if c == c else NB  # no close: every bucket "below"
            # the run's starting state per class (0 below the close's bucket, 1 in it, 2 above)
            base = np.zeros((NC, 3, 3))
            base[:, 0] = hist[:, :kc].sum(axis=1)
            if kc < NB:
                base[:, 1] = hist[:, kc]
                base[:, 2] = hist[:, kc + 1:].sum(axis=1)
            cls = (r_bkt >= kc).astype(np.int64) + (r_bkt > kc)
            key = ((r_blk - g0) * NC + r_coh) * 3 + cls
            n = (g1 - g0) * NC * 3
            d = np.stack([np.bincount(key, weights=r_f[:, k], minlength=n) for k in range(3)], axis=-1)
            run = np.cumsum(d.reshape(g1 - g0, NC, 3, 3), axis=0) + base[None]  # (blocks, cohort, class, field)
            tot = run.sum(axis=2)
            st[g0:g1, :, 0], st[g0:g1, :, 1], st[g0:g1, :, 2] = tot[..., 0], tot[..., 2], tot[..., 1]
            if c == c:
                at_sup, at_real = run[:, :, 1, 0], run[:, :, 1, 1]
                at_profit = at_real * (SATS / MILLI) < at_sup * c
                at_loss = at_real * (SATS / MILLI) > at_sup * c
                st[g0:g1, :, 3] = run[:, :, 0, 0] + np.where(at_profit, at_sup, 0)
                st[g0:g1, :, 4] = run[:, :, 0, 1] + np.where(at_profit, at_real, 0)
                st[g0:g1, :, 5] = run[:, :, 2, 0] + np.where(at_loss, at_sup, 0)
                st[g0:g1, :, 6] = run[:, :, 2, 1] + np.where(at_loss, at_real, 0)
            cell = r_coh * NB + r_bkt
            for k in range(3):  # sums of integers below 2**53: exact in floats
                hist[:, :, k] += np.rint(np.bincount(cell, weights=r_f[:, k], minlength=NC * NB)).astype(
                    np.int64).reshape(NC, NB)

        # -- flows: each spent output, in the cohort of its address after the block's receipts ------------
        s_row = inv[nr:]
        held = before[s_row, 0] + recv[s_row, 0]
        s_band = band_of(held)
        s_type = NBAND + typ_u[s_row]
        sc = np.nan_to_num(closes[s_blk], nan=0.0)
        btc = s_val.astype(np.float64) / SATS
        made, paid = btc * sc, btc * s_basis
        flow_f = (np.maximum(made - paid, 0.0), np.maximum(paid - made, 0.0), made, paid)
        fl = np.zeros((nb, NC, 4))
        for coh in (s_band, s_type):
            key = s_blk * NC + coh
            for k, w in enumerate(flow_f):
                fl[:, :, k] += np.bincount(key, weights=w, minlength=nb * NC).reshape(nb, NC)

        # -- the rows -------------------------------------------------------------------------------
        priced = ~np.isnan(closes)[:, None]
        cl = np.nan_to_num(closes)[:, None]
        nan = np.full((nb, NC), np.nan)
        cols = {
            "supply": st[:, :, 0], "addr_count": st[:, :, 1],
            "realized_cap": np.where(priced, st[:, :, 2] / MILLI, nan),
            "supply_in_profit": np.where(priced, st[:, :, 3], nan),
            "supply_in_loss": np.where(priced, st[:, :, 5], nan),
            "unrealized_profit": np.where(priced, st[:, :, 3] / SATS * cl - st[:, :, 4] / MILLI, nan),
            "unrealized_loss": np.where(priced, st[:, :, 6] / MILLI - st[:, :, 5] / SATS * cl, nan),
        }
        for k, name in enumerate(FLOWS):
            cols[name] = np.where(priced, fl[:, :, k], nan)
        s = self.store
        s.append("height_to_blockhash", chain.hashes(a, b))
        for name in METRICS:
            s.append(f"height_to_{name}", np.ascontiguousarray(cols[name], dtype="<f8"))
        self._save_hist(b)
        self.addr.refresh()
        if int(self.addr.meta.get("generation", 0)) != self.addr_generation:
            s.discard_pending()  # what this chunk read may be the address pass's rolled-back rows
            return False
        meta["height"] = b - 1
        s.commit(meta)
        _fault("addrcohorts-commit")
        self._hist_path(a).unlink(missing_ok=True)
        for lo_h, hi_h, path in self._undo_files():
            if hi_h < b - UNDO_HEIGHTS:
                path.unlink()
        return True


# -- definitions (id search, /llms.txt): one line per metric, with its formula --------------------------------
ADDR_METRIC_LINES = {
    **{m: METRIC_LINES[m] for m in ("supply", "realized_profit", "realized_loss", "net_realized_pnl", "value_created",
                                    "value_destroyed", "sopr", "mvrv", "nupl", "supply_rel_to_circulating_supply")},
    "addr_count": "number of {c}: funded addresses (holding at least one unspent output)",
    "realized_cap": "realized cap of {c}: sum over the outputs they hold of value x the close of each output's "
                    "creation day, in US dollars",
    "realized_price": "realized price of {c}: realized_cap / supply_btc, their average cost basis in US dollars "
                      "per BTC",
    "unrealized_profit": "unrealized profit of {c}: sum of balance x close - realized value over the addresses whose "
                         "cost basis (realized value / balance) is below the close, in US dollars (bucketed: 1.2 %)",
    "unrealized_loss": "unrealized loss of {c}: sum of realized value - balance x close over the addresses whose cost "
                       "basis is above the close, in US dollars (bucketed: 1.2 %)",
    "supply_in_profit": "supply in profit of {c}: balance of the addresses whose cost basis (realized value / "
                        "balance) is below the close, in sats (bucketed: 1.2 %)",
    "supply_in_loss": "supply in loss of {c}: balance of the addresses whose cost basis is above the close, in sats "
                      "(bucketed: 1.2 %)",
}


def _cohort_texts() -> dict[str, str]:
    words = [_amount_words(x) for x in AMOUNT_LABELS]
    texts = {"addrs_0sats": "addresses with a balance of 0 sats (only 0-sat outputs)",
             "addrs_over_100k_btc": "addresses with a balance of 100k BTC or more"}
    for i in range(13):
        texts[BAND_COHORTS[i + 1]] = f"addresses with a balance of {words[i]} to under {words[i + 1]}"
    for i, label in enumerate(AMOUNT_LABELS):
        texts[f"addrs_over_{label}"] = f"addresses with a balance of {words[i]} or more"
        texts[f"addrs_under_{label}"] = f"funded addresses with a balance under {words[i]}"
    for t, name in zip(TYPE_NAMES, TYPE_COHORTS):
        texts[name] = f"funded {t} addresses"
    return {c: texts[c] for c in COHORTS}


def definition(name: str) -> str | None:
    """The line of an address cohort id without its unit (``p2pkh_addrs_supply``), else None."""
    for metric, line in ADDR_METRIC_LINES.items():
        if name.endswith("_" + metric):
            cohort = name[:-len(metric) - 1]
            if cohort in COHORTS:
                return line.format(c=_cohort_texts()[cohort])
    return None


def all_ids() -> set[str]:
    """Every address cohort id the catalogue can serve (folded into a pattern by ``/llms.txt``)."""
    return ids_of(COHORTS, (*METRICS, *DERIVED, *ALIASES), SATS_METRICS)


def patterns() -> list[tuple[str, str]]:
    """``<addr_cohort>_<metric>`` lines for ``/llms.txt``: one per metric."""
    return pattern_lines("<addr_cohort>", (*METRICS, *ALIASES, *DERIVED), SATS_METRICS, ADDR_METRIC_LINES,
                         "the cohort's addresses")
