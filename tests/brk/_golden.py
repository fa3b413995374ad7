"""Checksums of every computed vec, to prove a change to the computed passes keeps their bytes.

``checksums(out)`` hashes the committed bytes of every vec of ``OUT/computed``, ``OUT/utxo``,
``OUT/realized`` and ``OUT/addresses``. ``build(kind, root)`` writes a deterministic chain (the bundled
mainnet 0..589, or a dense generated chain), daily prices with gaps and changes, indexes it and runs
every computed pass. The expected checksums in ``golden/`` were written by the code before the
computed passes were reworked for scale (``python tests/brk/_golden.py KIND``), so the tests compare
new code against old output, not against itself.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).parent / "golden"
STORES = ("computed", "utxo", "realized", "addresses")
# kind -> (blocks, txs per block, seed); "mainnet" is the bundled 0..589.
CHAINS: dict[str, tuple[int, int, int]] = {"dense": (260, 300, 11), "dense500k": (1351, 400, 7)}


def checksums(out: Path) -> dict[str, Any]:
    """``{store/vec: [length, sha256 of its committed bytes]}`` for every computed store of ``out``."""
    import numpy as np

    result: dict[str, Any] = {}
    for store in STORES:
        manifest = out / store / "manifest.json"
        if not manifest.exists():
            continue
        vecs = json.loads(manifest.read_text())["vecs"]
        for name, entry in sorted(vecs.items()):
            row = np.dtype(entry["dtype"]).itemsize * int(entry.get("width", 1))
            length = int(entry["length"])
            with open(out / store / "vecs" / f"{name}.bin", "rb") as fh:
                h = hashlib.sha256()
                left = length * row
                while left:
                    chunk = fh.read(min(left, 1 << 22))
                    if not chunk:
                        raise AssertionError(f"{store}/{name} is shorter than its manifest")
                    h.update(chunk)
                    left -= len(chunk)
            result[f"{store}/{name}"] = [length, h.hexdigest()]
    return result


def write_chain(kind: str, blocks: Path) -> None:
    from cairn_servers.brk.sample import write_mainnet_sample, write_sample

    if kind == "mainnet":
        write_mainnet_sample(blocks)
    else:
        n, k, seed = CHAINS[kind]
        write_sample(blocks, n, seed=seed, txs_per_block=k)


def write_prices(kind: str, out: Path) -> None:
    """Closes that change every day, with a gap of a few days (mainnet: 2009; dense: 2024)."""
    from cairn_servers.brk import prices

    first, last = (0, 60) if kind == "mainnet" else (5460, 5720)
    rows = [(d, 0.0, 0.0, 0.0, (0.01 if kind == "mainnet" else 40_000.0) * (1 + (d * 37 % 101) / 50))
            for d in range(first, last) if d % 17 not in (3, 4)]
    prices.save(out, rows)


def build(kind: str, root: Path) -> Path:
    """Chain, prices, raw index and every computed pass for ``kind``; returns the output directory."""
    from cairn_servers.brk.compute import compute
    from cairn_servers.brk.indexer import index

    blocks, out = root / "blocks", root / "out"
    write_chain(kind, blocks)
    index(blocks, out, durable=False)
    write_prices(kind, out)
    compute(out, durable=False, blocks_dir=blocks)
    return out


def expected(kind: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((GOLDEN / f"{kind}.json").read_text())
    return result


if __name__ == "__main__":  # write the expected checksums with the code checked out
    import tempfile

    for kind in sys.argv[1:]:
        with tempfile.TemporaryDirectory() as tmp:
            sums = checksums(build(kind, Path(tmp)))
        (GOLDEN / f"{kind}.json").write_text(json.dumps(sums, indent=1, sort_keys=True) + "\n")
        print(kind, len(sums), "vecs")
