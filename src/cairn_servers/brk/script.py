"""Output scripts as a block explorer shows them: their type, their address (Base58Check, bech32, bech32m),
their assembly in Esplora's notation (``OP_PUSHBYTES_65 04678a... OP_CHECKSIG``), and the other way, an
address string to the address index's key (type code + payload, ``cairn_servers.brk.addresses``).
Standard library only."""

from __future__ import annotations

from hashlib import sha256

from cairn_servers.core.errors import InvalidInput

B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
BECH32 = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
HRP = {"mainnet": "bc", "testnet": "tb", "testnet4": "tb", "signet": "tb", "regtest": "bcrt"}
P2PKH_VERSION = {"mainnet": 0}  # others: 111
P2SH_VERSION = {"mainnet": 5}  # others: 196
ANCHOR = bytes.fromhex("51024e73")

_NAMES = {0x00: "OP_0", 0x4C: "OP_PUSHDATA1", 0x4D: "OP_PUSHDATA2", 0x4E: "OP_PUSHDATA4", 0x4F: "OP_PUSHNUM_NEG1",
          0x50: "OP_RESERVED", 0x61: "OP_NOP", 0x62: "OP_VER", 0x63: "OP_IF", 0x64: "OP_NOTIF", 0x65: "OP_VERIF",
          0x66: "OP_VERNOTIF", 0x67: "OP_ELSE", 0x68: "OP_ENDIF", 0x69: "OP_VERIFY", 0x6A: "OP_RETURN",
          0x6B: "OP_TOALTSTACK", 0x6C: "OP_FROMALTSTACK", 0x6D: "OP_2DROP", 0x6E: "OP_2DUP", 0x6F: "OP_3DUP",
          0x70: "OP_2OVER", 0x71: "OP_2ROT", 0x72: "OP_2SWAP", 0x73: "OP_IFDUP", 0x74: "OP_DEPTH", 0x75: "OP_DROP",
          0x76: "OP_DUP", 0x77: "OP_NIP", 0x78: "OP_OVER", 0x79: "OP_PICK", 0x7A: "OP_ROLL", 0x7B: "OP_ROT",
          0x7C: "OP_SWAP", 0x7D: "OP_TUCK", 0x7E: "OP_CAT", 0x7F: "OP_SUBSTR", 0x80: "OP_LEFT", 0x81: "OP_RIGHT",
          0x82: "OP_SIZE", 0x83: "OP_INVERT", 0x84: "OP_AND", 0x85: "OP_OR", 0x86: "OP_XOR", 0x87: "OP_EQUAL",
          0x88: "OP_EQUALVERIFY", 0x89: "OP_RESERVED1", 0x8A: "OP_RESERVED2", 0x8B: "OP_1ADD", 0x8C: "OP_1SUB",
          0x8D: "OP_2MUL", 0x8E: "OP_2DIV", 0x8F: "OP_NEGATE", 0x90: "OP_ABS", 0x91: "OP_NOT", 0x92: "OP_0NOTEQUAL",
          0x93: "OP_ADD", 0x94: "OP_SUB", 0x95: "OP_MUL", 0x96: "OP_DIV", 0x97: "OP_MOD", 0x98: "OP_LSHIFT",
          0x99: "OP_RSHIFT", 0x9A: "OP_BOOLAND", 0x9B: "OP_BOOLOR", 0x9C: "OP_NUMEQUAL", 0x9D: "OP_NUMEQUALVERIFY",
          0x9E: "OP_NUMNOTEQUAL", 0x9F: "OP_LESSTHAN", 0xA0: "OP_GREATERTHAN", 0xA1: "OP_LESSTHANOREQUAL",
          0xA2: "OP_GREATERTHANOREQUAL", 0xA3: "OP_MIN", 0xA4: "OP_MAX", 0xA5: "OP_WITHIN", 0xA6: "OP_RIPEMD160",
          0xA7: "OP_SHA1", 0xA8: "OP_SHA256", 0xA9: "OP_HASH160", 0xAA: "OP_HASH256", 0xAB: "OP_CODESEPARATOR",
          0xAC: "OP_CHECKSIG", 0xAD: "OP_CHECKSIGVERIFY", 0xAE: "OP_CHECKMULTISIG", 0xAF: "OP_CHECKMULTISIGVERIFY",
          0xB0: "OP_NOP1", 0xB1: "OP_CLTV", 0xB2: "OP_CSV", 0xB3: "OP_NOP4", 0xB4: "OP_NOP5", 0xB5: "OP_NOP6",
          0xB6: "OP_NOP7", 0xB7: "OP_NOP8", 0xB8: "OP_NOP9", 0xB9: "OP_NOP10", 0xBA: "OP_CHECKSIGADD"}


def _op_name(op: int) -> str:
    if 0x51 <= op <= 0x60:
        return f"OP_PUSHNUM_{op - 0x50}"
    if op in _NAMES:
        return _NAMES[op]
    return "OP_INVALIDOPCODE" if op == 0xFF else f"OP_RETURN_{op}"


def asm(script: bytes) -> str:
    """The script's assembly as Esplora writes it (rust-bitcoin's notation)."""
    parts: list[str] = []
    p, n = 0, len(script)
    while p < n:
        op = script[p]
        p += 1
        if 0x01 <= op <= 0x4B or op in (0x4C, 0x4D, 0x4E):
            if op <= 0x4B:
                size, name = op, f"OP_PUSHBYTES_{op}"
            else:
                width = {0x4C: 1, 0x4D: 2, 0x4E: 4}[op]
                if p + width > n:
                    parts.append("<unexpected end>")
                    break
                size, name = int.from_bytes(script[p:p + width], "little"), _op_name(op)
                p += width
            if p + size > n:
                parts.append("<push past end>")
                break
            parts.append(f"{name} {script[p:p + size].hex()}")
            p += size
        else:
            parts.append(_op_name(op))
    return " ".join(parts)


def _witness(script: bytes) -> tuple[int, bytes] | None:
    """(version, program) of a witness output script."""
    if len(script) < 4 or len(script) > 42 or script[1] != len(script) - 2:
        return None
    if script[0] == 0:
        return 0, script[2:]
    if 0x51 <= script[0] <= 0x60:
        return script[0] - 0x50, script[2:]
    return None


def script_type(script: bytes) -> str:
    """Esplora's ``scriptpubkey_type``."""
    n = len(script)
    if n == 0:
        return "empty"
    if (n == 67 and script[0] == 0x41 or n == 35 and script[0] == 0x21) and script[-1] == 0xAC:
        return "p2pk"
    if n == 25 and script[:3] == b"\x76\xa9\x14" and script[23:] == b"\x88\xac":
        return "p2pkh"
    if n == 23 and script[:2] == b"\xa9\x14" and script[22] == 0x87:
        return "p2sh"
    if script[0] == 0x6A:
        return "op_return"
    w = _witness(script)
    if w is not None:
        version, program = w
        if version == 0 and len(program) == 20:
            return "v0_p2wpkh"
        if version == 0 and len(program) == 32:
            return "v0_p2wsh"
        if version == 1 and len(program) == 32:
            return "v1_p2tr"
        if script == ANCHOR:
            return "anchor"
        return "unknown"
    if script[-1] == 0xAE and 0x51 <= script[0] <= 0x60:
        return "multisig"
    return "unknown"


# -- encodings -------------------------------------------------------------------------------------

def b58check_encode(payload: bytes) -> str:
    data = payload + sha256(sha256(payload).digest()).digest()[:4]
    num = int.from_bytes(data, "big")
    text = ""
    while num:
        num, rem = divmod(num, 58)
        text = B58[rem] + text
    return "1" * (len(data) - len(data.lstrip(b"\0"))) + text


def b58check_decode(text: str) -> bytes | None:
    num = 0
    for ch in text:
        k = B58.find(ch)
        if k < 0:
            return None
        num = num * 58 + k
    raw = num.to_bytes((num.bit_length() + 7) // 8, "big")
    raw = b"\0" * (len(text) - len(text.lstrip("1"))) + raw
    if len(raw) < 5 or sha256(sha256(raw[:-4]).digest()).digest()[:4] != raw[-4:]:
        return None
    return raw[:-4]


def _polymod(values: list[int]) -> int:
    gen = (0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)
    chk = 1
    for v in values:
        top = chk >> 25
        chk = (chk & 0x1FFFFFF) << 5 ^ v
        for i in range(5):
            chk ^= gen[i] if (top >> i) & 1 else 0
    return chk


def _expand(hrp: str) -> list[int]:
    return [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp]


def _convert(data: list[int] | bytes, frm: int, to: int, pad: bool) -> list[int] | None:
    acc = bits = 0
    out: list[int] = []
    maxv = (1 << to) - 1
    for v in data:
        acc = (acc << frm) | v
        bits += frm
        while bits >= to:
            bits -= to
            out.append((acc >> bits) & maxv)
    if pad and bits:
        out.append((acc << (to - bits)) & maxv)
    elif not pad and (bits >= frm or (acc << (to - bits)) & maxv):
        return None
    return out


def segwit_encode(hrp: str, version: int, program: bytes) -> str:
    const = 1 if version == 0 else 0x2BC830A3
    data = [version] + (_convert(program, 8, 5, True) or [])
    poly = _polymod(_expand(hrp) + data + [0] * 6) ^ const
    checksum = [(poly >> 5 * (5 - i)) & 31 for i in range(6)]
    return hrp + "1" + "".join(BECH32[d] for d in data + checksum)


def segwit_decode(hrp: str, text: str) -> tuple[int, bytes] | None:
    if text.lower() != text and text.upper() != text:
        return None
    text = text.lower()
    pos = text.rfind("1")
    if pos < 1 or text[:pos] != hrp or len(text) - pos < 7 or len(text) > 90:
        return None
    data = [BECH32.find(c) for c in text[pos + 1:]]
    if min(data) < 0:
        return None
    const = _polymod(_expand(hrp) + data)
    program = _convert(data[1:-6], 5, 8, False)
    if program is None or not data or data[0] > 16 or not 2 <= len(program) <= 40:
        return None
    version = data[0]
    if const != (1 if version == 0 else 0x2BC830A3) or version == 0 and len(program) not in (20, 32):
        return None
    return version, bytes(program)


def script_address(script: bytes, network: str) -> str | None:
    """The address of an output script (None for P2PK, bare multisig, OP_RETURN and other scripts)."""
    kind = script_type(script)
    if kind == "p2pkh":
        return b58check_encode(bytes([P2PKH_VERSION.get(network, 111)]) + script[3:23])
    if kind == "p2sh":
        return b58check_encode(bytes([P2SH_VERSION.get(network, 196)]) + script[2:22])
    w = _witness(script)
    if w is not None:
        return segwit_encode(HRP.get(network, "bc"), *w)
    return None


def address_script(address: str, network: str) -> bytes:
    """The output script an address pays (a public key in hex pays P2PK). ``InvalidInput`` otherwise."""
    text = address.strip()
    if len(text) in (66, 130) and all(c in "0123456789abcdefABCDEF" for c in text):
        key = bytes.fromhex(text)
        if (len(key) == 33 and key[0] in (2, 3)) or (len(key) == 65 and key[0] == 4):
            return bytes([len(key)]) + key + b"\xac"
    hrp = HRP.get(network, "bc")
    if text.lower().startswith(hrp + "1"):
        w = segwit_decode(hrp, text)
        if w is not None:
            version, program = w
            return bytes([0 if version == 0 else 0x50 + version, len(program)]) + program
    elif 25 <= len(text) <= 35:
        raw = b58check_decode(text)
        if raw is not None and len(raw) == 21:
            if raw[0] == P2PKH_VERSION.get(network, 111):
                return b"\x76\xa9\x14" + raw[1:] + b"\x88\xac"
            if raw[0] == P2SH_VERSION.get(network, 196):
                return b"\xa9\x14" + raw[1:] + b"\x87"
    raise InvalidInput(f"Invalid Bitcoin address {address[:100]!r} for {network}: give a Base58 (P2PKH, P2SH) or "
                       f"bech32 ({hrp}1...) address, or a public key in hex.")


def address_key(script: bytes) -> bytes | None:
    """The address index's key of an output script (type code + payload), None when it is no address."""
    kind = script_type(script)
    if kind == "p2pk":
        return (b"\x00" if len(script) == 67 else b"\x01") + script[1:-1]
    if kind == "p2pkh":
        return b"\x02" + script[3:23]
    if kind == "p2sh":
        return b"\x04" + script[2:22]
    if kind == "v0_p2wpkh":
        return b"\x06" + script[2:]
    if kind == "v0_p2wsh":
        return b"\x07" + script[2:]
    if kind == "v1_p2tr":
        return b"\x08" + script[2:]
    if kind == "anchor":
        return b"\x09" + script
    return None
