"""brk's HTTP API (Starlette): /api/vecs/..., /version, /health, /openapi.json, the web page at /, and
MCP Streamable HTTP (stateless) at POST /mcp. Routes and tools call the same ``Interface``.

Every /api answer carries an ETag made of the computed store's generation, its tip height and whether
prices exist, so ``If-None-Match`` gets a 304 until a new block (or a reorg, or a price import) lands.
``If-None-Match`` uses the weak comparison of RFC 9110 section 13.1.2: ``W/"0-589-1"``, a list of
tags (``"a", W/"b"``) and ``*`` all match. ``/api/vecs/INDEX-to-ID.csv`` (``.json``, ``.tsv``, ``.md``,
``.markdown``) picks the format like ``?format=``.
CORS is open (``*``) on the read-only API; /mcp keeps the MCP core's DNS-rebinding protection.
Errors are ``{"error": {"code", "message"[, "details"]}}`` (``cairn.core.errors.envelope``, scrubbed) with the
taxonomy's HTTP status.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn.brk.interface import Interface, normalize_format
from cairn.core.errors import CairnError, InvalidInput, envelope

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

CORS = {"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Methods": "GET, OPTIONS",
        "Access-Control-Allow-Headers": "*", "Access-Control-Expose-Headers": "ETag"}
MEDIA = {"json": "application/json", "csv": "text/csv; charset=utf-8",
         "tsv": "text/tab-separated-values; charset=utf-8", "md": "text/markdown; charset=utf-8"}
WEB_FILES = {"uPlot.iife.min.js": "application/javascript", "uPlot.min.css": "text/css",
             "uPlot.LICENSE.txt": "text/plain; charset=utf-8", "app.js": "application/javascript"}


def create_app(interface: Interface, *, allowed_hosts: list[str] | None = None) -> Starlette:
    """The whole brk HTTP server for one output directory."""
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    from cairn.brk.tools import build_server
    from cairn.mcp.http import mcp_app

    def api(handler: Any) -> Any:
        """Wrap a handler returning data (or a (text, format) pair) with ETag, CORS and errors."""
        async def endpoint(request: Request) -> Response:
            headers = dict(CORS)
            if request.method == "OPTIONS":
                return Response(status_code=204, headers=headers)
            try:
                etag = interface.etag()
                headers["ETag"] = etag
                headers["Cache-Control"] = "no-cache"
                result = handler(request)  # first: an unknown id is a 404 whatever the validator says
            except CairnError as exc:
                return _error(exc, headers)
            if none_match(request.headers.get("if-none-match"), etag):
                return Response(status_code=304, headers=headers)
            if isinstance(result, tuple):
                text, fmt = result
                return Response(text, media_type=MEDIA[fmt], headers=headers)
            return Response(json.dumps(result, separators=(",", ":")), media_type=MEDIA["json"], headers=headers)
        return endpoint

    def q(request: Request) -> dict[str, Any]:
        return dict(request.query_params)

    def vecs(params: dict[str, Any]) -> Any:
        result = interface.get_vecs(params)
        fmt = normalize_format(params.get("format"))
        return (result, fmt) if isinstance(result, str) else result

    def index_to_id(request: Request) -> Any:
        path = request.path_params["pair"]
        index, sep, vec_id = path.partition("-to-")
        if not sep or not index or not vec_id:
            raise InvalidInput(f"/api/vecs/{path} is not INDEX-to-ID, e.g. /api/vecs/dateindex-to-close.")
        params = q(request)
        stem, dot, ext = vec_id.rpartition(".")
        if dot:  # /api/vecs/height-to-close.csv
            if params.get("format") and normalize_format(params["format"]) != normalize_format(ext):
                raise InvalidInput(f"/api/vecs/{path} asks for .{ext} but ?format= says {params['format']!r}; "
                                   "give one.")
            vec_id, params["format"] = stem, ext
        params.update(index=index, ids=vec_id)
        return vecs(params)

    routes = [
        Route("/api/vecs/index-count", api(lambda r: interface.get_index_count()), methods=["GET", "OPTIONS"]),
        Route("/api/vecs/id-count", api(lambda r: interface.get_vecid_count()), methods=["GET", "OPTIONS"]),
        Route("/api/vecs/vec-count", api(lambda r: interface.get_vec_count()), methods=["GET", "OPTIONS"]),
        Route("/api/vecs/indexes", api(lambda r: interface.get_indexes()), methods=["GET", "OPTIONS"]),
        Route("/api/vecs/accepted-indexes", api(lambda r: interface.get_accepted_indexes()),
              methods=["GET", "OPTIONS"]),
        Route("/api/vecs/ids", api(lambda r: interface.get_vecids(r.query_params.get("page", 0))),
              methods=["GET", "OPTIONS"]),
        Route("/api/vecs/index-to-ids", api(lambda r: interface.get_index_to_vecids(
            _need(r, "index", "i"), r.query_params.get("page", 0))), methods=["GET", "OPTIONS"]),
        Route("/api/vecs/id-to-indexes", api(lambda r: interface.get_vecid_to_indexes(_need(r, "id"))),
              methods=["GET", "OPTIONS"]),
        Route("/api/vecs/query", api(lambda r: vecs(q(r))), methods=["GET", "OPTIONS"]),
        Route("/api/vecs/{pair:str}", api(index_to_id), methods=["GET", "OPTIONS"]),
        Route("/version", api(lambda r: interface.get_version()), methods=["GET", "OPTIONS"]),
        Route("/health", api(lambda r: {"status": "ok", "height": interface.tip(),
                                        "version": interface.get_version()}), methods=["GET", "OPTIONS"]),
        Route("/openapi.json", api(lambda r: openapi()), methods=["GET", "OPTIONS"]),
        Route("/mcp", mcp_app(build_server(interface), stateless=True, allowed_hosts=allowed_hosts),
              methods=["GET", "POST", "DELETE", "OPTIONS"]),
        Route("/", _page, methods=["GET"]),
        Route("/web/{name:str}", _static, methods=["GET"]),
    ]
    return Starlette(routes=routes)


def _opaque_tags(header: str) -> list[str]:
    """The entity tags of an ``If-None-Match`` value, weakness (``W/``) dropped: RFC 9110's weak comparison."""
    tags, rest = [], header
    while rest:
        rest = rest.lstrip(" \t,")
        if rest[:2] in ("W/", "w/"):
            rest = rest[2:]
        if not rest.startswith('"'):
            end = rest.find(",")  # a malformed member: skip it
            rest = "" if end < 0 else rest[end:]
            continue
        end = rest.find('"', 1)
        if end < 0:
            break
        tags.append(rest[:end + 1])
        rest = rest[end + 1:]
    return tags


def none_match(header: str | None, etag: str) -> bool:
    """Whether ``If-None-Match: header`` matches the current ``etag`` (answer 304 to GET and HEAD)."""
    if not header:
        return False
    if header.strip() == "*":
        return True
    current = etag[2:] if etag.startswith("W/") else etag
    return current in _opaque_tags(header)


def _need(request: Request, name: str, alias: str | None = None) -> str:
    value = request.query_params.get(name) or (request.query_params.get(alias) if alias else None)
    if not value:
        raise InvalidInput(f"Missing query parameter {name!r}, e.g. ?{name}=...")
    return value


def _error(exc: CairnError, headers: dict[str, str]) -> Response:
    from starlette.responses import Response

    body = json.dumps(envelope(exc))
    return Response(body, status_code=exc.http_status, media_type="application/json", headers=headers)


def _web(name: str) -> bytes:
    return resources.files("cairn.brk").joinpath("web", name).read_bytes()


async def _page(request: Request) -> Response:
    from starlette.responses import Response

    return Response(_web("index.html"), media_type="text/html; charset=utf-8")


async def _static(request: Request) -> Response:
    from starlette.responses import Response

    name = request.path_params["name"]
    if name not in WEB_FILES:
        return Response("not found", status_code=404, media_type="text/plain")
    return Response(_web(name), media_type=WEB_FILES[name], headers={"Cache-Control": "max-age=3600"})


def openapi() -> dict[str, Any]:
    """The OpenAPI 3.1 description of the HTTP API."""
    from cairn.brk.interface import version

    def param(name: str, desc: str, schema: dict[str, Any] | None = None, where: str = "query",
              required: bool = False) -> dict[str, Any]:
        return {"name": name, "in": where, "required": required, "description": desc,
                "schema": schema or {"type": "string"}}

    page = param("page", "0-based page, 1,000 ids per page", {"type": "integer", "minimum": 0})
    range_params = [
        param("from", "first row (inclusive); negative counts from the end. Alias f", {"type": "integer"}),
        param("to", "end row (exclusive); negative counts from the end; wins over count. Alias t",
              {"type": "integer"}),
        param("count", "rows from `from`. Alias c", {"type": "integer", "minimum": 0}),
        param("format", "json (default), csv, tsv or md (markdown = md)",
              {"type": "string", "enum": ["json", "csv", "tsv", "md", "markdown"]}),
    ]
    ok = {"200": {"description": "OK (with an ETag keyed on the tip)"}, "304": {"description": "Not modified"},
          "400": {"description": "Bad parameter"}, "404": {"description": "Unknown index or id (with suggestions)"},
          "413": {"description": "Request larger than the cap"}}

    def get(summary: str, params: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        return {"get": {"summary": summary, "parameters": params or [], "responses": ok}}

    return {
        "openapi": "3.1.0",
        "info": {"title": "brk Bitcoin datasets", "version": version(),
                 "description": "Vecs (datasets) computed from Bitcoin block files, by index (timeframe)."},
        "paths": {
            "/api/vecs/index-count": get("Number of indexes"),
            "/api/vecs/id-count": get("Number of vec ids"),
            "/api/vecs/vec-count": get("Number of (id, index) pairs"),
            "/api/vecs/indexes": get("All indexes"),
            "/api/vecs/accepted-indexes": get("Each index with the names it accepts"),
            "/api/vecs/ids": get("A page of vec ids (sorted)", [page]),
            "/api/vecs/index-to-ids": get("A page of the ids on one index",
                                          [param("index", "index or accepted name", required=True), page]),
            "/api/vecs/id-to-indexes": get("The indexes of one id", [param("id", "vec id", required=True)]),
            "/api/vecs/query": get("Values of vecs on one index", [
                param("index", "index or accepted name. Alias i", required=True),
                param("ids", "comma or space separated vec ids. Alias v", required=True), *range_params]),
            "/api/vecs/{index}-to-{id}": get("Values of one vec (.csv/.tsv/.md/.json after the id: the format)", [
                param("index", "index", where="path", required=True),
                param("id", "vec id", where="path", required=True), *range_params]),
            "/version": get("The running version"),
            "/health": get("Liveness and the served tip height"),
            "/mcp": {"post": {"summary": "MCP Streamable HTTP (stateless): the ten tools",
                              "responses": {"200": {"description": "JSON-RPC reply"}}}},
        },
    }


def serve_dir(out: Path, host: str, port: int, *, allow_remote: bool = False) -> None:
    """Serve one output directory until interrupted."""
    from cairn.core.serve import serve

    interface = Interface(out)
    allowed = ["*"] if allow_remote else None
    serve(create_app(interface, allowed_hosts=allowed), host, port, name="brk", allow_remote=allow_remote)
