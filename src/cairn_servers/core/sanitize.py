"""Scrub what a client sees: no absolute home paths, no data roots, no credentials in URLs, no secrets.

Servers register their data roots once (``register_root(data_dir, "<blz-data>")``); every string
that leaves through MCP, HTTP or ``run-command`` output then passes through :func:`scrub`. Secrets
read from the environment into a config (``register_secret``) are masked there and in log lines.
"""

from __future__ import annotations

import os
import re

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the stdio servers' start-up path
if TYPE_CHECKING:
    from typing import Any

_roots: dict[str, str] = {}
_secrets: dict[str, str] = {}
_by_length: list[tuple[str, str]] | None = None  # _roots, longest first (made again after a change)
_generation = 0  # bumped whenever what scrub() replaces changes
# scheme://user:password@host or scheme://token@host -> scheme://***@host. The scheme is bounded so
# a long run of letters costs linear time (unbounded, 200 KB of "a" took 28 s to scrub). The user
# info runs to the LAST "@" before a "/", a quote or whitespace: a password with a raw "@"
# (u:ret@PW@host) is masked whole, not cut at its first "@".
_URL_CREDENTIALS = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]{0,31}://)[^/\s\"'<>]*@")


def register_root(path: str | os.PathLike[str], placeholder: str) -> None:
    """Show ``path`` (and anything under it) as ``placeholder`` in scrubbed output."""
    resolved = os.path.realpath(os.fspath(path))
    _roots[resolved] = placeholder
    _roots[os.path.abspath(os.fspath(path))] = placeholder
    _changed()


def clear_roots() -> None:
    """Forget every registered root (tests)."""
    _roots.clear()
    _changed()


def _changed() -> None:
    global _by_length, _generation
    _by_length = None
    _generation += 1


def generation() -> int:
    """A number that changes whenever a root or secret is registered or forgotten: what :func:`scrub`
    makes of a string is the same while it (and ``$HOME``) stays the same (callers cache on it)."""
    return _generation


def has_secrets() -> bool:
    """Whether any secret is registered (masked wherever it occurs, even across JSON values)."""
    return bool(_secrets)


# Secrets shorter than this are not masked in free text: "main" or "1" would mask unrelated words.
MIN_SECRET = 6
# Names (not values) of environment variables holding secrets; child processes (the Lua workers)
# inherit it and mask the same values in what they write.
SECRET_ENV = "CAIRN_SECRET_ENV"


def register_secret(value: str, placeholder: str = "***") -> None:
    """Show ``value`` as ``placeholder`` in scrubbed output and log lines (if ``MIN_SECRET`` long)."""
    if len(value) >= MIN_SECRET:
        _secrets[value] = placeholder
        _changed()


def register_secret_env(name: str) -> None:
    """The value of ``$name`` is a secret, here and in child processes started after this call."""
    register_secret(os.environ.get(name, ""))
    names = [n for n in os.environ.get(SECRET_ENV, "").split(",") if n]
    if name not in names:
        os.environ[SECRET_ENV] = ",".join([*names, name])


def clear_secrets() -> None:
    """Forget every registered secret (tests)."""
    _secrets.clear()
    _changed()


for _name in os.environ.get(SECRET_ENV, "").split(","):  # secrets our parent process registered
    if _name:
        register_secret(os.environ.get(_name, ""))


def mask_secrets(text: str) -> str:
    """``text`` with every registered secret replaced by its placeholder (longest first)."""
    for secret in sorted(_secrets, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, _secrets[secret])
    return text


def _may_hold_credentials(text: str) -> bool:
    """Whether ``_URL_CREDENTIALS`` can match in ``text``: a match holds no whitespace and has an "@"
    after its "://", so some "@" must have a "://" before it with no whitespace between (the nearest
    one decides). A few ``find`` calls per "@" instead of the regex trying a scheme at every letter."""
    at = text.find("@")
    while at != -1:
        scheme = text.rfind("://", 0, at)
        if scheme != -1 and re.compile(r"\s").search(text, scheme + 3, at) is None:  # re caches it
            return True
        at = text.find("@", at + 1)
    return False


def mask_dsn(dsn: str) -> str:
    """A database URL or connection string, safe to print: every password in it shown as ``***``.

    The one masking function for connection strings (ctx's ``[db] url`` / ``$CTX_DATABASE_URL``, brk's
    ``--rpc-url``), for the three forms a password takes:

    - URL user info, ``postgresql://user:secret@host/db`` -> ``postgresql://user:***@host/db``; the user
      info runs to the last ``@`` (a raw ``@`` in the password, ``u:ret@PW@host``, is masked whole, and
      so is a raw ``/`` before it);
    - a ``password=`` (or ``sslpassword=``) query parameter, ``...?password=secret&x=1``;
    - libpq's keyword form, ``host=x password=secret`` or ``password = 'a b\\' c'`` (quoted, with
      backslash escapes; an unterminated quote is masked to the end).

    Over-masking is preferred to a leak: a URL whose user info cannot be told from its path loses
    more than the password, never less.
    """
    out = dsn
    scheme = re.match(r"[a-zA-Z][a-zA-Z0-9+.-]{0,31}://", out)
    if scheme is not None:
        at = out.rfind("@", scheme.end())
        if at != -1:
            info = out[scheme.end():at]
            user, colon, _ = info.partition(":")
            shown = user if colon and not re.search(r"[/?#\s]", user) else "***"
            out = out[:scheme.end()] + (f"{shown}:***" if colon and shown != "***" else "***") + out[at:]
        out = re.sub(r"(?i)([?&](?:ssl)?password=)[^&#]*", r"\1***", out)
    # Keyword form (also as a fallback inside anything else): key = value, the value quoted or bare.
    return re.sub(r"(?i)(^|[\s;])((?:ssl)?password\s*=\s*)(?:'(?:[^'\\]|\\.)*(?:'|\\?$)|\S*)",
                  r"\1\2***", out)


def scrub(text: str) -> str:
    """``text`` with secrets and credentials in URLs masked, data roots replaced and ``$HOME`` shown as ``~``."""
    if _secrets:
        text = mask_secrets(text)
    if "@" in text and _may_hold_credentials(text):  # the regex costs ~60 instructions a character
        text = _URL_CREDENTIALS.sub(r"\1***@", text)
    # Longest roots first so a nested root wins over its parent.
    roots = _by_length  # one read: another thread may reset it meanwhile
    for root, placeholder in roots if roots is not None else _order_roots():
        text = _replace_path(text, root, placeholder)
    home = os.path.expanduser("~")
    if home and home != os.sep:
        text = _replace_path(text, home, "~")
    return text


def _order_roots() -> list[tuple[str, str]]:
    global _by_length
    _by_length = [(root, _roots[root]) for root in sorted(_roots, key=len, reverse=True) if root and root != os.sep]
    return _by_length


def _replace_path(text: str, path: str, placeholder: str) -> str:
    # Only whole path components: "/root" must not turn "/rootfs" into "~fs".
    if path not in text:
        return text
    return re.sub(re.escape(path) + r"(?![\w.-])", lambda _: placeholder, text)


def scrub_obj(value: Any) -> Any:
    """:func:`scrub` applied to every string inside dicts, lists and tuples."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {k: scrub_obj(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub_obj(v) for v in value]
    return value
