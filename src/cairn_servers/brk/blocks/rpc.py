"""A bitcoind JSON-RPC source: mirror a remote node's best chain into local blk files.

The indexer only reads blk files, so a remote node is served by copying its blocks (``getblockhash``
+ ``getblock <hash> 0``) into ``blk*.dat`` framing in a local directory; everything downstream (best
chain by work, reorg rollback, crash safety) is then the same code. A reorg on the node shows up as
new blocks appended after the fork; stale ones stay in the files, as in a real node's.

The mirror's own state (committed file size and the hashes mirrored per height) lives in
``mirror.json`` beside the files and is replaced atomically after the appended bytes are synced; a
crash mid-append is cut back to the committed size on the next run.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import struct
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from cairn_servers.brk.blocks.files import MAGICS
from cairn_servers.core.errors import InvalidInput, NetworkError, NotFound, TooLarge, Unauthorized

MAX_FILE_BYTES = 128 << 20
# A block is at most 4 MB (8 MB as hex in a JSON reply): anything far larger is not bitcoind.
MAX_RESPONSE_BYTES = 64 << 20


def _read_capped(resp: Any, url: str) -> bytes:
    """The body of an RPC reply, read in pieces and refused past MAX_RESPONSE_BYTES."""
    chunks: list[bytes] = []
    size = 0
    try:
        while True:
            chunk = resp.read(1 << 20)
            if not chunk:
                if getattr(resp, "length", None):  # EOF before the declared Content-Length
                    raise http.client.IncompleteRead(b"".join(chunks), resp.length)
                return b"".join(chunks)
            size += len(chunk)
            if size > MAX_RESPONSE_BYTES:
                raise TooLarge(f"{url} sent a reply over {MAX_RESPONSE_BYTES >> 20} MiB; bitcoind never does. "
                               "Check --rpc-url.")
            chunks.append(chunk)
    except (OSError, http.client.HTTPException) as exc:  # dropped mid-body, wrong length, timeout
        raise NetworkError(f"The reply from {url} broke off ({type(exc).__name__}). Check --rpc-url and "
                           "that the node runs, then retry.") from exc


def _split_user_info(url: str) -> tuple[str, str]:
    """``url`` without its user info, and that user info decoded as ``user:password`` ("" if none).

    urllib would take ``u:PASS@127.0.0.1`` for the host name and hand it, password included, to the
    DNS resolver; the user info goes into the Authorization header instead. A URL whose host cannot
    be told apart from its user info (a raw "@" or "/" in the password) is refused before any
    connection, and never quoted unmasked.
    """
    from urllib.parse import unquote, urlsplit, urlunsplit

    from cairn_servers.core.sanitize import mask_dsn

    shown = mask_dsn(url)
    try:
        parts = urlsplit(url)
        port = parts.port  # ValueError for a port that is not a number (e.g. "u:a" of "u:a/b@host")
    except ValueError:
        raise InvalidInput(f"--rpc-url {shown!r} is not a valid URL (a password with '@' or '/' must be "
                           "percent-encoded: %40, %2F).") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise InvalidInput(f"--rpc-url {shown!r} is not an http(s) URL, e.g. http://127.0.0.1:8332/.")
    if "@" in parts.path:  # http://u:/p@host: urllib would connect to "u", the password in the path
        raise InvalidInput(f"--rpc-url {shown!r}: percent-encode '@' and '/' in the user name and password "
                           "(%40, %2F).")
    host = parts.hostname
    if not host:
        raise InvalidInput(f"--rpc-url {shown!r} names no host, e.g. http://127.0.0.1:8332/.")
    if "@" not in parts.netloc:
        return url, ""
    netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port is not None else "")
    token = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment)), token


class RpcClient:
    """Minimal JSON-RPC 1.0 client for bitcoind, with cookie or user/password auth."""

    def __init__(self, url: str, *, cookie: str | None = None, user: str | None = None, password: str = "",
                 timeout: float = 30.0) -> None:
        url, url_token = _split_user_info(url)
        self.url = url  # without user info: safe to print, and what is connected to
        self.timeout = timeout
        if cookie:
            try:
                token = Path(cookie).expanduser().read_text().strip()
            except OSError as exc:
                raise NotFound(f"Cannot read the RPC cookie {cookie} ({exc.strerror}). "
                               f"Point --rpc-cookie at the node's .cookie file.") from exc
        elif user:
            token = f"{user}:{password}"
        else:
            token = url_token  # http://user:password@host:port/ (empty when the URL has none)
        self._auth = "Basic " + base64.b64encode(token.encode()).decode() if token else None
        self._id = 0

    def call(self, method: str, *params: Any) -> Any:
        self._id += 1
        body = json.dumps({"jsonrpc": "1.0", "id": self._id, "method": method, "params": list(params)}).encode()
        req = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
        if self._auth:
            req.add_header("Authorization", self._auth)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = _read_capped(resp, self.url)
        except urllib.error.HTTPError as exc:
            if exc.code == 401:
                raise Unauthorized(f"bitcoind at {self.url} rejected the credentials. Pass --rpc-cookie, "
                                   "--rpc-user with $BRK_RPC_PASSWORD, or user:password@ in --rpc-url.") from exc
            try:
                payload = json.loads(_read_capped(exc, self.url))  # RPC errors come as HTTP 404/500 + body
            except (ValueError, NetworkError):
                raise NetworkError(f"bitcoind at {self.url} answered HTTP {exc.code} to {method}.") from exc
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            raise NetworkError(f"Cannot reach bitcoind at {self.url} ({exc}). Check --rpc-url and that the node runs.") \
                from exc
        else:
            try:
                payload = json.loads(raw)
            except ValueError as exc:
                raise NetworkError(f"{self.url} answered {method} with something that is not JSON; is it "
                                   "bitcoind's RPC port?") from exc
        if not isinstance(payload, dict):
            raise NetworkError(f"{self.url} answered {method} with JSON that is not a JSON-RPC reply.")
        if payload.get("error"):
            err = payload["error"]
            raise NetworkError(f"bitcoind {method} failed: {err.get('message', err)}")
        return payload.get("result")


def _load_state(path: Path) -> dict[str, Any]:
    if path.exists():
        state: dict[str, Any] = json.loads(path.read_text())
        return state
    return {"file_no": 0, "size": 0, "hashes": []}


def _save_state(path: Path, state: dict[str, Any]) -> None:
    from cairn_servers.core.files import write_atomic

    write_atomic(path, json.dumps(state).encode())


def _block_hash(client: RpcClient, height: int) -> str:
    value = client.call("getblockhash", height)
    if not isinstance(value, str) or len(value) != 64 or not all(c in "0123456789abcdef" for c in value):
        raise NetworkError(f"{client.url} answered getblockhash {height} with {str(value)[:80]!r}, not a block hash.")
    return value


def _block(client: RpcClient, block_hash: str) -> bytes:
    """The raw block, checked against its hash: a server that sends anything else is refused."""
    import hashlib

    value = client.call("getblock", block_hash, 0)
    try:
        raw = bytes.fromhex(value)
    except (TypeError, ValueError):
        raise NetworkError(f"{client.url} answered getblock {block_hash} with something that is not hex.") from None
    header_hash = hashlib.sha256(hashlib.sha256(raw[:80]).digest()).digest()[::-1].hex()
    if len(raw) < 81 or header_hash != block_hash:
        raise NetworkError(f"{client.url} answered getblock {block_hash} with a block whose hash is {header_hash}. "
                           "The block was not written; check --rpc-url.")
    return raw


def mirror(client: RpcClient, blocks_dir: Path, *, network: str = "mainnet",
           max_blocks: int | None = None) -> dict[str, Any]:
    """Append the node's best-chain blocks that ``blocks_dir`` lacks; returns counts and the tip."""
    if network not in MAGICS:
        raise InvalidInput(f"Unknown network {network!r}. Use one of: {', '.join(MAGICS)}.")
    magic = MAGICS[network]
    blocks_dir.mkdir(parents=True, exist_ok=True)
    state_path = blocks_dir / "mirror.json"
    state = _load_state(state_path)
    hashes: list[str] = state["hashes"]
    # Find the fork: walk back while the node's hash at our height differs from ours.
    mirrored = len(hashes)
    height = mirrored - 1
    while height >= 0 and _block_hash(client, height) != hashes[height]:
        height -= 1
    del hashes[height + 1:]
    tip = client.call("getblockcount")
    if isinstance(tip, bool) or not isinstance(tip, int) or tip < -1:
        raise NetworkError(f"{client.url} answered getblockcount with {str(tip)[:40]!r}, not a height.")
    todo = range(height + 1, tip + 1)
    if max_blocks is not None:
        todo = todo[:max_blocks]
    path = blocks_dir / f"blk{state['file_no']:05d}.dat"
    if path.exists() and path.stat().st_size > state["size"]:
        os.truncate(path, state["size"])  # drop a record a crash left half-written
    fetched = 0
    fh = open(path, "ab")
    try:
        for h in todo:
            block_hash = _block_hash(client, h)
            raw = _block(client, block_hash)
            if state["size"] + len(raw) + 8 > MAX_FILE_BYTES and state["size"] > 0:
                fh.close()
                state["file_no"] += 1
                state["size"] = 0
                path = blocks_dir / f"blk{state['file_no']:05d}.dat"
                fh = open(path, "ab")
            fh.write(magic + struct.pack("<I", len(raw)) + raw)
            state["size"] += len(raw) + 8
            hashes.append(block_hash)
            fetched += 1
            if fetched % 500 == 0:
                fh.flush()
                os.fsync(fh.fileno())
                _save_state(state_path, state)
        fh.flush()
        os.fsync(fh.fileno())
    finally:
        fh.close()
    _save_state(state_path, state)
    return {"fetched": fetched, "height": len(hashes) - 1, "tip": hashes[-1] if hashes else "",
            "replaced": mirrored - (height + 1)}
