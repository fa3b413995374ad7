"""Best-chain selection from block headers alone, by cumulative proof of work.

Block files hold stale forks and blocks out of order (a child may be stored before its parent), so
the chain is a tree: every header whose ancestry reaches a genesis (previous hash all zeros) gets a
cumulative work, and the best tip is the one with the most. Ties keep the block seen first, or the
one already indexed, exactly as a node keeps its current tip until a chain with more work shows up.
"""

from __future__ import annotations

from dataclasses import dataclass

from cairn_servers.brk.blocks.parser import NULL_HASH, block_work, bits_to_target


@dataclass(slots=True)
class HeaderInfo:
    """What chain selection needs to know about one block; ``seq`` is its order of discovery."""

    hash: bytes
    prev: bytes
    bits: int
    seq: int


def pow_ok(block_hash: bytes, bits: int) -> bool:
    """True when the header hash meets its own target (the header is not forged garbage)."""
    target = bits_to_target(bits)
    return target > 0 and int.from_bytes(block_hash, "little") <= target


def best_chain(
    headers: dict[bytes, HeaderInfo],
    *,
    exclude: set[bytes] | frozenset[bytes] = frozenset(),
    prefer: set[bytes] | frozenset[bytes] = frozenset(),
) -> list[bytes]:
    """The hashes of the most-work chain from genesis to tip (index = height).

    ``exclude`` holds blocks known to be invalid: they and their descendants are never chosen.
    ``prefer`` holds the currently indexed chain: on equal work its tip wins, so ties never reorg.
    """
    work: dict[bytes, int] = {}
    children: dict[bytes, list[bytes]] = {}
    roots: list[bytes] = []
    for h, info in headers.items():
        if h in exclude:
            continue
        if info.prev == NULL_HASH:
            roots.append(h)
        else:
            children.setdefault(info.prev, []).append(h)
    best: tuple[int, int, int] | None = None  # (work, preferred, -seq)
    best_hash = b""
    # Iterative walk from each genesis, so a chain of any length never hits the recursion limit.
    for root in sorted(roots, key=lambda r: headers[r].seq):
        work[root] = block_work(headers[root].bits)
        stack = [root]
        while stack:
            h = stack.pop()
            w = work[h]
            key = (w, 1 if h in prefer else 0, -headers[h].seq)
            if best is None or key > best:
                best, best_hash = key, h
            for child in children.get(h, ()):
                if child in exclude:
                    continue
                work[child] = w + block_work(headers[child].bits)
                stack.append(child)
    if best is None:
        return []
    chain = [best_hash]
    while True:
        prev = headers[chain[-1]].prev
        if prev == NULL_HASH:
            break
        chain.append(prev)
    chain.reverse()
    return chain
