"""Agents: named prompts from ``ctx.toml``, served as MCP prompts, ``GET /agents`` and ``ctx agent``.

An agent is a persona a client can start a conversation from: a description, a system prompt, the
tools it is meant to use, the search it should prefer (mode, sources, limit) and the arguments it
takes (strings; the MCP prompt arguments). Two kinds, as in Context Harness:

* ``[agents.inline.NAME]``: the prompt is written in the file; ``{{argument}}`` is replaced by the
  argument's value (its ``default``, else the empty string, when it is optional and not given);
* ``[agents.script.NAME]``: ``agent.resolve(args, config, context)`` in a Lua script builds it, in the
  sandbox Lua tools run in, with ``context.search/get/sources`` against the knowledge base (searches
  default to the agent's ``search_mode``, ``search_sources`` and ``search_limit``) and
  ``context.system_prompt`` (the configured prompt, arguments filled in). It returns
  ``{system = "...", messages = {{role = "user"|"assistant", content = "..."}, ...}}``.

Arguments are checked here, once, for every surface: an unknown agent is ``NotFound``; a missing
required argument, an unknown one or a value that is not a string is ``InvalidInput`` with the same
message on the CLI (exit 2), over HTTP (400) and MCP ``prompts/get`` (JSON-RPC -32602). The values may
also come wrapped, ``{"arguments": {...}}``, as Context Harness's specification writes the body of
``POST /agents/{name}/prompt`` (unless the agent declares an argument named ``arguments``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from cairn_servers.core.errors import ExtensionError, InvalidInput, NotFound

if TYPE_CHECKING:
    from cairn_servers.ctx.agent_config import AgentConfig
    from cairn_servers.ctx.config import Config
    from cairn_servers.ctx.luaproc import CancelCheck, LuaPool
    from cairn_servers.ctx.scripts import KnowledgeBase

ROLES = ("user", "assistant")


def describe(agent: "AgentConfig") -> dict[str, Any]:
    """An agent as ``GET /agents`` and ``ctx agent list`` show it."""
    return {
        "name": agent.name,
        "description": agent.description,
        "kind": agent.kind,
        "source": "toml" if agent.kind == "inline" else "lua",  # Context Harness's name for the kind
        "tools": list(agent.tools),
        "search": {"mode": agent.search_mode, "sources": list(agent.search_sources), "limit": agent.search_limit},
        "arguments": [{"name": a.name, "description": a.description, "required": a.required,
                       **({"default": a.default} if a.default is not None else {})} for a in agent.arguments],
    }


def _signature(agent: "AgentConfig") -> str:
    if not agent.arguments:
        return f"Agent {agent.name!r} takes no arguments."
    return "Arguments: " + ", ".join(a.name + (" (required)" if a.required else "") for a in agent.arguments) + "."


def render(template: str, values: dict[str, str]) -> str:
    """``{{name}}`` replaced by ``values[name]`` (names were checked against the arguments at load)."""
    from cairn_servers.ctx.agent_config import PLACEHOLDER

    return PLACEHOLDER.sub(lambda m: values.get(m.group(1), ""), template)


class Agents:
    """The configuration's agents, resolved on a knowledge base (``service()``: the calling thread's)."""

    def __init__(self, config: "Config", service: Callable[[], "KnowledgeBase"], pool: "LuaPool | None" = None) -> None:
        self.config = config
        self.by_name = {a.name: a for a in config.agents}
        self._service = service
        self._pool = pool
        self._own_pool: LuaPool | None = None
        import threading

        self._lock = threading.Lock()
        self._sources: dict[str, str] = {}
        if any(a.kind == "script" for a in config.agents):  # read now: a missing script stops the server at start
            from cairn_servers.ctx.lua import read_script

            for a in config.agents:
                if a.kind == "script" and a.path is not None:
                    self._sources[a.name] = read_script(a.path, f"Lua agent {a.name!r}")

    def close(self) -> None:
        if self._own_pool is not None:
            self._own_pool.close()
            self._own_pool = None

    def describe_all(self) -> list[dict[str, Any]]:
        return [describe(a) for a in self.by_name.values()]

    def agent(self, name: str) -> "AgentConfig":
        found = self.by_name.get(name)
        if found is None:
            known = ", ".join(self.by_name)
            hint = f"Agents: {known}." if known else "None is configured: add [agents.inline.NAME] to ctx.toml."
            raise NotFound(f"No agent named {name!r}. {hint}", details={"agent": name})
        return found

    def check(self, name: str, args: Any) -> dict[str, str]:
        """``args`` checked against the agent's arguments; the values to use (defaults filled in)."""
        agent = self.agent(name)
        if args is None:
            args = {}
        declared = {a.name: a for a in agent.arguments}
        if (isinstance(args, dict) and list(args) == ["arguments"] and isinstance(args["arguments"], dict)
                and "arguments" not in declared):
            # Context Harness's specification wraps the values, {"arguments": {"service": "..."}}, where its
            # server and guides send them bare; both reach the agent the same way
            args = args["arguments"]
        if not isinstance(args, dict):
            raise InvalidInput(f"The arguments of agent {name!r} must be an object of strings.", details={"agent": name})
        for key, value in args.items():
            if key not in declared:
                raise InvalidInput(f"Agent {name!r}: unknown argument {key!r}. {_signature(agent)}",
                                   details={"agent": name, "argument": key})
            if not isinstance(value, str):
                raise InvalidInput(f"Agent {name!r}: argument {key!r} must be a string, not {value!r:.60}.",
                                   details={"agent": name, "argument": key})
        values: dict[str, str] = {}
        for a in agent.arguments:
            if a.name in args:
                values[a.name] = args[a.name]
            elif a.required:
                what = f": {a.description}" if a.description else ""
                raise InvalidInput(f"Agent {name!r}: missing required argument {a.name!r}{what}. {_signature(agent)}",
                                   details={"agent": name, "argument": a.name})
            elif a.default is not None:
                values[a.name] = a.default
        return values

    def resolve(self, name: str, args: Any = None, cancelled: "CancelCheck | None" = None) -> dict[str, Any]:
        """The agent's prompt for these arguments: its description plus ``system`` and ``messages``. A Lua
        agent stops (its worker killed, ``luaproc.Cancelled``) once ``cancelled()`` is true."""
        values = self.check(name, args)
        agent = self.agent(name)
        system = render(agent.system_prompt, values).strip()  # a TOML '"""' block ends with a newline
        messages: list[dict[str, str]] = []
        if agent.kind == "script":
            system, messages = self._run_script(agent, values, system, cancelled)
        return {**describe(agent), "system": system, "messages": messages}

    def _run_script(self, agent: "AgentConfig", values: dict[str, str], system: str,
                    cancelled: "CancelCheck | None") -> tuple[str, list[dict[str, str]]]:
        from cairn_servers.ctx.scripts import run_agent, service_call

        assert agent.path is not None
        base = service_call(self._service())

        def call(fn: str, args: list[Any]) -> Any:
            if fn == "search":  # the agent's search defaults, where the script gives none
                query, opts = (args + [None, None])[:2]
                opts = dict(opts) if isinstance(opts, dict) else {}
                opts.setdefault("mode", agent.search_mode)
                if agent.search_sources:
                    opts.setdefault("source", list(agent.search_sources))
                if agent.search_limit is not None:
                    opts.setdefault("limit", agent.search_limit)
                args = [query, opts]
            return base(fn, args)

        # The search defaults are in the script's config too (Context Harness scripts read config.search_limit).
        config = {"search_mode": agent.search_mode, "search_sources": list(agent.search_sources),
                  **({"search_limit": agent.search_limit} if agent.search_limit is not None else {}), **agent.config}
        out = run_agent(agent.name, agent.path, self._sources[agent.name], agent.timeout, config, values,
                        system, call, self._lua_pool(), cancelled)
        label = f"Lua agent {agent.name!r}"
        if not isinstance(out, dict):
            raise ExtensionError(f"{label}: agent.resolve must return a table {{system = ..., messages = ...}}, "
                                 f"not {type(out).__name__ if out is not None else 'nil'}.")
        unknown = sorted(set(out) - {"system", "messages"})
        if unknown:
            raise ExtensionError(f"{label}: agent.resolve returned {', '.join(map(repr, unknown))}; it may return "
                                 "only `system` and `messages` (tools and search defaults are set in ctx.toml).")
        got = out.get("system", system)
        if not isinstance(got, str) or not got.strip():
            raise ExtensionError(f"{label}: agent.resolve must return a non-empty string `system` (or the config "
                                 "must set system_prompt).")
        raw = out.get("messages") or []
        if not isinstance(raw, list):
            raise ExtensionError(f"{label}: agent.resolve returned `messages` that is not a list.")
        messages: list[dict[str, str]] = []
        for i, m in enumerate(raw, 1):
            if not (isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str)):
                raise ExtensionError(f"{label}: messages[{i}] must be {{role = \"user\"|\"assistant\", "
                                     "content = \"text\"}.")
            messages.append({"role": m["role"], "content": m["content"]})
        return got, messages

    def _lua_pool(self) -> "LuaPool":
        if self._pool is not None:
            return self._pool
        with self._lock:
            if self._own_pool is None:
                from cairn_servers.ctx.luaproc import LuaPool

                self._own_pool = LuaPool(2)
            return self._own_pool


def prompt_messages(resolved: dict[str, Any]) -> list[dict[str, Any]]:
    """A resolved agent as MCP prompt messages: the system prompt first, as a user message (MCP
    prompts have no system role), then the script's messages."""
    out = [{"role": "user", "content": {"type": "text", "text": resolved["system"]}}]
    out += [{"role": m["role"], "content": {"type": "text", "text": m["content"]}} for m in resolved["messages"]]
    return out
