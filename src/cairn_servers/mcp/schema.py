"""A small JSON Schema validator (the subset MCP tool schemas use), standard library only.

Covers type (integer vs number, bool is neither, null, type lists), properties, required,
additionalProperties, patternProperties, enum, const, minimum/maximum/exclusiveMinimum/exclusiveMaximum,
multipleOf, minLength/maxLength, pattern, items/prefixItems, minItems/maxItems, uniqueItems,
minProperties/maxProperties, anyOf/oneOf/allOf/not, local ``$ref`` (``#/...``). ``default``, ``format``,
``title``, ``description`` and unknown keywords are ignored. Messages name the field path:
``"filters.tags[2]: expected string, got integer"``.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the stdio servers' start-up path
if TYPE_CHECKING:
    from typing import Any

if TYPE_CHECKING:
    Schema = dict[str, Any] | bool
else:  # run time: no typing import
    Schema = dict | bool


class SchemaError(ValueError):
    """The instance does not satisfy the schema; ``str(exc)`` names the field and the rule."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


def validate(instance: Any, schema: Schema, root: str = "") -> None:
    """Raise ``SchemaError`` naming the first violation, or return ``None`` when ``instance`` is valid."""
    error = _check(instance, schema, root, schema if isinstance(schema, dict) else {})
    if error is not None:
        raise error


def type_name(value: Any) -> str:
    """The JSON type of a Python value, as a schema would name it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _is_type(value: Any, name: str) -> bool:
    actual = type_name(value)
    if name == "number":
        return actual in ("integer", "number")
    return actual == name


def _json_eq(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but true != 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_eq(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_eq(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _show(value: Any, limit: int = 60) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


@lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _resolve(ref: str, root: dict[str, Any]) -> Schema:
    if not ref.startswith("#"):
        raise SchemaError("", f"unsupported $ref {ref!r} (only local '#/...' references are supported)")
    node: Any = root
    for part in ref[1:].split("/")[1:] if ref != "#" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        else:
            raise SchemaError("", f"$ref {ref!r} does not resolve")
    return node  # type: ignore[no-any-return]


def _check(value: Any, schema: Schema, path: str, root: dict[str, Any]) -> SchemaError | None:  # noqa: C901
    if schema is True or schema == {}:
        return None
    if schema is False:
        return SchemaError(path, "no value is allowed here")
    if not isinstance(schema, dict):
        return None
    if "$ref" in schema:
        try:
            target = _resolve(schema["$ref"], root)
        except SchemaError as exc:
            return SchemaError(path, str(exc))
        err = _check(value, target, path, root)
        if err is not None:
            return err

    expected = schema.get("type")
    if expected is not None:
        names = expected if isinstance(expected, list) else [expected]
        if not any(_is_type(value, n) for n in names):
            want = " or ".join(names)
            return SchemaError(path, f"expected {want}, got {type_name(value)}")

    if "const" in schema and not _json_eq(value, schema["const"]):
        return SchemaError(path, f"must be {_show(schema['const'])}")
    if "enum" in schema and not any(_json_eq(value, e) for e in schema["enum"]):
        allowed = ", ".join(_show(e, 30) for e in schema["enum"])
        return SchemaError(path, f"{_show(value)} is not one of {allowed}")

    if isinstance(value, (int, float)) and not isinstance(value, bool):
        err = _check_number(value, schema, path)
        if err is not None:
            return err
    elif isinstance(value, str):
        err = _check_string(value, schema, path)
        if err is not None:
            return err
    elif isinstance(value, list):
        err = _check_array(value, schema, path, root)
        if err is not None:
            return err
    elif isinstance(value, dict):
        err = _check_object(value, schema, path, root)
        if err is not None:
            return err

    for sub in schema.get("allOf", ()):
        err = _check(value, sub, path, root)
        if err is not None:
            return err
    if "anyOf" in schema:
        errors = [_check(value, sub, path, root) for sub in schema["anyOf"]]
        if all(e is not None for e in errors):
            return errors[0] if len(errors) == 1 else SchemaError(path, f"{_show(value)} matches none of the allowed forms ({_first_reason(errors)})")
    if "oneOf" in schema:
        errors = [_check(value, sub, path, root) for sub in schema["oneOf"]]
        matches = sum(e is None for e in errors)
        if matches == 0:
            return SchemaError(path, f"{_show(value)} matches none of the allowed forms ({_first_reason(errors)})")
        if matches > 1:
            return SchemaError(path, f"{_show(value)} matches more than one of the exclusive forms (oneOf)")
    if "not" in schema and _check(value, schema["not"], path, root) is None:
        return SchemaError(path, f"{_show(value)} is not allowed here")
    return None


def _first_reason(errors: list[SchemaError | None]) -> str:
    for e in errors:
        if e is not None:
            return str(e)
    return ""


def _check_number(value: float, schema: dict[str, Any], path: str) -> SchemaError | None:
    v = _show(value)
    if "minimum" in schema and value < schema["minimum"]:
        return SchemaError(path, f"{v} is less than the minimum of {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        return SchemaError(path, f"{v} is greater than the maximum of {schema['maximum']}")
    low = schema.get("exclusiveMinimum")
    if isinstance(low, (int, float)) and not isinstance(low, bool) and value <= low:
        return SchemaError(path, f"{v} must be greater than {low}")
    high = schema.get("exclusiveMaximum")
    if isinstance(high, (int, float)) and not isinstance(high, bool) and value >= high:
        return SchemaError(path, f"{v} must be less than {high}")
    step = schema.get("multipleOf")
    if isinstance(step, (int, float)) and step > 0:
        quotient = value / step
        if not (isinstance(quotient, float) and quotient.is_integer()) and not (isinstance(quotient, int)):
            return SchemaError(path, f"{v} is not a multiple of {step}")
    return None


def _check_string(value: str, schema: dict[str, Any], path: str) -> SchemaError | None:
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:  # a "\ud800" escape: no UTF-8 form, so no file, database or regex takes it
            return SchemaError(path, f"contains a lone UTF-16 surrogate ({value[exc.start]!r} at position {exc.start}); "
                                     "send valid Unicode text")
    if "minLength" in schema and len(value) < schema["minLength"]:
        return SchemaError(path, f"{_show(value)} is shorter than {schema['minLength']} characters")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        return SchemaError(path, f"{_show(value)} is longer than {schema['maxLength']} characters")
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        try:
            ok = _regex(pattern).search(value) is not None
        except re.error:
            ok = True  # an unsupported pattern dialect is the schema author's problem, not the caller's
        if not ok:
            return SchemaError(path, f"{_show(value)} does not match the pattern {pattern!r}")
    return None


def _check_array(value: list[Any], schema: dict[str, Any], path: str, root: dict[str, Any]) -> SchemaError | None:
    if "minItems" in schema and len(value) < schema["minItems"]:
        return SchemaError(path, f"has {len(value)} items, fewer than the minimum of {schema['minItems']}")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        return SchemaError(path, f"has {len(value)} items, more than the maximum of {schema['maxItems']}")
    prefix = schema.get("prefixItems")
    items = schema.get("items")
    if isinstance(items, list):  # draft-07 tuple form
        prefix, items = items, schema.get("additionalItems")
    start = 0
    if isinstance(prefix, list):
        for i, (item, sub) in enumerate(zip(value, prefix)):
            err = _check(item, sub, f"{path}[{i}]", root)
            if err is not None:
                return err
        start = len(prefix)
    if items is not None:
        for i in range(start, len(value)):
            err = _check(value[i], items, f"{path}[{i}]", root)
            if err is not None:
                return err
    if schema.get("uniqueItems") is True:
        for i in range(len(value)):
            for j in range(i):
                if _json_eq(value[i], value[j]):
                    return SchemaError(path, f"items {j} and {i} are equal; items must be unique")
    return None


def _check_object(value: dict[str, Any], schema: dict[str, Any], path: str, root: dict[str, Any]) -> SchemaError | None:
    for name in schema.get("required", ()):
        if name not in value:
            return SchemaError(_join(path, name), "is required")
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        return SchemaError(path, f"has fewer than {schema['minProperties']} properties")
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        return SchemaError(path, f"has more than {schema['maxProperties']} properties")
    props: dict[str, Any] = schema.get("properties") or {}
    patterns: dict[str, Any] = schema.get("patternProperties") or {}
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        matched = False
        if key in props:
            matched = True
            err = _check(item, props[key], _join(path, key), root)
            if err is not None:
                return err
        for pattern, sub in patterns.items():
            try:
                hit = _regex(pattern).search(key) is not None
            except re.error:
                continue
            if hit:
                matched = True
                err = _check(item, sub, _join(path, key), root)
                if err is not None:
                    return err
        if not matched:
            if extra is False:
                known = ", ".join(sorted(props)) or "none"
                return SchemaError(_join(path, key), f"is not an allowed property (allowed: {known})")
            if isinstance(extra, dict):
                err = _check(item, extra, _join(path, key), root)
                if err is not None:
                    return err
    return None
