"""Bitcoin addresses as text → their output scripts: base58check (P2PKH, P2SH) and bech32/bech32m (segwit).

Only the standard library: ``brk sample --pay`` reads addresses with it, and the CLI loads nothing heavy.
"""

from __future__ import annotations

import hashlib

from cairn_servers.core.errors import InvalidInput

# Per network: (bech32 human-readable part, base58 P2PKH version byte, base58 P2SH version byte).
NETWORKS: dict[str, tuple[str, int, int]] = {
    "mainnet": ("bc", 0x00, 0x05),
    "testnet": ("tb", 0x6F, 0xC4),
    "signet": ("tb", 0x6F, 0xC4),
    "regtest": ("bcrt", 0x6F, 0xC4),
}
_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_B32 = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
_BECH32, _BECH32M = 1, 0x2BC830A3


def _polymod(values: list[int]) -> int:
    gen = (0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)
    chk = 1
    for v in values:
        top = chk >> 25
        chk = (chk & 0x1FFFFFF) << 5 ^ v
        for i in range(5):
            chk ^= gen[i] if (top >> i) & 1 else 0
    return chk


def _bech32_decode(text: str) -> tuple[str, list[int], int] | None:
    """(hrp, 5-bit data without the checksum, checksum constant) or None when not valid bech32(m)."""
    if text.lower() != text and text.upper() != text:
        return None
    text = text.lower()
    pos = text.rfind("1")
    if pos < 1 or pos + 7 > len(text) or len(text) > 90 or any(c not in _B32 for c in text[pos + 1:]):
        return None
    hrp = text[:pos]
    data = [_B32.find(c) for c in text[pos + 1:]]
    const = _polymod([ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp] + data)
    if const not in (_BECH32, _BECH32M):
        return None
    return hrp, data[:-6], const


def _from_5bit(data: list[int]) -> bytes | None:
    acc = bits = 0
    out = bytearray()
    for v in data:
        acc = (acc << 5) | v
        bits += 5
        if bits >= 8:
            bits -= 8
            out.append((acc >> bits) & 0xFF)
    if bits >= 5 or (acc << (8 - bits)) & 0xFF:
        return None  # more than 4 bits of padding, or padding that is not zero
    return bytes(out)


def _base58check(text: str) -> bytes | None:
    n = 0
    for c in text:
        i = _B58.find(c)
        if i < 0:
            return None
        n = n * 58 + i
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    raw = b"\x00" * (len(text) - len(text.lstrip("1"))) + raw
    if len(raw) < 5 or hashlib.sha256(hashlib.sha256(raw[:-4]).digest()).digest()[:4] != raw[-4:]:
        return None
    return raw[:-4]


def address_script(address: str, network: str = "regtest") -> bytes:
    """The output script an address of ``network`` pays to; InvalidInput names the fault otherwise."""
    hrp, p2pkh, p2sh = NETWORKS[network]
    decoded = _bech32_decode(address)
    if decoded is not None:
        got_hrp, data, const = decoded
        if got_hrp != hrp:
            raise InvalidInput(f"{address!r} is not a {network} address: its prefix is {got_hrp}1, "
                               f"a {network} one is {hrp}1.")
        if not data or data[0] > 16:
            raise InvalidInput(f"{address!r} has no valid witness version.")
        version, program = data[0], _from_5bit(data[1:])
        if (program is None or not 2 <= len(program) <= 40 or (version == 0 and len(program) not in (20, 32))
                or const != (_BECH32 if version == 0 else _BECH32M)):
            raise InvalidInput(f"{address!r} is not a valid segwit address (BIP 173/350).")
        return bytes([0x50 + version if version else 0, len(program)]) + program
    payload = _base58check(address)
    if payload is None or len(payload) != 21:
        raise InvalidInput(f"{address!r} is not a valid Bitcoin address (bad checksum or characters).")
    if payload[0] == p2pkh:
        return b"\x76\xa9\x14" + payload[1:] + b"\x88\xac"
    if payload[0] == p2sh:
        return b"\xa9\x14" + payload[1:] + b"\x87"
    raise InvalidInput(f"{address!r} is not a {network} address (version byte {payload[0]}).")
