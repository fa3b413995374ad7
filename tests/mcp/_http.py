"""Test helpers: serve an ASGI app with uvicorn on a free 127.0.0.1 port in a thread; parse SSE bodies."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from typing import Any, Iterator


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(app: Any, path: str = "/mcp") -> Iterator[str]:
    """Run ``app`` on a real uvicorn server; yields ``http://127.0.0.1:PORT`` + ``path``."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}{path}"
    finally:
        server.should_exit = True
        thread.join(10)


def sse_events(text: str) -> list[dict[str, str]]:
    """Split an SSE body into events ({'id', 'event', 'data', 'retry'} as present)."""
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        if not block.strip() or block.startswith(":"):
            continue
        event: dict[str, str] = {}
        for line in block.split("\n"):
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "data":
                event["data"] = event["data"] + "\n" + value if "data" in event else value
            elif field in ("id", "event", "retry"):
                event[field] = value
        events.append(event)
    return events


def sse_messages(text: str) -> list[dict[str, Any]]:
    return [json.loads(e["data"]) for e in sse_events(text) if e.get("data")]
