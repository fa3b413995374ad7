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
import json
import os
import struct
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from cairn.brk.blocks.files import MAGICS
from cairn.core.errors import InvalidInput, NetworkError, NotFound, Unauthorized

MAX_FILE_BYTES = 128 << 20


class RpcClient:
    """Minimal JSON-RPC 1.0 client for bitcoind, with cookie or user/password auth."""

    def __init__(self, url: str, *, cookie: str | None = None, user: str | None = None, password: str = "",
                 timeout: float = 30.0) -> None:
        self.url = url
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
            token = ""
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
                payload = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 401:
                raise Unauthorized(f"bitcoind at {self.url} rejected the credentials. "
                                   f"Pass --rpc-cookie or --rpc-user with $BRK_RPC_PASSWORD.") from exc
            try:
                payload = json.loads(exc.read())  # bitcoind answers RPC errors with HTTP 404/500 + body
            except ValueError:
                raise NetworkError(f"bitcoind at {self.url} answered HTTP {exc.code} to {method}.") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise NetworkError(f"Cannot reach bitcoind at {self.url} ({exc}). Check --rpc-url and that the node runs.") \
                from exc
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
    from cairn.brk.vecs import write_atomic

    write_atomic(path, json.dumps(state).encode())


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
    while height >= 0 and client.call("getblockhash", height) != hashes[height]:
        height -= 1
    del hashes[height + 1:]
    tip = int(client.call("getblockcount"))
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
            block_hash = client.call("getblockhash", h)
            raw = bytes.fromhex(client.call("getblock", block_hash, 0))
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
