"""The Esplora-compatible REST routes of ``brk serve`` under ``/api`` (Blockstream's esplora API: paths,
JSON shapes, content types and status codes), over :class:`cairn_servers.brk.esplora.Explorer`.

Hex answers are ``text/plain``, raw bytes ``application/octet-stream``, the rest JSON. Errors are
``text/plain`` messages, as Esplora's: 400 for malformed input (a txid that is not 64 hexadecimal digits,
an address that does not decode, a start index that is not a multiple of 25), 404 for what the chain
does not hold (an unknown txid or block, a height past the tip, a path that is no endpoint), 501 for
``POST /api/tx`` (brk has no node to broadcast through). brk has no mempool: the mempool parts are empty.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cairn_servers.core.errors import CairnError

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from cairn_servers.brk.esplora import Explorer
    from cairn_servers.brk.interface import Interface

CORS = {"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Methods": "GET, OPTIONS",
        "Access-Control-Allow-Headers": "*"}
TEXT = "text/plain; charset=utf-8"
NO_MEMPOOL = {"count": 0, "vsize": 0, "total_fee": 0, "fee_histogram": []}
BROADCAST = ("brk reads a node's block files and has no node to broadcast through: send the transaction with "
             "your node (`bitcoin-cli sendrawtransaction HEX`) or another Esplora server.")

# (path, summary) of every route, for OpenAPI and /llms.txt.
ROUTES: list[tuple[str, str]] = [
    ("/api/blocks/tip/height", "The tip height (text)"),
    ("/api/blocks/tip/hash", "The tip block hash (text)"),
    ("/api/blocks", "The 10 newest blocks, newest first"),
    ("/api/blocks/{start_height}", "10 blocks from start_height down, newest first"),
    ("/api/block-height/{height}", "The hash of the block at a height (text)"),
    ("/api/block/{hash}", "A block"),
    ("/api/block/{hash}/header", "A block's header in hex (text)"),
    ("/api/block/{hash}/raw", "A block's bytes (application/octet-stream)"),
    ("/api/block/{hash}/status", "Whether a block is in the best chain, its height and the next block"),
    ("/api/block/{hash}/txids", "Every txid of a block"),
    ("/api/block/{hash}/txid/{index}", "The txid at a position in a block (text)"),
    ("/api/block/{hash}/txs", "A block's first 25 transactions"),
    ("/api/block/{hash}/txs/{start_index}", "25 of a block's transactions from start_index (a multiple of 25)"),
    ("/api/tx/{txid}", "A transaction, its inputs with their prevouts"),
    ("/api/tx/{txid}/hex", "A transaction's bytes in hex (text)"),
    ("/api/tx/{txid}/raw", "A transaction's bytes (application/octet-stream)"),
    ("/api/tx/{txid}/status", "The block that confirmed a transaction"),
    ("/api/tx/{txid}/outspend/{vout}", "Whether an output is spent, and by which input"),
    ("/api/tx/{txid}/outspends", "The spending status of every output of a transaction"),
    ("/api/tx/{txid}/merkle-proof", "The merkle branch of a transaction in its block"),
    ("/api/address/{address}", "An address's totals (confirmed; mempool always 0)"),
    ("/api/address/{address}/txs", "An address's newest 25 confirmed transactions (no mempool)"),
    ("/api/address/{address}/txs/chain", "The same, newest first, 25 a page"),
    ("/api/address/{address}/txs/chain/{last_seen_txid}", "The next 25, older than last_seen_txid"),
    ("/api/address/{address}/txs/mempool", "Always [] (brk has no mempool)"),
    ("/api/address/{address}/utxo", "An address's unspent outputs"),
    ("/api/scripthash/{hash}", "The same as /api/address, by the SHA-256 of the output script"),
    ("/api/scripthash/{hash}/txs", "The newest 25 transactions of a script hash"),
    ("/api/scripthash/{hash}/txs/chain", "The same, newest first, 25 a page"),
    ("/api/scripthash/{hash}/txs/chain/{last_seen_txid}", "The next 25, older than last_seen_txid"),
    ("/api/scripthash/{hash}/txs/mempool", "Always []"),
    ("/api/scripthash/{hash}/utxo", "The unspent outputs of a script hash"),
    ("/api/fee-estimates", "sat/vB for confirmation within 1-25, 144, 504 and 1008 blocks, from recent blocks"),
    ("/api/mempool", "Always empty (brk has no mempool)"),
    ("/api/mempool/txids", "Always []"),
    ("/api/mempool/recent", "Always []"),
]


def routes(interface: Interface) -> list[Route]:
    """The Esplora routes over ``interface``'s explorer."""
    from starlette.responses import Response
    from starlette.routing import Route

    def endpoint(handler: Callable[[Explorer, dict[str, str]], Any], media: str = "application/json") -> Any:
        async def run(request: Request) -> Response:
            if request.method == "OPTIONS":
                return Response(status_code=204, headers=CORS)
            try:
                ex = interface.explorer
                ex.refresh()
                result = handler(ex, dict(request.path_params))
            except CairnError as exc:
                return Response(exc.message, status_code=exc.http_status, media_type=TEXT, headers=CORS)
            if isinstance(result, bytes):
                return Response(result, media_type=media, headers=CORS)
            if media == TEXT:
                return Response(str(result), media_type=TEXT, headers=CORS)
            return Response(json.dumps(result, separators=(",", ":")), media_type=media, headers=CORS)
        return run

    def get(path: str, handler: Callable[[Explorer, dict[str, str]], Any], media: str = "application/json") -> Route:
        return Route(path, endpoint(handler, media), methods=["GET", "OPTIONS"])

    async def post_tx(request: Request) -> Response:
        return Response(BROADCAST, status_code=501, media_type=TEXT, headers=CORS)

    async def unknown(request: Request) -> Response:
        return Response(f"No such endpoint: {request.method} {request.url.path}. The API is listed at /openapi.json.",
                        status_code=404, media_type=TEXT, headers=CORS)

    def tip_hash(ex: Explorer, p: dict[str, str]) -> str:
        ex._ready()
        return ex.block_hash(ex.tip())

    def tip_height(ex: Explorer, p: dict[str, str]) -> int:
        ex._ready()
        return ex.tip()

    def block_at(ex: Explorer, p: dict[str, str]) -> str:
        from cairn_servers.brk.esplora import parse_int

        height = parse_int(p["height"], "block height")
        ex._ready()
        return ex.block_hash(ex.height_of(height))

    def txid_at(ex: Explorer, p: dict[str, str]) -> str:
        from cairn_servers.brk.esplora import parse_int
        from cairn_servers.core.errors import NotFound

        k = parse_int(p["index"], "transaction index")
        txids = ex.block_txids(p["hash"])
        if k >= len(txids):
            raise NotFound(f"Transaction index {k} is out of range: the block has {len(txids)} transactions.")
        return txids[k]

    def block_txs(ex: Explorer, p: dict[str, str]) -> Any:
        return ex.block_txs(p["hash"], p.get("start", 0))

    def address_routes(prefix: str, param: str, kind: str) -> list[Route]:
        return [
            get(f"/api/{prefix}/{{{param}:str}}", lambda ex, p: ex.address(p[param], kind)),
            get(f"/api/{prefix}/{{{param}:str}}/txs", lambda ex, p: ex.address_txs(p[param], None, kind)),
            get(f"/api/{prefix}/{{{param}:str}}/txs/chain", lambda ex, p: ex.address_txs(p[param], None, kind)),
            get(f"/api/{prefix}/{{{param}:str}}/txs/chain/{{last:str}}",
                lambda ex, p: ex.address_txs(p[param], p["last"], kind)),
            get(f"/api/{prefix}/{{{param}:str}}/txs/mempool", lambda ex, p: (ex.resolve(p[param], kind), [])[1]),
            get(f"/api/{prefix}/{{{param}:str}}/utxo", lambda ex, p: ex.utxos(p[param], kind)),
        ]

    return [
        get("/api/blocks/tip/height", tip_height, TEXT),
        get("/api/blocks/tip/hash", tip_hash, TEXT),
        get("/api/blocks", lambda ex, p: ex.blocks()),
        get("/api/blocks/{start:str}", lambda ex, p: ex.blocks(p["start"])),
        get("/api/block-height/{height:str}", block_at, TEXT),
        get("/api/block/{hash:str}", lambda ex, p: ex.block(ex.block_height(p["hash"]))),
        get("/api/block/{hash:str}/header", lambda ex, p: ex.header(ex.block_height(p["hash"])).hex(), TEXT),
        get("/api/block/{hash:str}/raw", lambda ex, p: ex.raw_block(p["hash"]), "application/octet-stream"),
        get("/api/block/{hash:str}/status", lambda ex, p: ex.block_status(p["hash"])),
        get("/api/block/{hash:str}/txids", lambda ex, p: ex.block_txids(p["hash"])),
        get("/api/block/{hash:str}/txid/{index:str}", txid_at, TEXT),
        get("/api/block/{hash:str}/txs", block_txs),
        get("/api/block/{hash:str}/txs/{start:str}", block_txs),
        Route("/api/tx", post_tx, methods=["POST"]),
        get("/api/tx/{txid:str}", lambda ex, p: ex.get_tx(p["txid"])),
        get("/api/tx/{txid:str}/hex", lambda ex, p: ex.tx_raw(p["txid"]).hex(), TEXT),
        get("/api/tx/{txid:str}/raw", lambda ex, p: ex.tx_raw(p["txid"]), "application/octet-stream"),
        get("/api/tx/{txid:str}/status", lambda ex, p: ex.tx_status(p["txid"])),
        get("/api/tx/{txid:str}/outspend/{vout:str}", lambda ex, p: ex.outspend(p["txid"], p["vout"])),
        get("/api/tx/{txid:str}/outspends", lambda ex, p: ex.outspends(p["txid"])),
        get("/api/tx/{txid:str}/merkle-proof", lambda ex, p: ex.merkle_proof(p["txid"])),
        *address_routes("address", "address", "address"),
        *address_routes("scripthash", "hash", "scripthash"),
        get("/api/fee-estimates", lambda ex, p: ex.fee_estimates()),
        get("/api/mempool", lambda ex, p: NO_MEMPOOL),
        get("/api/mempool/txids", lambda ex, p: []),
        get("/api/mempool/recent", lambda ex, p: []),
    ] + [Route("/api/{rest:path}", unknown, methods=["GET"])]  # other methods: 405 (the API is read-only)


def openapi_paths() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for path, summary in ROUTES:
        params = [{"name": part[1:-1], "in": "path", "required": True, "schema": {"type": "string"}}
                  for part in path.split("/") if part.startswith("{")]
        paths[path] = {"get": {"operationId": "esplora_" + path.removeprefix("/api/").replace("/", "_").replace(
            "{", "").replace("}", "").replace("-", "_"), "summary": summary, "parameters": params,
            "responses": {"200": {"description": "OK"}, "400": {"description": "Malformed input (text)"},
                          "404": {"description": "Not in the chain (text)"}}}}
    paths["/api/tx"] = {"post": {"operationId": "esplora_broadcast", "summary": "Broadcast: 501, brk has no node",
                                 "responses": {"501": {"description": BROADCAST + " (text)"}}}}
    return paths
