"""``${VAR}`` and ``${VAR:-default}`` in the string values of ``ctx.toml``.

Expansion runs on the parsed TOML, string by string (keys are never expanded), so a value from the
environment can never change the file's structure. ``${VAR}`` needs ``VAR`` set (empty is allowed);
``${VAR:-default}`` uses the default when ``VAR`` is unset or empty. The default is literal text up to
the next ``}``. ``$${`` is a literal ``${``; a ``$`` not followed by ``{`` is left alone.

Values that came from the environment are secrets until proven otherwise: the caller gets their key
paths (``ctx config show`` masks them) and the substituted values (masked in error messages and, via
``cairn_servers.core.sanitize.register_secret``, in everything scrubbed). Messages here never contain them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from cairn_servers.core.errors import InvalidInput
from cairn_servers.core.sanitize import MIN_SECRET

# "$${" (escape), or "${" up to the next "}" (or the end of the string: unclosed). Compiled on first
# use (re caches it): most configs have no reference, and `ctx search` start-up should not pay.
_TOKEN = r"\$\$\{|\$\{([^}]*)(\}?)"
_BODY = r"(?s)([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?"

KeyPath = tuple[str | int, ...]  # as cairn_servers.ctx.config.KeyPath (not imported from there: config imports us lazily)


class Expansion:
    """What expanding a document did: which values came from the environment, as what."""

    def __init__(self) -> None:
        # key path -> (the template as written, the expanded value) for strings that used the environment
        self.from_env: dict[KeyPath, tuple[str, str]] = {}
        # key path -> the template as written, for every string holding a reference (env or default)
        self.templated: dict[KeyPath, str] = {}
        # (key path, variable, value) for each value substituted from the environment, in order of use
        self.values: list[tuple[KeyPath, str, str]] = []

    def mask(self, message: str) -> str:
        """``message`` with every value taken from the environment written back as its ``${...}`` template."""
        for template, value in self.from_env.values():
            if value:
                message = message.replace(repr(value), repr(template))
        for _, name, value in sorted(self.values, key=lambda v: -len(v[2])):
            if len(value) >= MIN_SECRET:  # shorter ones would mangle the message; the repr pass caught them
                message = message.replace(value, "${" + name + "}")
        return message


def expand_document(data: dict[str, Any], file: Path, text: str | None,
                    environ: dict[str, str] | None = None) -> tuple[dict[str, Any], Expansion]:
    """A copy of ``data`` with every string expanded; raises ``InvalidInput`` naming the variable,
    the file, the line (when ``text``, the file's source, is given) and the key."""
    env = os.environ if environ is None else environ
    out = Expansion()

    def walk(value: Any, path: KeyPath) -> Any:
        if isinstance(value, str):
            return _expand(value, path, env, out, file, text)
        if isinstance(value, dict):
            return {k: walk(v, (*path, k)) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, (*path, i)) for i, v in enumerate(value)]
        return value

    return walk(data, ()), out


def _expand(value: str, path: KeyPath, env: Any, out: Expansion, file: Path, text: str | None) -> str:
    if "${" not in value:
        return value
    parts: list[str] = []
    used_env = referenced = False
    pos = 0
    for m in re.finditer(_TOKEN, value):
        parts.append(value[pos:m.start()])
        pos = m.end()
        if m.group(0) == "$${":
            parts.append("${")
            continue
        body, closed = m.group(1), m.group(2)
        ref = re.fullmatch(_BODY, body) if closed else None
        if ref is None:
            shown = "${" + body + ("}" if closed else "")
            raise _error(file, text, path, shown,
                         f"{shown} is not a valid reference: write ${{NAME}} or ${{NAME:-default}} (NAME is letters, "
                         "digits and '_'), and $${ for a literal ${")
        referenced = True
        name, default = ref.group(1), ref.group(2)
        current = env.get(name)
        if default is not None and not current:
            parts.append(default)
        elif current is None:
            raise _error(file, text, path, "${" + name + "}",
                         f"${{{name}}} is not set and has no default. Set {name} in the environment, "
                         f"or write ${{{name}:-default}}")
        else:
            parts.append(current)
            out.values.append((path, name, current))
            used_env = True
    parts.append(value[pos:])
    expanded = "".join(parts)
    if referenced:
        out.templated[path] = value
    if used_env:
        out.from_env[path] = (value, expanded)
    return expanded


def describe(path: KeyPath) -> str:
    """``[server] auth_token`` for ``("server", "auth_token")``; list indexes are left out."""
    names = [str(p) for p in path if isinstance(p, str)]
    if len(names) <= 1:
        return names[0] if names else "(top level)"
    return f"[{'.'.join(names[:-1])}] {names[-1]}"


def _error(file: Path, text: str | None, path: KeyPath, token: str, reason: str) -> InvalidInput:
    key = describe(path)
    line = _line_of(text, token, next((p for p in reversed(path) if isinstance(p, str)), "")) if text else None
    where = f"{file}:{line}" if line else str(file)
    details: dict[str, Any] = {"file": str(file), "key": key}
    if line:
        details["line"] = line
    return InvalidInput(f"{where}: {key}: {reason}.", details=details)


def _line_of(text: str, token: str, key: str) -> int | None:
    """The 1-based line of ``token`` (not escaped, not in a comment line), preferring the line of ``key``."""
    pattern = re.compile(r"(?<!\$)" + re.escape(token))
    key_start = re.compile(r"""\s*(?:"|')?""" + re.escape(key) + r"""(?:"|')?\s*=""")
    first: int | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#") or not pattern.search(line):
            continue
        if key_start.match(line):
            return number
        if first is None:
            first = number
    return first
