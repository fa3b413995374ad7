"""Diagnostics on stderr for the servers: ``--log-level`` or ``$BLZ_LOG`` / ``$CTX_LOG`` / ``$BRK_LOG``.

Levels: ``error``, ``warn`` (the default), ``info`` (start-up and shutdown), ``debug`` (also every
request: its method, tool name and duration), and ``off``; ``warning`` = ``warn`` and ``trace`` =
``debug``. Lines go to stderr only (stdout carries JSON-RPC on stdio servers), one per call::

    2026-11-23T09:40:00.123Z DEBUG blz: tools/call find (id 3) ok 1.24 ms

One level per process, set once by the command that starts a server. Standard library only and no
``logging`` import (it costs start-up time on the stdio servers' path); writes are serialised by a lock.
"""

from __future__ import annotations

import os
import sys
import threading
import time

ERROR, WARN, INFO, DEBUG = 40, 30, 20, 10
OFF = 100
NAMES = {"off": OFF, "error": ERROR, "warn": WARN, "warning": WARN, "info": INFO, "debug": DEBUG, "trace": DEBUG}
_LABEL = {ERROR: "ERROR", WARN: "WARN", INFO: "INFO", DEBUG: "DEBUG"}

level = WARN
name = "cairn"
_lock = threading.Lock()


def parse_level(text: str, source: str = "--log-level") -> int:
    """A level name (case-insensitive) as a number; a clear ``InvalidInput`` for anything else."""
    value = NAMES.get(text.strip().lower())
    if value is None:
        from cairn_servers.core.errors import InvalidInput

        raise InvalidInput(f"Unknown log level {text!r} (from {source}). "
                           "Use one of: error, warn, info, debug, or off.")
    return value


def configure(flag: str | None, env_var: str, server: str) -> int:
    """Set this process's level from the flag, else ``$env_var``, else ``warn``; returns it."""
    global level, name
    name = server
    if flag:
        level = parse_level(flag)
    elif os.environ.get(env_var, "").strip():
        level = parse_level(os.environ[env_var], f"${env_var}")
    else:
        level = WARN
    return level


def enabled(at: int) -> bool:
    return level <= at


def write(at: int, message: str) -> None:
    """One line on stderr when ``at`` is enabled (never raises: a closed stderr drops the line)."""
    if level > at:
        return
    from cairn_servers.core.sanitize import mask_secrets  # config secrets never reach a log line

    message = mask_secrets(message)
    now = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"
    line = f"{stamp} {_LABEL.get(at, 'DEBUG')} {name}: {message}\n"
    with _lock:
        try:
            sys.stderr.write(line)
            sys.stderr.flush()
        except (OSError, ValueError, AttributeError):
            pass


def error(message: str) -> None:
    write(ERROR, message)


def warn(message: str) -> None:
    write(WARN, message)


def info(message: str) -> None:
    write(INFO, message)


def debug(message: str) -> None:
    write(DEBUG, message)


def describe(msg: object) -> str:
    """A JSON-RPC message in a few words: ``tools/call find (id 3)``, ``notifications/initialized``."""
    if isinstance(msg, list):
        return f"batch of {len(msg)}"
    if not isinstance(msg, dict):
        return "invalid message"
    method = msg.get("method")
    text = str(method) if isinstance(method, str) else ("response" if "id" in msg else "invalid message")
    params = msg.get("params")
    if isinstance(params, dict):
        target = params.get("name") if method in ("tools/call", "prompts/get") else params.get("uri")
        if isinstance(target, str):
            text += f" {target[:80]}"
    if "id" in msg and isinstance(method, str):
        text += f" (id {str(msg['id'])[:40]})"
    return text


def outcome(reply: object) -> str:
    """``ok``, ``error -32602`` or ``tool error`` for a reply (``no reply`` for notifications)."""
    if reply is None:
        return "no reply"
    if isinstance(reply, list):
        return f"{len(reply)} replies"
    if isinstance(reply, dict):
        if "error" in reply:
            err = reply["error"]
            return f"error {err.get('code')}" if isinstance(err, dict) else "error"
        result = reply.get("result")
        if isinstance(result, dict) and result.get("isError"):
            return "tool error"
    return "ok"
