"""A local price source for the refresh tests: Kraken's OHLC answer served on 127.0.0.1, or a server
that accepts connections and never answers."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def kraken_body(first: dt.date, days: int, close: Any) -> bytes:
    """Kraken's ``OHLC`` JSON for ``days`` days from ``first``; ``close(i)`` gives day i's price."""
    rows = []
    for i in range(days):
        day = first + dt.timedelta(days=i)
        ts = int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.timezone.utc).timestamp())
        c = f"{close(i):.2f}"
        rows.append([ts, c, c, c, c, c, "1.0", 1])
    return json.dumps({"error": [], "result": {"XXBTZUSD": rows, "last": rows[-1][0]}}).encode()


@contextlib.contextmanager
def kraken(body: bytes) -> Iterator[tuple[str, list[str]]]:
    """Serve ``body`` on 127.0.0.1; yields the URL and the list of paths requested so far."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            seen.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/0/public/OHLC", seen
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def silent() -> Iterator[str]:
    """A listening socket that never accepts: connections succeed (the backlog) and no answer ever comes."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/0/public/OHLC"
    finally:
        sock.close()


def closed_url() -> str:
    """A URL on a 127.0.0.1 port nothing listens on (connection refused)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}/0/public/OHLC"
