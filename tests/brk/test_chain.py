"""Best-chain selection by cumulative work, from headers alone."""

from __future__ import annotations

from cairn_servers.brk.blocks.chain import HeaderInfo, best_chain, pow_ok
from cairn_servers.brk.blocks.parser import NULL_HASH


def _h(name: str) -> bytes:
    return name.encode().ljust(32, b"\0")


def _headers(edges: list[tuple[str, str | None, int]]) -> dict[bytes, HeaderInfo]:
    out = {}
    for seq, (name, prev, bits) in enumerate(edges):
        out[_h(name)] = HeaderInfo(_h(name), _h(prev) if prev else NULL_HASH, bits, seq)
    return out


EASY, HARD = 0x207FFFFF, 0x1D00FFFF


def test_longest_chain_wins_and_order_does_not_matter() -> None:
    edges = [("c", "b", EASY), ("g", None, EASY), ("b", "a", EASY), ("a", "g", EASY), ("x", "a", EASY)]
    assert best_chain(_headers(edges)) == [_h(n) for n in "gabc"]


def test_most_work_beats_most_blocks() -> None:
    edges = [("g", None, EASY), ("a", "g", EASY), ("b", "a", EASY), ("c", "b", EASY), ("h", "g", HARD)]
    assert best_chain(_headers(edges)) == [_h("g"), _h("h")]


def test_ties_keep_first_seen_or_preferred() -> None:
    edges = [("g", None, EASY), ("a", "g", EASY), ("b", "g", EASY)]
    assert best_chain(_headers(edges))[-1] == _h("a")
    assert best_chain(_headers(edges), prefer={_h("g"), _h("b")})[-1] == _h("b")


def test_excluded_blocks_and_descendants_are_skipped() -> None:
    edges = [("g", None, EASY), ("a", "g", EASY), ("b", "a", EASY), ("c", "g", EASY)]
    assert best_chain(_headers(edges), exclude={_h("a")}) == [_h("g"), _h("c")]


def test_orphans_without_genesis_are_ignored() -> None:
    edges = [("x", "missing", HARD), ("g", None, EASY)]
    assert best_chain(_headers(edges)) == [_h("g")]
    assert best_chain({}) == []


def test_long_chain_no_recursion_limit() -> None:
    edges: list[tuple[str, str | None, int]] = [("0", None, EASY)]
    edges += [(str(i), str(i - 1), EASY) for i in range(1, 5000)]
    assert len(best_chain(_headers(edges))) == 5000


def test_pow_check() -> None:
    assert pow_ok(bytes(31) + b"\x7f", EASY)
    assert not pow_ok(b"\xff" * 32, HARD)
