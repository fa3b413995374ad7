"""brk's HTTP API (Starlette): /api/vecs/..., the block explorer's Esplora-compatible routes
(``cairn_servers.brk.esplora_http``), /version, /health, /openapi.json, the web page at /, and
MCP Streamable HTTP (stateless) at POST /mcp. The /api/vecs routes, /version and their OpenAPI entries are
generated from the operations in ``cairn_servers.brk.ops`` (the MCP tools too); what is HTTP's own is here.

Every /api answer carries an ETag made of the computed store's generation, its tip height and whether
prices exist (with the time of their last commit), so ``If-None-Match`` gets a 304 until a new block (or a
reorg, or a price import) lands. ``If-None-Match`` uses the weak comparison of RFC 9110 section 13.1.2:
``W/"0-589-1-18b2c4f3a1e07d40"``, a list of
tags (``"a", W/"b"``) and ``*`` all match. ``/api/vecs/INDEX-to-ID.csv`` (``.json``, ``.tsv``, ``.md``,
``.markdown``) picks the format like ``?format=``.
CORS is open (``*``) on the read-only API; /mcp keeps the MCP core's DNS-rebinding protection.
Errors are ``{"error": {"code", "message"[, "details"]}}`` (``cairn_servers.core.errors.envelope``, scrubbed) with the
taxonomy's HTTP status.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn_servers.brk.interface import Interface, normalize_format
from cairn_servers.core.errors import CairnError, InvalidInput, envelope

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

    from cairn_servers.core.ops import Op

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

    from cairn_servers.brk.esplora_http import routes as esplora_routes
    from cairn_servers.brk.interface import version
    from cairn_servers.brk.ops import OPS, answer
    from cairn_servers.brk.tools import build_server
    from cairn_servers.core.ops import query_args
    from cairn_servers.mcp.http import mcp_app

    def api(handler: Any, op: Op | None = None) -> Any:
        """Wrap a handler returning data with ETag, CORS and errors; ``op``'s renderer (if any) makes the text."""
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
            if op is not None and "render" in op.extra:
                return Response(answer(op, result), media_type=MEDIA[result.format], headers=headers)
            return Response(json.dumps(result, separators=(",", ":")), media_type=MEDIA["json"], headers=headers)
        return endpoint

    def route(op: Op) -> Route:
        assert op.http is not None
        return Route(op.http[1], api(lambda r: op.call(interface, query_args(op, r.query_params), "http"), op),
                     methods=["GET", "OPTIONS"])

    vecs_op = OPS["get_vecs"]

    async def llms_txt(request: Request) -> Response:
        """The API and the store's ids in Markdown, for agents (``cairn_servers.brk.llmstxt``)."""
        from cairn_servers.brk.llmstxt import render

        headers = dict(CORS)
        if request.method == "OPTIONS":
            return Response(status_code=204, headers=headers)
        headers["ETag"], headers["Cache-Control"] = interface.etag(), "no-cache"
        if none_match(request.headers.get("if-none-match"), headers["ETag"]):
            return Response(status_code=304, headers=headers)
        return Response(render(interface, openapi()["paths"]), media_type=MEDIA["md"], headers=headers)

    def index_to_id(request: Request) -> Any:
        """/api/vecs/INDEX-to-ID[.ext]: get_vecs with the index and the id (and the format) in the path."""
        path = request.path_params["pair"]
        index, sep, vec_id = path.partition("-to-")
        if not sep or not index or not vec_id:
            raise InvalidInput(f"/api/vecs/{path} is not INDEX-to-ID, e.g. /api/vecs/dateindex-to-close.")
        params = query_args(vecs_op, request.query_params)
        stem, dot, ext = vec_id.rpartition(".")
        if dot:  # /api/vecs/height-to-close.csv
            fmt = normalize_format(ext)
            if params.get("format") and normalize_format(params["format"]) != fmt:
                raise InvalidInput(f"/api/vecs/{path} asks for .{ext} but ?format= says {params['format']!r}; "
                                   "give one.")
            vec_id, params["format"] = stem, fmt
        if any(key in params for key in ("index", "i", "ids", "v")):
            raise InvalidInput(f"/api/vecs/{path} names the index and the id in the path; use /api/vecs/query "
                               "to give them as parameters.")
        return vecs_op.call(interface, {**params, "index": index, "ids": vec_id}, "http")

    routes = [
        *(route(op) for op in OPS.on("http")),
        Route("/api/vecs/{pair:str}", api(index_to_id, vecs_op), methods=["GET", "OPTIONS"]),
        *esplora_routes(interface),  # the block explorer (Esplora's API), then 404 for any other /api path
        Route("/health", api(lambda r: {"status": "ok", "height": interface.tip(), "version": version()}),
              methods=["GET", "OPTIONS"]),
        Route("/openapi.json", api(lambda r: openapi()), methods=["GET", "OPTIONS"]),
        Route("/llms.txt", llms_txt, methods=["GET", "OPTIONS"]),
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


def _error(exc: CairnError, headers: dict[str, str]) -> Response:
    from starlette.responses import Response

    body = json.dumps(envelope(exc))
    return Response(body, status_code=exc.http_status, media_type="application/json", headers=headers)


def _web(name: str) -> bytes:
    return resources.files("cairn_servers.brk").joinpath("web", name).read_bytes()


def _web_tag(name: str) -> str:
    """The first 16 hex digits of the file's SHA-256: its version in the page's links and its ETag."""
    import hashlib

    return hashlib.sha256(_web(name)).hexdigest()[:16]


async def _page(request: Request) -> Response:
    """The chart page, its files linked by version (``/web/app.js?v=TAG``): a browser keeps them for a year
    and still loads the new ones the moment a new release changes them. The page itself is revalidated."""
    from starlette.responses import Response

    html = _web("index.html").decode("utf-8")
    for name in WEB_FILES:
        html = html.replace(f'"/web/{name}"', f'"/web/{name}?v={_web_tag(name)}"')
    return Response(html, media_type="text/html; charset=utf-8", headers={"Cache-Control": "no-cache"})


async def _static(request: Request) -> Response:
    """A file of the page. Asked for by its current version (``?v=TAG``, as the page links it): cached for a
    year; otherwise revalidated each time by its ETag (a 304 when unchanged)."""
    from starlette.responses import Response

    name = request.path_params["name"]
    if name not in WEB_FILES:
        return Response("not found", status_code=404, media_type="text/plain")
    tag = _web_tag(name)
    headers = {"ETag": f'"{tag}"', "Cache-Control": "public, max-age=31536000, immutable"
               if request.query_params.get("v") == tag else "no-cache"}
    if none_match(request.headers.get("if-none-match"), f'"{tag}"'):
        return Response(status_code=304, headers=headers)
    return Response(_web(name), media_type=WEB_FILES[name], headers=headers)


RESPONSES = {"304": {"description": "Not modified (the ETag is keyed on the tip)"},
             "400": {"description": "Bad parameter"},
             "404": {"description": "Unknown index or id (with suggestions)"},
             "413": {"description": "Request larger than the cap"}}


def openapi() -> dict[str, Any]:
    """The OpenAPI 3.1 description of the HTTP API: the operations' routes, then HTTP's own."""
    from cairn_servers.brk.interface import version
    from cairn_servers.brk.ops import OPS
    from cairn_servers.core.ops import openapi_paths

    paths = openapi_paths(OPS.on("http"), errors=RESPONSES)
    query = paths["/api/vecs/query"]["get"]
    in_path = [{"name": name, "in": "path", "required": True, "description": text, "schema": {"type": "string"}}
               for name, text in (("index", "index or accepted name"), ("id", "vec id"))]
    range_params = [p for p in query["parameters"] if p["name"] not in ("index", "i", "ids", "v")]
    paths["/api/vecs/{index}-to-{id}"] = {"get": {
        "operationId": "get_vecs_by_path", "summary": "Values of one vec; .csv/.tsv/.md/.json after the "
        "id picks the format", "parameters": [*in_path, *range_params], "responses": query["responses"]}}
    from cairn_servers.brk.esplora_http import openapi_paths as esplora_paths

    paths.update(esplora_paths())
    paths["/health"] = {"get": {"operationId": "health", "summary": "Liveness and the served tip height",
                                "responses": {"200": {"description": "OK"}}}}
    paths["/llms.txt"] = {"get": {"operationId": "llms_txt", "summary": "This API, the MCP tools, the indexes and "
                                  "every id with its definition, in Markdown for agents",
                                  "responses": {"200": {"description": "OK"}}}}
    paths["/mcp"] = {"post": {"summary": f"MCP Streamable HTTP (stateless): the {len(OPS.on('mcp'))} tools",
                              "responses": {"200": {"description": "JSON-RPC reply"}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "brk Bitcoin datasets", "version": version(),
                 "description": "Vecs (datasets) computed from Bitcoin block files, by index (timeframe)."},
        "paths": paths,
    }


def serve_dir(out: Path, host: str, port: int, *, allow_remote: bool = False) -> None:
    """Serve one output directory until interrupted."""
    from cairn_servers.core.serve import serve

    interface = Interface(out)
    allowed = ["*"] if allow_remote else None
    serve(create_app(interface, allowed_hosts=allowed), host, port, name="brk", allow_remote=allow_remote)
