"""cairn.core.ops: one declaration gives the schema, the validation message, the CLI and OpenAPI."""

from __future__ import annotations

import argparse
from typing import Any, Literal

import pytest

from cairn.core.errors import InvalidInput
from cairn.core.ops import Registry, add_subcommand, annotation_schema, cli_args, mcp_tool, openapi_paths, query_args

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
