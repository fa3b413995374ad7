"""cairn_servers.core.ops: one declaration gives the schema, the validation message, the CLI and OpenAPI."""

from __future__ import annotations

import argparse
from typing import Any, Literal

import pytest

from cairn_servers.core.errors import InvalidInput
from cairn_servers.core.ops import Registry, add_subcommand, annotation_schema, cli_args, mcp_tool, openapi_paths, query_args

OPS = Registry("test")


class Shelf:
    def __init__(self) -> None:
        self.books = ["alpha", "beta", "gamma", "delta"]


@OPS.op(mcp="find-books", cli="find", http="GET /books",
        params={"limit": {"minimum": 1, "maximum": 3, "wire": "maxResults", "flags": ("-n", "--limit")},
                "query": {"positional": True, "minLength": 1}, "prefix": {"aliases": ("p",)}})
def find(shelf: Shelf, query: str, limit: int = 2, prefix: bool = False,
         order: Literal["asc", "desc"] = "asc", tags: list[str] | None = None) -> dict[str, Any]:
    """Books whose title holds ``query``.

    A second paragraph.

    :param query: the text to look for
    :param limit: at most this many
        books (1-3)
    :param prefix: match the start of the title only
    :param order: title order
    :param tags: only these tags
    """
    hits = sorted((b for b in shelf.books if (b.startswith(query) if prefix else query in b)),
                  reverse=order == "desc")
    return {"hits": hits[:limit], "tags": tags}


def test_schema_from_signature_and_docstring() -> None:
    op = OPS["find"]
    schema = op.input_schema()
    assert schema["required"] == ["query"]
    assert schema["additionalProperties"] is False
    props = schema["properties"]
    assert props["query"] == {"type": "string", "description": "the text to look for", "minLength": 1}
    assert props["maxResults"] == {"type": "integer", "description": "at most this many books (1-3)", "default": 2,
                                   "minimum": 1, "maximum": 3}
    assert props["order"]["enum"] == ["asc", "desc"] and props["order"]["default"] == "asc"
    assert props["tags"] == {"type": ["array", "null"], "items": {"type": "string"}, "description": "only these tags"}
    assert props["p"]["description"] == "alias of prefix" and "default" not in props["p"]
    assert op.summary == "Books whose title holds ``query``."
    assert op.description.endswith("A second paragraph.")


@pytest.mark.parametrize(("text", "schema"), [
    ("str", {"type": "string"}),
    ("int | None", {"type": ["integer", "null"]}),
    ("str | list[str]", {"type": ["string", "array"], "items": {"type": "string"}}),
    ("Literal['a', 'b'] | None", {"type": ["string", "null"], "enum": ["a", "b", None]}),
    ("dict[str, Any]", {"type": "object"}),
    ("Any", {}),
    ("Optional[int]", {"type": ["integer", "null"]}),
])
def test_annotation_schema(text: str, schema: dict[str, Any]) -> None:
    assert annotation_schema(text) == schema


def test_bind_maps_wire_names_fills_defaults_and_refuses_with_one_message() -> None:
    op = OPS["find"]
    assert op.bind({"query": "a", "maxResults": 3, "p": True}) == {
        "query": "a", "limit": 3, "prefix": True, "order": "asc"}
    with pytest.raises(InvalidInput) as exc:
        op.bind({"query": "a", "maxResults": 9})
    assert exc.value.message == "Invalid parameter for 'find': maxResults: 9 is greater than the maximum of 3"
    assert exc.value.details == {"operation": "find", "parameter": "maxResults"}
    with pytest.raises(InvalidInput, match="prefix and p name the same parameter"):
        op.bind({"query": "a", "prefix": True, "p": False})
    with pytest.raises(InvalidInput, match="limit: is not an allowed property"):
        op.bind({"query": "a", "limit": 1})  # the Python name is not a wire name
    with pytest.raises(InvalidInput, match="must be a JSON object"):
        op.bind(["a"])


def test_integer_valued_floats_reach_the_function_as_ints() -> None:
    """Regression (issue 16, found by tests/hardening/test_fuzz_tools.py): JSON Schema accepts 2.0 as an
    integer, and the float reached the operation (blz find with linePadding 2.0: an internal error)."""
    op = OPS["find"]
    bound = op.bind({"query": "a", "maxResults": 2.0})
    assert bound["limit"] == 2 and type(bound["limit"]) is int
    assert op.call(Shelf(), {"query": "a", "maxResults": 3.0}) == {"hits": ["alpha", "beta", "delta"], "tags": None}
    with pytest.raises(InvalidInput, match="maxResults: expected integer, got number"):
        op.bind({"query": "a", "maxResults": 2.5})


def test_call_runs_the_function_on_the_target() -> None:
    assert OPS["find"].call(Shelf(), {"query": "a", "order": "desc", "maxResults": 3}) == {
        "hits": ["gamma", "delta", "beta"], "tags": None}


def _cli(argv: list[str]) -> tuple[Any, dict[str, Any]]:
    parser = argparse.ArgumentParser(prog="t")
    sub = parser.add_subparsers(dest="command")
    add_subcommand(sub, OPS["find"])
    ns = parser.parse_args(argv)
    return ns.op, cli_args(ns.op, ns)


def test_cli_and_mcp_and_http_give_the_same_answer_and_the_same_error() -> None:
    op, args = _cli(["find", "a", "-n", "3", "--prefix", "--tags", "x", "--tags", "y"])
    assert args == {"query": "a", "maxResults": 3, "prefix": True, "tags": ["x", "y"]}
    via_cli = op.call(Shelf(), args, "cli")
    via_http = op.call(Shelf(), query_args(op, {"query": "a", "maxResults": "3", "prefix": "true", "tags": "x,y"}),
                       "http")
    tool = mcp_tool(op, lambda a, ctx: op.call(Shelf(), a))
    assert tool.name == "find-books" and tool.input_schema == op.input_schema()
    via_mcp = tool.handler({"query": "a", "maxResults": 3, "prefix": True, "tags": ["x", "y"]}, None)  # type: ignore[arg-type]
    assert via_cli == via_http == via_mcp == {"hits": ["alpha"], "tags": ["x", "y"]}

    validate = tool.validate
    assert validate is not None
    messages = []
    attempts: list[Any] = [lambda: op.call(Shelf(), _cli(["find", "a", "-n", "many"])[1], "cli"),
                           lambda: op.call(Shelf(), query_args(op, {"query": "a", "maxResults": "many"}), "http"),
                           lambda: validate({"query": "a", "maxResults": "many"})]
    for attempt in attempts:
        with pytest.raises(InvalidInput) as exc:
            attempt()
        messages.append(exc.value.message)
    assert messages == ["Invalid parameter for 'find': maxResults: expected integer, got string"] * 3


def test_openapi_lists_query_parameters_with_aliases() -> None:
    paths = openapi_paths(list(OPS))
    get = paths["/books"]["get"]
    names = [p["name"] for p in get["parameters"]]
    assert names == ["query", "maxResults", "prefix", "p", "order", "tags"]
    assert get["operationId"] == "find" and get["parameters"][0]["required"] is True


def test_a_parameter_without_annotation_or_an_unknown_param_is_a_declaration_error() -> None:
    reg = Registry("bad")
    with pytest.raises(TypeError, match="unknown arguments"):
        reg.op(params={"nope": {}})(find)

    def untyped(target, x):  # type: ignore[no-untyped-def]  # noqa: ANN001
        """No annotations."""

    reg.op()(untyped)
    with pytest.raises(TypeError, match="no annotation"):
        reg["untyped"].params


def test_cli_help_names_values_by_their_wire_name_not_the_internal_dest() -> None:
    parser = argparse.ArgumentParser(prog="t")
    help_text = add_subcommand(parser.add_subparsers(dest="command"), OPS["find"]).format_help()
    assert "-n MAXRESULTS, --limit MAXRESULTS" in help_text and "--tags TAGS" in help_text
    assert "OP_" not in help_text


def test_an_alias_satisfies_a_required_parameter() -> None:
    reg = Registry("alias")

    @reg.op(params={"index": {"aliases": ("i",)}})
    def pick(shelf: Shelf, index: int) -> str:
        """One book.

        :param index: its position
        """
        return shelf.books[index]

    op = reg["pick"]
    assert op.input_schema()["required"] == ["index"]
    assert op.call(Shelf(), {"i": 1}) == op.call(Shelf(), {"index": 1}) == "beta"
    with pytest.raises(InvalidInput) as exc:
        op.bind({"i": "one"})
    assert exc.value.message == "Invalid parameter for 'pick': index: expected integer, got string"
    with pytest.raises(InvalidInput, match="index: is required"):
        op.bind({})

def test_a_parameter_may_be_required_on_some_surfaces_only() -> None:
    """blz source-add: alias is required over MCP (the seed's schema), optional on the command line
    (`blz add --manifest FILE` names none)."""
    reg = Registry("surfaces")

    @reg.op(mcp="pick", cli="pick", http="GET /pick",
            params={"name": {"positional": True, "type": "string", "required": ("mcp", "http")},
                    "batch": {"surfaces": ("cli",)}})
    def pick(shelf: Shelf, name: str | None = None, batch: str | None = None) -> str:
        """One book, or a batch file.

        :param name: its title
        :param batch: a file of titles
        """
        return batch or str(name)

    op = reg["pick"]
    assert op.input_schema("mcp")["required"] == ["name"] and op.input_schema("http")["required"] == ["name"]
    assert "required" not in op.input_schema("cli")
    [param] = [p for p in op.params if p.name == "name"]
    assert (param.required, param.required_for("mcp"), param.required_for("cli")) == (False, True, False)
    with pytest.raises(InvalidInput, match="name: is required"):
        op.bind({}, "mcp")
    assert op.call(Shelf(), {"batch": "list.txt"}, "cli") == "list.txt"
    assert op.call(Shelf(), {}, "cli") == "None"
    parser = argparse.ArgumentParser(prog="t")
    add_subcommand(parser.add_subparsers(dest="command"), op)
    args = parser.parse_args(["pick", "--batch", "b.txt"])  # the positional may be left out
    assert cli_args(op, args) == {"batch": "b.txt"}
    assert openapi_paths([op])["/pick"]["get"]["parameters"][0]["required"] is True


# -- operations declared at run time by an explicit JSON Schema (a script's own parameters) ---------

SCRIPT_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["term"],
    "properties": {"term": {"type": "string", "description": "word to look for"},
                   "limit": {"type": "integer", "default": 5}, "exact": {"type": "boolean"}}}


def _script_op(**declaration: Any) -> Any:
    from cairn_servers.core.ops import Op

    def run(shelf: Shelf, args: dict[str, Any], *, note: str = "") -> dict[str, Any]:
        hits = [b for b in shelf.books if (b == args["term"] if args.get("exact") else args["term"] in b)]
        return {"hits": hits[:args["limit"]], "args": args, "note": note}

    return Op(run, name="mentions", mcp="mentions", cli="mentions", http="POST /tools/mentions",
              description="Books that mention a term.", schema=SCRIPT_SCHEMA, read_only=False, **declaration)


def test_an_explicit_schema_op_is_served_like_a_declared_one() -> None:
    op = _script_op()
    assert op.input_schema() is SCRIPT_SCHEMA and op.input_schema("http") is SCRIPT_SCHEMA
    assert [(p.name, p.required, p.default) for p in op.params] == [("term", True, None), ("limit", False, 5),
                                                                   ("exact", False, None)]
    assert op.description == op.summary == "Books that mention a term."
    # the handler gets the validated arguments as one dict, defaults filled in, plus the surface's context
    assert op.call(Shelf(), {"term": "a"}, note="n") == {
        "hits": ["alpha", "beta", "gamma", "delta"][:5], "args": {"term": "a", "limit": 5}, "note": "n"}
    parser = argparse.ArgumentParser(prog="t")
    add_subcommand(parser.add_subparsers(dest="command"), op)
    ns = parser.parse_args(["mentions", "--term", "et", "--limit", "1", "--exact"])
    assert cli_args(op, ns) == {"term": "et", "limit": 1, "exact": True}
    assert op.call(Shelf(), cli_args(op, ns), "cli")["hits"] == []
    assert op.call(Shelf(), query_args(op, {"term": "et", "limit": "1"}), "http")["hits"] == ["beta"]
    tool = mcp_tool(op, lambda a, ctx: op.call(Shelf(), a))
    assert tool.input_schema is SCRIPT_SCHEMA and tool.annotations == {
        "readOnlyHint": False, "destructiveHint": False, "openWorldHint": False}
    assert openapi_paths([op])["/tools/mentions"]["post"]["requestBody"]["content"]["application/json"][
        "schema"] is SCRIPT_SCHEMA
    messages = []
    validate = tool.validate
    assert validate is not None
    attempts: list[Any] = [lambda: op.bind({"limit": 2}), lambda: validate({"term": "a", "limit": "x"}),
                           lambda: op.call(Shelf(), query_args(op, {"term": "a", "colour": "red"}), "http")]
    for attempt in attempts:
        with pytest.raises(InvalidInput) as exc:
            attempt()
        messages.append((exc.value.message, exc.value.details))
    assert messages == [
        ("Invalid parameter for 'mentions': term: is required", {"operation": "mentions", "parameter": "term"}),
        ("Invalid parameter for 'mentions': limit: expected integer, got string",
         {"operation": "mentions", "parameter": "limit"}),
        ("Invalid parameter for 'mentions': colour: is not an allowed property (allowed: exact, limit, term)",
         {"operation": "mentions", "parameter": "colour"})]


def test_an_explicit_schema_must_be_an_object_schema_without_params() -> None:
    from cairn_servers.core.ops import Op

    with pytest.raises(TypeError, match="object schema"):
        Op(lambda t, a: a, name="x", schema={"type": "string"})
    with pytest.raises(TypeError, match="exclude each other"):
        Op(lambda t, a: a, name="x", schema=SCRIPT_SCHEMA, params={"term": {}})


def test_error_details_can_be_the_servers_own() -> None:
    """A server whose clients already read other keys (ctx: {"tool", "parameter"} with the full path)."""
    def details(op: str, field: str | None) -> dict[str, Any]:
        return {"tool": op, **({"parameter": field} if field else {})}

    op = _script_op(error_details=details)
    with pytest.raises(InvalidInput) as exc:
        op.bind({"term": "a", "limit": "x"})
    assert exc.value.details == {"tool": "mentions", "parameter": "limit"}
    with pytest.raises(InvalidInput) as exc:
        op.bind([1])
    assert exc.value.details == {"tool": "mentions"}
    from cairn_servers.core.ops import Op

    since = {"filters": {"properties": {"since": {"type": "string"}}}}
    with pytest.raises(InvalidInput) as exc:
        Op(_nested, params=since, error_details=details).bind({"filters": {"since": []}})
    assert exc.value.message == "Invalid parameter for '_nested': filters.since: expected string, got array"
    assert exc.value.details == {"tool": "_nested", "parameter": "filters.since"}
    with pytest.raises(InvalidInput) as exc:  # the default names the top-level parameter
        Op(_nested, params=since).bind({"filters": {"since": []}})
    assert exc.value.details == {"operation": "_nested", "parameter": "filters"}


def _nested(shelf: Shelf, filters: dict[str, Any] | None = None) -> Any:
    """Nested filters."""
    return filters
