"""Operations declared once: a typed service function reaches MCP, the CLI, HTTP and OpenAPI from here.

An operation is a plain function whose first argument is the thing it runs on (a store, a service, an
interface) and whose other arguments are its parameters, with annotations and a docstring::

    OPS = Registry("blz")

    @OPS.op(mcp="toc", cli="toc", http="GET /toc",
            params={"source": {"flags": ("alias",)}, "max_depth": {"minimum": 1, "maximum": 6, "wire": "maxDepth"}})
    def toc(store: Store, source: str, max_depth: int | None = None) -> dict[str, Any]:
        '''Browse one source's outline.

        :param source: alias of an installed source
        :param max_depth: only heading levels 1..N
        '''

From that one declaration:

- ``op.input_schema`` is the JSON Schema (``type`` from the annotation, ``description`` from ``:param``,
  ``default`` from the signature, constraints from ``params``), used as the MCP tool's ``inputSchema``,
  in OpenAPI, and to validate every call;
- ``op.bind(args)`` validates a JSON object of wire names (``maxDepth``) against it and returns the
  keyword arguments (``max_depth``), with one message for a bad value whichever surface sent it;
- ``op.coerce(strings)`` turns CLI options and query-string values into JSON values first
  (``"5"`` -> 5 where the schema says integer; anything that does not parse is left for ``bind`` to
  refuse with the same message as a wrong JSON type);
- :func:`mcp_tool`, :func:`add_subcommand` / :func:`cli_args`, :func:`openapi_paths` build the surfaces.

An operation whose parameters are only known at run time (a script that declares its own) is built
from an explicit JSON Schema instead of a signature: ``Op(handler, name="t", schema={...})``; its
handler is called as ``handler(target, args, **context)`` with ``args`` the validated dict (defaults
filled in), and every surface above treats it like any other operation.

Wire names fixed by a seed or by clients (``find``, ``maxResults``, ``get_vecs``, ``/tools/search``)
are names on the declaration (``mcp=``, ``cli=``, ``http=``, a parameter's ``wire`` and ``aliases``),
so renaming a Python argument never changes what a client sees.

Start-up: this module imports nothing beyond the MCP schema validator, and reads signatures from
``__code__``/``__annotations__``/``__defaults__`` (no ``inspect``, no ``typing``): declaring the
operations costs the stdio servers nothing before their first reply. Schemas are derived on first use.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the stdio servers' start-up path
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterator
    from typing import Any

    from cairn_servers.mcp.server import Tool

# Keys of a parameter's declaration that are not JSON Schema keywords.
_PARAM_KEYS = frozenset({"wire", "aliases", "flags", "positional", "metavar", "help", "surfaces", "required",
                         "repeat"})
_SURFACES = ("mcp", "cli", "http")
_JSON_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "None": "null",
               "dict": "object", "list": "array", "Any": None, "object": None}


class Param:
    """One parameter of an operation: its Python name, its wire name and schema, and how the CLI spells it."""

    __slots__ = ("name", "wire", "schema", "required", "required_on", "default", "aliases", "flags", "positional",
                 "metavar", "help", "surfaces", "repeat")

    def __init__(self, name: str, schema: dict[str, Any], *, required: bool, default: Any = None,
                 wire: str | None = None, aliases: tuple[str, ...] = (), flags: tuple[str, ...] = (),
                 positional: bool = False, metavar: str | None = None, help: str | None = None,
                 surfaces: tuple[str, ...] = _SURFACES, repeat: bool = False,
                 required_on: tuple[str, ...] = ()) -> None:
        self.name = name
        self.wire = wire or name
        self.schema = schema
        self.required = required  # on every surface it is on
        self.required_on = required_on  # or only on these (declared ``"required": ("mcp",)``)
        self.default = default
        self.aliases = aliases
        self.flags = flags
        self.positional = positional
        self.metavar = metavar
        self.help = help
        self.surfaces = surfaces
        self.repeat = repeat

    def __repr__(self) -> str:
        return f"Param({self.name!r}, wire={self.wire!r}, required={self.required})"

    def required_for(self, surface: str) -> bool:
        """Whether ``surface`` must supply this parameter: a parameter with a default may still be
        required on some surfaces (``blz add --manifest FILE`` needs no alias; MCP source-add does)."""
        return self.required or surface in self.required_on


class Op:
    """One operation. Build it with :meth:`Registry.op`; the surfaces read it, never the function."""

    def __init__(self, fn: Callable[..., Any], *, name: str | None = None, mcp: str | None = None,
                 cli: str | None = None, http: str | None = None, title: str | None = None,
                 description: str | None = None, read_only: bool = True, open_world: bool = False,
                 destructive: bool = False, output_schema: dict[str, Any] | None = None,
                 params: dict[str, dict[str, Any]] | None = None, strict: bool = True,
                 extra: dict[str, Any] | None = None, schema: dict[str, Any] | None = None,
                 error_details: Callable[[str, str | None], dict[str, Any]] | None = None) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        self.mcp = mcp
        self.cli = cli
        self.http = _route(http) if http else None
        self.title = title
        self._description = description
        self.read_only = read_only
        self.open_world = open_world
        self.destructive = destructive
        self.output_schema = output_schema
        self.strict = strict  # additionalProperties: false
        self.extra = extra or {}  # surface-specific data a server attaches (renderers, HTTP details)
        # (operation, field path) -> the details of a refused parameter; default {"operation", "parameter"}
        self.error_details = error_details
        self._declared = params or {}
        # An explicit JSON Schema (an object schema) replaces the signature: see the module docstring.
        self.explicit = schema
        if schema is not None:
            if params:
                raise TypeError(f"operation {self.name!r}: params= and schema= exclude each other")
            if schema.get("type") != "object" or not isinstance(schema.get("properties", {}), dict):
                raise TypeError(f"operation {self.name!r}: schema= must be an object schema with properties")
        else:
            unknown = set(self._declared) - set(_arg_names(fn))
            if unknown:
                raise TypeError(f"operation {self.name!r}: params for unknown arguments {sorted(unknown)}")
        self._params: list[Param] | None = None
        self._schema: dict[str, Any] | None = None
        # surface -> (any aliases, ((name, wire, schema, fill with the default, default), ...)): what
        # bind() reads per call, worked out once (per call it was a third of a warm blz find's binding)
        self._binding: dict[str, tuple[bool, tuple[tuple[str, str, dict[str, Any], bool, Any], ...]]] = {}

    def __repr__(self) -> str:
        return f"Op({self.name!r})"

    # -- derived from the declaration ---------------------------------------------------------

    @property
    def description(self) -> str:
        """The docstring's text before the ``:param`` lines (or the declared description)."""
        if self._description is None:
            self._description = _doc(self.fn)[0] if self.explicit is None else ""
        return self._description

    @property
    def summary(self) -> str:
        """The description's first sentence-paragraph: a CLI help line, an OpenAPI summary."""
        return self.description.split("\n\n")[0].replace("\n", " ").strip()

    @property
    def params(self) -> list[Param]:
        if self._params is None:
            self._params = (_params(self.fn, self._declared, self.name) if self.explicit is None
                            else _schema_params(self.explicit))
        return self._params

    def params_for(self, surface: str) -> list[Param]:
        return [p for p in self.params if surface in p.surfaces]

    def input_schema(self, surface: str = "mcp") -> dict[str, Any]:
        """The JSON Schema of the parameters a surface accepts (wire names, aliases included)."""
        if self.explicit is not None:
            return self.explicit
        if surface == "mcp" and self._schema is not None:
            return self._schema
        props: dict[str, Any] = {}
        required: list[str] = []
        for p in self.params_for(surface):
            props[p.wire] = p.schema
            for alias in p.aliases:
                props[alias] = {**p.schema, "description": f"alias of {p.wire}"}
                props[alias].pop("default", None)
            if p.required_for(surface):
                required.append(p.wire)
        schema: dict[str, Any] = {"type": "object", "properties": props}
        if required:
            schema["required"] = required
        if self.strict:
            schema["additionalProperties"] = False
        if surface == "mcp":
            self._schema = schema
        return schema

    def annotations(self) -> dict[str, Any]:
        """MCP tool annotations from the declaration."""
        out: dict[str, Any] = {"readOnlyHint": self.read_only}
        if not self.read_only:
            out["destructiveHint"] = self.destructive
        out["openWorldHint"] = self.open_world
        return out

    # -- calling ------------------------------------------------------------------------------

    def bind(self, args: Any, surface: str = "mcp") -> dict[str, Any]:
        """``args`` (a JSON object of wire names) checked against the schema, as Python keyword arguments.

        Raises ``InvalidInput`` naming the operation and the parameter; defaults fill what is absent;
        an alias counts as its parameter (giving both is refused).
        """
        from cairn_servers.core.errors import InvalidInput
        from cairn_servers.mcp.schema import SchemaError, validate

        if args is None:
            args = {}
        if not isinstance(args, dict):
            details = {"operation": self.name} if self.error_details is None else self.error_details(self.name, None)
            raise InvalidInput(f"Parameters of {self.name!r} must be a JSON object.", details=details)
        binding = self._binding.get(surface) or self._bind_plan(surface)
        if binding[0]:  # an alias counts as its parameter: a required one too
            args = dict(args)
            for p in self.params_for(surface):
                given = [k for k in (p.wire, *p.aliases) if k in args]
                if len(given) > 1:
                    raise self._invalid(f"{given[0]} and {given[1]} name the same parameter; give one", given[1])
                if given and given[0] != p.wire:
                    args[p.wire] = args.pop(given[0])
        try:
            validate(args, self.input_schema(surface))
        except SchemaError as exc:
            raise self._invalid(str(exc), exc.path) from None
        if self.explicit is not None:  # the handler takes the arguments as they came, defaults filled in
            out = dict(args)
            for p in self.params:
                if p.wire not in out and "default" in p.schema:
                    out[p.wire] = p.schema["default"]
            return out
        kwargs: dict[str, Any] = {}
        for name, wire, schema, fill, default in binding[1]:
            if wire in args:
                value = args[wire]
                kwargs[name] = _whole(value, schema) if isinstance(value, (float, list)) else value
            elif fill:
                kwargs[name] = default
        return kwargs

    def _bind_plan(self, surface: str) -> tuple[bool, tuple[tuple[str, str, dict[str, Any], bool, Any], ...]]:
        params = self.params_for(surface)
        plan = (any(p.aliases for p in params),
                tuple((p.name, p.wire, p.schema, not p.required_for(surface) and "default" in p.schema,
                       p.schema.get("default")) for p in params))
        self._binding[surface] = plan
        return plan

    def call(self, target: Any, args: Any, surface: str = "mcp", **context: Any) -> Any:
        """Validate ``args`` and run the operation on ``target`` (``context``: extra keyword arguments a
        surface supplies itself, such as a progress callback)."""
        if self.explicit is not None:
            return self.fn(target, self.bind(args, surface), **context)
        return self.fn(target, **self.bind(args, surface), **context)

    def _invalid(self, message: str, field: str | None) -> Exception:
        if self.error_details is None:
            return invalid(self.name, message, field)
        return invalid(self.name, message, field, details=self.error_details(self.name, field or None))

    def coerce(self, values: dict[str, Any], surface: str = "cli") -> dict[str, Any]:
        """String values (argv, a query string) as the JSON values the schema asks for, where they parse."""
        by_wire = {k: p for p in self.params_for(surface) for k in (p.wire, *p.aliases)}
        out: dict[str, Any] = {}
        for key, value in values.items():
            p = by_wire.get(key)
            out[key] = value if p is None else _coerce(value, p.schema)
        return out


def invalid(op: str, message: str, field: str | None = None, *, details: dict[str, Any] | None = None) -> Exception:
    """The one message for a parameter a surface refused: ``Invalid parameter for 'search': limit: ...``
    (``details``: given by the operation's ``error_details``, else ``{"operation", "parameter"}``)."""
    from cairn_servers.core.errors import InvalidInput

    if details is None:
        details = {"operation": op}
        if field:
            details["parameter"] = field.split(".")[0].split("[")[0]
    return InvalidInput(f"Invalid parameter for {op!r}: {message}", details=details)


class Registry:
    """The operations of one server, in declaration order."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.ops: dict[str, Op] = {}

    def op(self, **declaration: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Declare the decorated function an operation (see :class:`Op` for the keywords); the function
        itself is returned unchanged, so services still call each other directly."""

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.add(Op(fn, **declaration))
            return fn

        return register

    def add(self, op: Op) -> Op:
        if op.name in self.ops:
            raise ValueError(f"{self.server}: operation {op.name!r} is declared twice")
        self.ops[op.name] = op
        return op

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops.values())

    def __getitem__(self, name: str) -> Op:
        return self.ops[name]

    def on(self, surface: str) -> list[Op]:
        """The operations a surface (mcp, cli, http) exposes."""
        return [op for op in self.ops.values() if getattr(op, surface) is not None]

    def by_surface_name(self, surface: str, name: str) -> Op | None:
        for op in self.ops.values():
            spelled = getattr(op, surface)
            if spelled is not None and (spelled[1] if surface == "http" else spelled) == name:
                return op
        return None


# -- MCP ----------------------------------------------------------------------------------------

def mcp_tool(op: Op, handler: Callable[..., Any], *, structured: bool = True,
             description: str | None = None) -> Tool:
    """The MCP tool of ``op``: its wire name, description, input schema and annotations, running
    ``handler(args, ctx)``. Arguments are validated by ``op.bind`` (``Tool.validate``), so a bad one gets
    the same message over MCP as over the CLI and HTTP (a JSON-RPC -32602 error)."""
    from cairn_servers.mcp.server import Tool

    if op.mcp is None:
        raise ValueError(f"operation {op.name!r} is not on MCP")
    tool = Tool(name=op.mcp, handler=handler, description=description or op.description,
                input_schema=op.input_schema("mcp"), output_schema=op.output_schema, title=op.title,
                annotations=op.annotations(), structured=structured,
                validate=lambda args: op.bind(args, "mcp"))
    return tool


# -- CLI ----------------------------------------------------------------------------------------

def add_subcommand(subparsers: Any, op: Op, *, parents: list[argparse.ArgumentParser] | None = None,
                   help: str | None = None, description: str | None = None) -> argparse.ArgumentParser:
    """An argparse sub-command for ``op``: one argument per parameter, every value kept a string (or a
    list of strings, or a flag) so that :func:`cli_args` + ``op.bind`` check it like any other surface."""
    import argparse

    if op.cli is None:
        raise ValueError(f"operation {op.name!r} is not on the CLI")
    # "agent show": a command of a command group; the caller passes the group's sub-parsers
    words = cli_words(op)
    p: argparse.ArgumentParser = subparsers.add_parser(
        op.cli.split()[-1], parents=parents or [], help=help or words(op.summary),
        description=description or op.extra.get("cli_description") or words(op.description),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(op=op)
    for param in op.params_for("cli"):
        text = param.help or words(param.schema.get("description", ""))
        if "default" in param.schema and param.schema["default"] is not None and not param.positional \
                and _types(param.schema) - {"null"} != {"boolean"}:
            text = f"{text} (default {param.schema['default']})" if text else f"default {param.schema['default']}"
        text = text.replace("%", "%%")
        dest = f"op_{param.name}"
        if param.positional:
            many = "array" in _types(param.schema)
            must = param.required_for("cli")
            nargs = ("+" if must else "*") if many else (None if must else "?")
            p.add_argument(dest, metavar=param.metavar or param.name.upper(), nargs=nargs, help=text, default=None)
            continue
        flags = param.flags or (f"--{param.name.replace('_', '-')}",)
        metavar = param.metavar or param.wire.upper()  # not the internal dest (OP_NAME)
        if _types(param.schema) - {"null"} == {"boolean"}:
            p.add_argument(*flags, dest=dest, action="store_const", const=True, default=None, help=text)
        elif param.repeat or "array" in _types(param.schema):
            p.add_argument(*flags, dest=dest, action="append", default=None, metavar=metavar, help=text)
        else:
            p.add_argument(*flags, dest=dest, default=None, metavar=metavar, help=text,
                           required=param.required_for("cli"))
    return p


def cli_words(op: Op) -> Callable[[str], str]:
    """A function putting ``op``'s descriptions in command-line words: a parameter's wire name written
    in camelCase (``maxDepth``, which MCP clients send) becomes its long flag (``--depth``), and
    ``dryRun: true`` (or ``exact: true``) the flag alone (``--dry-run``). The MCP and HTTP surfaces keep
    the declaration's own words. ``extra["cli_description"]`` replaces a description whose sense is
    MCP's alone (what an agent may fetch, a tool call to make)."""
    import re

    flags: dict[str, str] = {}
    for param in op.params_for("cli"):
        if param.positional:
            continue
        names = param.flags or (f"--{param.name.replace('_', '-')}",)
        flag = next((f for f in names if f.startswith("--")), names[0])
        for wire in (param.wire, *param.aliases):
            flags[wire] = flag
    def words(text: str) -> str:
        named = [w for w in flags if w in text]  # most texts name none: no pattern to build (start-up)
        if not named:
            return text
        boolean = "|".join(re.escape(w) for w in named)
        camel = "|".join(re.escape(w) for w in named if w != w.lower())
        pattern = re.compile(rf"\b(?:({boolean}): true\b" + (rf"|({camel})\b" if camel else "") + ")")
        return pattern.sub(lambda m: flags[m.group(1) or m.group(2)], text)

    return words


def cli_args(op: Op, namespace: argparse.Namespace) -> dict[str, Any]:
    """The wire arguments a parsed sub-command gives ``op`` (absent options left out), coerced."""
    values: dict[str, Any] = {}
    for param in op.params_for("cli"):
        value = getattr(namespace, f"op_{param.name}", None)
        if value is None or (param.positional and value == [] and not param.required_for("cli")):
            continue
        if param.repeat and isinstance(value, list) and "array" not in _types(param.schema):
            value = ",".join(value)  # a repeated flag of a comma-separated parameter
        values[param.wire] = value
    return op.coerce(values, "cli")


# -- HTTP ---------------------------------------------------------------------------------------

def query_args(op: Op, query: Any) -> dict[str, Any]:
    """The wire arguments of a query string (a multi-dict with ``getlist``, or a plain dict), coerced:
    a parameter that takes a list may repeat (``?snippets=a&snippets=b``)."""
    values: dict[str, Any] = {}
    wanted = {k: p for p in op.params_for("http") for k in (p.wire, *p.aliases)}
    keys = list(dict.fromkeys(query.keys()))
    for key in keys:
        p = wanted.get(key)
        many = p is not None and "array" in _types(p.schema) and hasattr(query, "getlist")
        values[key] = query.getlist(key) if many and len(query.getlist(key)) > 1 else query[key]
    return op.coerce(values, "http")


def openapi_paths(ops: list[Op], *, errors: dict[str, Any] | None = None) -> dict[str, Any]:
    """OpenAPI 3.1 ``paths`` for the operations with an HTTP route: GET takes query parameters, POST a
    JSON body with the input schema."""
    paths: dict[str, Any] = {}
    for op in ops:
        if op.http is None:
            continue
        method, path = op.http
        entry: dict[str, Any] = {"operationId": op.name, "summary": op.summary, "description": op.description,
                                 "responses": {"200": {"description": "OK"}, **(errors or {})}}
        if method == "GET":
            entry["parameters"] = [
                {"name": name, "in": "path" if "{" + name + "}" in path else "query",
                 "required": p.required_for("http") or "{" + name + "}" in path,
                 "description": p.schema.get("description", "") if name == p.wire else f"alias of {p.wire}",
                 "schema": {k: v for k, v in p.schema.items() if k != "description"}}
                for p in op.params_for("http") for name in (p.wire, *p.aliases)]
        else:
            entry["requestBody"] = {"required": any(p.required_for("http") for p in op.params_for("http")),
                                    "content": {"application/json": {"schema": op.input_schema("http")}}}
        if op.output_schema is not None:
            entry["responses"]["200"]["content"] = {"application/json": {"schema": op.output_schema}}
        paths.setdefault(path, {})[method.lower()] = entry
    return paths


# -- deriving a declaration from the function ---------------------------------------------------

def _route(spec: str) -> tuple[str, str]:
    method, _, path = spec.strip().partition(" ")
    if not path:
        method, path = "POST", method
    if method.upper() not in ("GET", "POST") or not path.startswith("/"):
        raise ValueError(f"bad HTTP route {spec!r}: use 'GET /path' or 'POST /path'")
    return method.upper(), path


def _arg_names(fn: Callable[..., Any]) -> list[str]:
    """The operation's parameters: every argument after the first (the target), positional and keyword-only."""
    code = fn.__code__
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    return list(names[1:])


def _params(fn: Callable[..., Any], declared: dict[str, dict[str, Any]], op: str) -> list[Param]:
    code = fn.__code__
    positional = list(code.co_varnames[:code.co_argcount])
    defaults = dict(zip(positional[len(positional) - len(fn.__defaults__ or ()):], fn.__defaults__ or ()))
    defaults.update(fn.__kwdefaults__ or {})
    notes = fn.__annotations__
    docs = _doc(fn)[1]
    out: list[Param] = []
    for name in _arg_names(fn):
        if name not in notes:
            raise TypeError(f"operation {op!r}: argument {name!r} has no annotation")
        decl = dict(declared.get(name, {}))
        schema = annotation_schema(notes[name])
        if name in docs:
            schema["description"] = docs[name]
        has_default = name in defaults
        if has_default and defaults[name] is not None:
            schema["default"] = defaults[name]
        elif has_default:  # None: absent means "not given"; null is accepted where the annotation allows it
            schema.pop("default", None)
        for key, value in decl.items():
            if key not in _PARAM_KEYS:
                schema[key] = value
        extras = {k: decl[k] for k in decl if k in _PARAM_KEYS and k != "required"}
        if "aliases" in extras:
            extras["aliases"] = tuple(extras["aliases"])
        if "flags" in extras:
            extras["flags"] = tuple(extras["flags"])
        if "surfaces" in extras:
            extras["surfaces"] = tuple(extras["surfaces"])
        required = decl.get("required", not has_default)  # a bool, or the surfaces it is required on
        out.append(Param(name, schema, required=required is True,
                         required_on=tuple(required) if isinstance(required, (tuple, list)) else (),
                         default=defaults.get(name), **extras))
    return out


def _schema_params(schema: dict[str, Any]) -> list[Param]:
    """The parameters an explicit object schema declares (its property names are the wire names)."""
    required = set(schema.get("required", ()))
    out = []
    for name, prop in schema.get("properties", {}).items():
        prop = prop if isinstance(prop, dict) else {}
        out.append(Param(name, prop, required=name in required, default=prop.get("default")))
    return out


def _doc(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """(description, {param: text}) from a docstring written with ``:param name: text`` lines."""
    lines = (fn.__doc__ or "").expandtabs().splitlines()
    indent = min((len(l) - len(l.lstrip()) for l in lines[1:] if l.strip()), default=0)
    lines = [lines[0].strip()] + [l[indent:] for l in lines[1:]] if lines else []
    text: list[str] = []
    params: dict[str, str] = {}
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        if stripped.startswith(":param "):
            head, _, rest = stripped[len(":param "):].partition(":")
            current = head.split()[-1]
            params[current] = rest.strip()
        elif stripped.startswith((":return", ":raise")):
            current = "\0"
        elif current is not None:
            if stripped and current != "\0":
                params[current] = f"{params[current]} {stripped}"
            elif not stripped:
                current = None
        else:
            text.append(line.rstrip())
    return "\n".join(text).strip(), params


def annotation_schema(annotation: Any) -> dict[str, Any]:
    """A JSON Schema for an annotation string: ``str``, ``int | None``, ``list[str]``, ``str | list[str]``,
    ``Literal['a', 'b']``, ``dict[str, Any]``. Unknown names give an empty (any) schema."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    parts = _split(text.strip(), "|")
    types: list[str] = []
    schema: dict[str, Any] = {}
    for part in parts:
        part = part.strip()
        base, _, inner = part.partition("[")
        inner = inner[:-1] if inner.endswith("]") else inner
        base = base.strip().rsplit(".", 1)[-1]
        if base == "Literal":
            values = [_literal(v) for v in _split(inner, ",")]
            schema["enum"] = schema.get("enum", []) + values
            for v in values:
                kind = "null" if v is None else _JSON_TYPES.get(type(v).__name__)
                if kind and kind not in types:
                    types.append(kind)
            continue
        if base == "Optional":
            parts.extend(_split(inner, ",") + ["None"])
            continue
        kind = _JSON_TYPES.get(base, None) if base in _JSON_TYPES else None
        if base in _JSON_TYPES and kind is None:  # Any
            return {}
        if kind is None:
            return {}
        if kind not in types:
            types.append(kind)
        if kind == "array" and inner:
            items = annotation_schema(inner)
            if items:
                schema["items"] = items
    if "enum" in schema and "null" in types and None not in schema["enum"]:
        schema["enum"].append(None)
    schema["type"] = types[0] if len(types) == 1 else types
    return schema


def _split(text: str, sep: str) -> list[str]:
    """``text`` split on ``sep`` outside brackets and quotes."""
    out, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == sep and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return [s.strip() for s in out if s.strip()]


def _literal(text: str) -> Any:
    """A ``Literal[...]`` member: a quoted string, an integer, True, False or None (``ast`` costs start-up)."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    named = {"None": None, "True": True, "False": False}
    if text in named:
        return named[text]
    if _is_int(text):
        return int(text)
    raise TypeError(f"unsupported Literal member {text!r}")


def _types(schema: dict[str, Any]) -> set[str]:
    kind = schema.get("type")
    if kind is None:
        return set()
    return {kind} if isinstance(kind, str) else set(kind)


def _coerce(value: Any, schema: dict[str, Any]) -> Any:
    """A string (or list of strings) from argv or a query string as the JSON value ``schema`` wants."""
    kinds = _types(schema)
    if isinstance(value, list):
        if "array" in kinds:
            item = schema.get("items", {})
            return [_coerce(v, item) if isinstance(item, dict) else v for v in value]
        value = value[-1] if value else value  # a repeated scalar option: the last one wins, as argparse does
    if not isinstance(value, str) or "string" in kinds and not kinds & {"integer", "number", "boolean"}:
        return value
    text = value.strip()
    if "integer" in kinds and _is_int(text):
        return int(text)
    if "number" in kinds:
        try:
            number = float(text)
        except ValueError:
            pass
        else:
            if number == number and number not in (float("inf"), float("-inf")):
                return int(number) if _is_int(text) else number
    if "boolean" in kinds and text.lower() in ("true", "false", "1", "0", "yes", "no"):
        return text.lower() in ("true", "1", "yes")
    if "array" in kinds and "string" not in kinds:
        item = schema.get("items", {})
        return [_coerce(v.strip(), item) for v in text.split(",") if v.strip()]
    return value


def _whole(value: Any, schema: dict[str, Any]) -> Any:
    """``value`` with integer-valued floats (``2.0``, which JSON Schema accepts as an integer) made
    ints where ``schema`` asks for an integer and not a number, lists included: the operation gets
    the ``int`` its annotation promises (a float line number or slice bound is a TypeError)."""
    if isinstance(value, float):
        kinds = _types(schema)
        return int(value) if value.is_integer() and "integer" in kinds and "number" not in kinds else value
    if isinstance(value, list) and isinstance(schema.get("items"), dict) and "array" in _types(schema):
        return [_whole(v, schema["items"]) for v in value]
    return value


def _is_int(text: str) -> bool:
    digits = text[1:] if text[:1] in "+-" else text
    return digits.isdigit() and len(digits) <= 4300 and digits.isascii()
