"""Names shared by the computer (``cairn_servers.brk.compute``) and the analytics passes it runs afterwards
(``cairn_servers.brk.utxo``, ``cairn_servers.brk.addresses``): where computed vecs live and the output type names.
A leaf module (standard library only), so the passes need not import ``compute``, which imports them:
no import cycle."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the stdio servers' start-up path
if TYPE_CHECKING:
    from pathlib import Path

OUTPUT_TYPES = ("p2pk65", "p2pk33", "p2pkh", "p2ms", "p2sh", "opreturn", "p2wpkh", "p2wsh", "p2tr", "p2a",
                "empty", "unknown")  # the parser's type codes 0..11


def computed_dir(out: Path) -> Path:
    """``OUT/computed``: the computed vecs of an output directory."""
    return out / "computed"
