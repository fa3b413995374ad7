"""Lua tools and connectors: reading their declarations and running them in the sandbox.

A tool script defines ``tool = {name, description, parameters = {{name, type, required, description,
default, enum}, ...}}`` and ``function tool.execute(params, context)``. A connector script defines
``function connector.scan(config)`` returning a list of items (``source_id``, ``body``, optional
``title``, ``author``, ``source_url``, ``updated_at``, ``metadata``). Scripts get the host modules
``json``, ``log``, ``http`` and ``env``; tools also get ``context`` (``search``, ``get``, ``sources``,
``config``). ``http`` only reaches the hosts listed in the script's ``allow_hosts`` config key and
``env.get`` only reads the variables listed in ``allow_env``, so secrets stay out unless granted.

Scripts run in worker processes (``cairn_servers.ctx.luaproc``): :func:`declare_tool`, :func:`run_tool` and
:func:`run_connector` send a job to a :class:`LuaPool`; the worker runs :func:`run_job`, which builds
the sandbox and the host modules there. ``context.*`` calls come back to this process's knowledge
base through ``call(name, args)`` (:func:`service_call`).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

from cairn_servers.core.errors import ExtensionError, InvalidInput, NetworkError
from cairn_servers.ctx.lua import Sandbox, log_line, read_script, wrap_host

if TYPE_CHECKING:
    from cairn_servers.ctx.config import ToolConfig
    from cairn_servers.ctx.luaproc import CancelCheck, LuaPool

Call = Callable[[str, list[Any]], Any]  # a context.* function run by the process that owns the knowledge base


class KnowledgeBase(Protocol):
    """What ``context.search/get/sources`` need: ``cairn_servers.ctx.service.Service`` (named by its shape, not
    imported, so that the service may depend on scripts' callers without an import cycle)."""

    def search(self, query: str, mode: str = "keyword", *, source: str | list[str] | None = None,
               since: str | int | None = None, until: str | int | None = None,
               limit: int | None = None) -> list[Any]: ...

    def get(self, id: str) -> Any: ...

    def sources(self) -> list[Any]: ...

PARAM_TYPES = {"string": "string", "number": "number", "integer": "integer", "boolean": "boolean",
               "array": "array", "object": "object"}
MAX_HTTP_BODY = 8 << 20
DEFAULT_HTTP_TIMEOUT = 10.0
MAX_JSON_TEXT = 8 << 20
DECLARE_TIMEOUT = 5.0  # seconds to evaluate a script's top level when reading its declaration


@dataclass
class LuaTool:
    """A Lua tool's declaration, read once from its script."""

    name: str
    description: str
    schema: dict[str, Any]
    path: Path
    timeout: float
    config: dict[str, Any]
    source: str = field(repr=False, default="")


def _strings(value: Any, key: str, label: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise InvalidInput(f"{label}: `{key}` must be a list of strings, not {value!r}.")
    return list(value)


class Hosts:
    """The host modules one run sees; every function checks its arguments and the run's budget."""

    def __init__(self, sandbox: Sandbox, label: str, config: dict[str, Any],
                 env: dict[str, str | None] | None = None) -> None:
        self.sandbox = sandbox
        self.label = label
        self.allow_hosts = {h.lower() for h in _strings(config.get("allow_hosts"), "allow_hosts", label)}
        self.allow_env = set(_strings(config.get("allow_env"), "allow_env", label))
        # the allowed variables' values, read by the parent (the worker's environment is not consulted)
        self.env = env if env is not None else allowed_env(config, label)

    def install(self) -> None:
        sb = self.sandbox

        def h(fn: Any) -> Any:
            return wrap_host(sb, fn)

        sb.set_global("json", sb.module({"encode": h(self.json_encode), "decode": h(self.json_decode)}))
        sb.set_global("log", sb.module({lvl: h(self._logger(lvl)) for lvl in ("debug", "info", "warn", "error")}))
        sb.set_global("env", sb.module({"get": h(self.env_get)}))
        sb.set_global("http", sb.module({"get": h(self.http_get), "post": h(self.http_post)}))

    # json / log / env ---------------------------------------------------------------------------

    def json_encode(self, value: Any = None) -> str:
        try:
            return json.dumps(self.sandbox.plain(value, "json.encode"), ensure_ascii=False)
        except ExtensionError as exc:
            raise InvalidInput(exc.message.replace("json.encode: returned", "json.encode: got")) from None

    def json_decode(self, text: Any = None) -> Any:
        if not isinstance(text, str):
            raise InvalidInput(f"json.decode: expected a string, got {_kind(text)}")
        if len(text) > MAX_JSON_TEXT:
            raise InvalidInput(f"json.decode: the text is over {MAX_JSON_TEXT} bytes")
        try:
            return json.loads(text)
        except ValueError as exc:
            raise InvalidInput(f"json.decode: not valid JSON: {exc}") from None

    def _logger(self, level: str) -> Any:
        def log(*args: Any) -> None:
            log_line(self.label, level, " ".join(a if isinstance(a, str) else json.dumps(_plain(self.sandbox, a)) for a in args))

        return log

    def env_get(self, name: Any = None) -> str | None:
        if not isinstance(name, str):
            raise InvalidInput(f"env.get: expected a variable name, got {_kind(name)}")
        return self.env.get(name) if name in self.allow_env else None

    # http ---------------------------------------------------------------------------------------

    def http_get(self, url: Any = None, opts: Any = None) -> dict[str, Any]:
        return self._request("GET", url, None, opts)

    def http_post(self, url: Any = None, body: Any = None, opts: Any = None) -> dict[str, Any]:
        return self._request("POST", url, body, opts)

    def _request(self, method: str, url: Any, body: Any, opts: Any) -> dict[str, Any]:
        from urllib.parse import urlsplit

        if not isinstance(url, str):
            raise InvalidInput(f"http.{method.lower()}: expected a URL string, got {_kind(url)}")
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        if parts.scheme not in ("http", "https") or not host:
            raise InvalidInput(f"http.{method.lower()}: {url!r} is not an http(s) URL")
        if host not in self.allow_hosts and "*" not in self.allow_hosts:
            raise InvalidInput(f"http.{method.lower()}: host {host!r} is not allowed. "
                               "List it in this script's `allow_hosts` config.")
        options = _plain(self.sandbox, opts) if opts is not None else {}
        if not isinstance(options, dict):
            raise InvalidInput(f"http.{method.lower()}: options must be a table")
        headers = options.get("headers") or {}
        if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
            raise InvalidInput(f"http.{method.lower()}: headers must be a table of strings")
        wanted = options.get("timeout", DEFAULT_HTTP_TIMEOUT)
        if isinstance(wanted, bool) or not isinstance(wanted, (int, float)) or wanted <= 0:
            raise InvalidInput(f"http.{method.lower()}: timeout must be a positive number of seconds")
        left = self.sandbox.run.remaining()
        if left <= 0.01:
            raise InvalidInput(f"http.{method.lower()}: no time left in this run's budget")
        timeout = min(float(wanted), left)
        content: bytes | None = None
        if body is not None:
            if isinstance(body, str):
                content = body.encode("utf-8")
            else:
                content = json.dumps(_plain(self.sandbox, body)).encode("utf-8")
                headers.setdefault("content-type", "application/json")
        return _fetch(method, url, headers, content, timeout, binary=options.get("binary") is True)


def _fetch(method: str, url: str, headers: dict[str, str], content: bytes | None, timeout: float,
           *, binary: bool = False) -> dict[str, Any]:
    import httpx

    started = time.monotonic()
    try:
        with httpx.Client(timeout=timeout, follow_redirects=False) as client:
            with client.stream(method, url, headers=headers, content=content) as resp:
                chunks: list[bytes] = []
                size = 0
                for chunk in resp.iter_bytes():
                    size += len(chunk)
                    if size > MAX_HTTP_BODY:
                        raise InvalidInput(f"http: the response from {url} is over {MAX_HTTP_BODY} bytes")
                    chunks.append(chunk)
                    if time.monotonic() - started > timeout:
                        raise httpx.ReadTimeout("the response took too long")
                raw = b"".join(chunks)
                import base64
                # binary = true: the bytes as base64 (a PDF for a connector item's body_base64)
                body = {"body_base64": base64.b64encode(raw).decode("ascii")} if binary else {
                    "body": raw.decode("utf-8", "replace")}
                return {"status": resp.status_code, "ok": 200 <= resp.status_code < 300, **body,
                        "headers": {k.lower(): v for k, v in resp.headers.items()}}
    except httpx.TimeoutException:
        raise NetworkError(f"http: {url} did not answer within {timeout:.2f} s") from None
    except httpx.HTTPError as exc:
        raise NetworkError(f"http: {url}: {exc}") from None
    except (httpx.InvalidURL, ValueError) as exc:  # control characters, non-ASCII header values...
        raise InvalidInput(f"http: cannot send this request to {url!r}: {exc}") from None


def allowed_env(config: dict[str, Any], label: str) -> dict[str, str | None]:
    """The values of the variables a script's ``allow_env`` lists (``None`` when unset)."""
    return {name: os.environ.get(name) for name in _strings(config.get("allow_env"), "allow_env", label)}


def _plain(sandbox: Sandbox, value: Any) -> Any:
    try:
        return sandbox.plain(value, "value")
    except ExtensionError as exc:
        raise InvalidInput(exc.message) from None


def _kind(value: Any) -> str:
    from lupa import lua54

    return "nil" if value is None else str(lua54.lua_type(value) or type(value).__name__)


# ---- tools ----------------------------------------------------------------------------------------


def _schema(params: Any, label: str) -> dict[str, Any]:
    """``tool.parameters`` (a list of {name, type, required, description, default, enum}) as JSON Schema."""
    if params is None:
        params = []
    if isinstance(params, dict) and not params:
        params = []
    if not isinstance(params, list):
        raise ExtensionError(f"{label}: tool.parameters must be a list of parameter tables.")
    properties: dict[str, Any] = {}
    required: list[str] = []
    for i, p in enumerate(params, 1):
        if not isinstance(p, dict) or not isinstance(p.get("name"), str) or not p["name"]:
            raise ExtensionError(f"{label}: tool.parameters[{i}] needs a string `name`.")
        name = p["name"]
        ptype = p.get("type", "string")
        if ptype not in PARAM_TYPES:
            raise ExtensionError(f"{label}: parameter {name!r}: type {ptype!r} is not one of {', '.join(PARAM_TYPES)}.")
        prop: dict[str, Any] = {"type": PARAM_TYPES[ptype]}
        if isinstance(p.get("description"), str):
            prop["description"] = p["description"]
        if "enum" in p:
            if not isinstance(p["enum"], list) or not p["enum"]:
                raise ExtensionError(f"{label}: parameter {name!r}: enum must be a non-empty list.")
            prop["enum"] = p["enum"]
        if "default" in p:
            prop["default"] = p["default"]
        if p.get("required") is True:
            required.append(name)
        properties[name] = prop
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


def declare_tool(tc: "ToolConfig", pool: "LuaPool") -> LuaTool:
    """Run the script's top level once (in a worker) and read its ``tool`` table."""
    label = f"Lua tool {tc.name!r}"
    source = read_script(tc.path, label)
    timeout = min(tc.timeout, DECLARE_TIMEOUT)
    declared = pool.run({"kind": "declare", "label": label, "source": source, "file": tc.path.name, "timeout": timeout,
                         "config": tc.config, "env": allowed_env(tc.config, label)}, label=label, timeout=timeout)
    description, params = declared.get("description"), declared.get("params")
    return LuaTool(name=tc.name, description=description if isinstance(description, str) else "",
                   schema=_schema(params, label), path=tc.path, timeout=tc.timeout, config=dict(tc.config),
                   source=source)


def run_tool(tool: LuaTool, params: dict[str, Any], service: KnowledgeBase, pool: "LuaPool",
             cancelled: "CancelCheck | None" = None) -> Any:
    """``tool.execute(params, context)`` in a fresh sandbox in a worker; params were validated by the caller.
    Once ``cancelled()`` is true the worker is killed and ``luaproc.Cancelled`` raised."""
    from cairn_servers.ctx.lua import MAX_MEMORY, too_big

    label = f"Lua tool {tool.name!r}"
    if too_big(params, MAX_MEMORY):  # refused here: no point shipping it to a worker
        raise ExtensionError(f"{label}: the parameters do not fit the sandbox's memory ({MAX_MEMORY >> 20} MiB per run); "
                             "pass less data.")
    return pool.run({"kind": "tool", "label": label, "source": tool.source, "file": tool.path.name,
                     "timeout": tool.timeout, "config": tool.config, "env": allowed_env(tool.config, label),
                     "params": params}, label=label, timeout=tool.timeout, call=service_call(service),
                    cancelled=cancelled)


def run_agent(name: str, path: Path, source: str, timeout: float, config: dict[str, Any], args: dict[str, str],
              system_prompt: str, call: Call, pool: "LuaPool", cancelled: "CancelCheck | None" = None) -> Any:
    """``agent.resolve(args, config, context)`` of a Lua agent in a fresh sandbox in a worker (the same
    sandbox, host modules and ``context.*`` as Lua tools); ``call`` answers ``context.*``. Returns the
    script's raw result (checked by the caller, :mod:`cairn_servers.ctx.agents`)."""
    label = f"Lua agent {name!r}"
    return pool.run({"kind": "agent", "label": label, "source": source, "file": path.name, "timeout": timeout,
                     "config": config, "env": allowed_env(config, label), "args": args,
                     "system_prompt": system_prompt}, label=label, timeout=timeout, call=call, cancelled=cancelled)


def service_call(service: KnowledgeBase) -> Call:
    """``context.search/get/sources`` against ``service``, with plain (JSON-ready) arguments and results."""

    def call(name: str, args: list[Any]) -> Any:
        if name == "search":
            query, o = (args + [None, None])[:2]
            o = o if isinstance(o, dict) else {}
            hits = service.search(query, o.get("mode", "keyword"), source=o.get("source"), since=o.get("since"),
                                  until=o.get("until"), limit=o.get("limit"))
            return [asdict(h) for h in hits]
        if name == "get":
            return asdict(service.get(args[0]))
        if name == "sources":
            return [asdict(s) for s in service.sources()]
        raise InvalidInput(f"context.{name} does not exist")

    return call


def run_job(job: dict[str, Any], call: Call) -> Any:
    """One job in this (worker) process: ``declare``, ``tool``, ``agent`` or ``connector`` (see :mod:`cairn_servers.ctx.luaproc`)."""
    kind, label = job["kind"], job["label"]
    config = job.get("config") or {}
    sandbox = Sandbox(label, float(job["timeout"]))
    try:
        Hosts(sandbox, label, config, job.get("env") or {}).install()
        if kind == "declare":
            sandbox.set_global("context", sandbox.table({"config": config}))
        elif kind in ("tool", "agent"):
            sandbox.set_global("context", _context(sandbox, config, call))
        if kind == "agent":
            return _resolve_agent(sandbox, job)
        sandbox.execute(job["source"], job["file"])
        from lupa import lua54

        if kind == "declare":
            tool = sandbox.globals["tool"]
            if tool is None:
                raise ExtensionError(f"{label}: {job['file']} does not define a global `tool` table.")
            if lua54.lua_type(tool) != "table" or lua54.lua_type(tool["execute"]) != "function":
                raise ExtensionError(f"{label}: {job['file']} must define `function tool.execute(params, context)`.")
            description = tool["description"]
            return {"description": description if isinstance(description, str) else "",
                    "params": sandbox.plain(tool["parameters"], label)}
        if kind == "tool":
            return sandbox.call(sandbox.globals["tool"]["execute"], sandbox.table(job.get("params") or {}),
                                sandbox.globals["context"])
        conn = sandbox.globals["connector"]
        if lua54.lua_type(conn) != "table" or lua54.lua_type(conn["scan"]) != "function":
            raise ExtensionError(f"{label}: {job['file']} must define `function connector.scan(config)`.")
        return sandbox.call(conn["scan"], sandbox.table(config))
    finally:
        sandbox.close()


def _resolve_agent(sandbox: Sandbox, job: dict[str, Any]) -> Any:
    """``agent.resolve(args, config, context)`` of an agent script. The script may define a global
    ``agent`` table or ``return agent`` (as Context Harness's agent scripts do): its top level runs as
    a function body (on the same line, so error line numbers stay right) and its result is kept."""
    from lupa import lua54

    label = job["label"]
    sandbox.execute(f"agent = (function(...) {job['source']}\nend)(...) or agent", job["file"])
    agent = sandbox.globals["agent"]
    if lua54.lua_type(agent) != "table" or lua54.lua_type(agent["resolve"]) != "function":
        raise ExtensionError(f"{label}: {job['file']} must define `function agent.resolve(args, config, context)` "
                             "on a global `agent` table (or `return agent`).")
    context = sandbox.globals["context"]
    context["system_prompt"] = job.get("system_prompt") or ""
    return sandbox.call(agent["resolve"], sandbox.table(job.get("args") or {}), context["config"], context)


def _context(sandbox: Sandbox, config: dict[str, Any], call: Call) -> Any:
    def search(query: Any = None, opts: Any = None) -> Any:
        o = _plain(sandbox, opts) if opts is not None else {}
        if not isinstance(o, dict):
            raise InvalidInput("context.search: options must be a table {mode, limit, source}")
        if not isinstance(query, str):
            raise InvalidInput(f"context.search: expected a query string, got {_kind(query)}")
        return call("search", [query, o])

    def get(doc_id: Any = None) -> Any:
        if not isinstance(doc_id, str):
            raise InvalidInput(f"context.get: expected a document id string, got {_kind(doc_id)}")
        return call("get", [doc_id])

    def sources() -> Any:
        return call("sources", [])

    ctx = sandbox.module({"search": wrap_host(sandbox, search), "get": wrap_host(sandbox, get),
                          "sources": wrap_host(sandbox, sources)})
    ctx["config"] = sandbox.table(config)
    return ctx


# ---- connectors -----------------------------------------------------------------------------------


def run_connector(name: str, path: Path, timeout: float, config: dict[str, Any]) -> list[Any]:
    """``connector.scan(config)`` in a fresh sandbox in a worker; returns the raw item list (checked by the caller)."""
    from cairn_servers.ctx.luaproc import LuaPool

    label = f"Lua connector {name!r}"
    source = read_script(path, label)
    with LuaPool(1) as pool:
        items = pool.run({"kind": "connector", "label": label, "source": source, "file": path.name, "timeout": timeout,
                          "config": config, "env": allowed_env(config, label)}, label=label, timeout=timeout)
    if items is None or items == {}:
        return []
    if not isinstance(items, list):
        raise ExtensionError(f"{label}: connector.scan must return a list of items, not {type(items).__name__}.")
    return items
