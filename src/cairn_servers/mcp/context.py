"""``ToolContext``: what a tool handler can do besides returning a result.

Progress and log notifications, cancellation, and server-to-client requests (sampling, elicitation,
roots), all routed through the session and the sender of the request being handled.
"""

from __future__ import annotations

import threading

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the stdio servers' start-up path
if TYPE_CHECKING:
    from typing import Any, Callable, Protocol

if TYPE_CHECKING:
    Sender = Callable[[dict[str, Any]], None]
else:  # run time: no typing import
    from collections.abc import Callable as Sender

if TYPE_CHECKING:
    class Channel(Protocol):
        """What a ``ToolContext`` needs from its session, and what a handler may read of it
        (``ctx.session``); ``cairn_servers.mcp.session.Session`` is one. A Protocol so that this module stays
        below the session that imports it (tests/test_import_cycles.py)."""

        @property
        def client_info(self) -> dict[str, Any]: ...
        @property
        def client_capabilities(self) -> dict[str, Any]: ...
        @property
        def protocol_version(self) -> str | None: ...

        def send_notification(self, method: str, params: dict[str, Any] | None, send: Sender | None,
                              related: Any = None) -> None: ...

        def log(self, level: str, data: Any, logger: str | None = None, send: Sender | None = None,
                related: Any = None) -> None: ...

        def send_request(self, method: str, params: dict[str, Any] | None, send: Sender | None,
                         timeout: float = 60.0, related: Any = None) -> dict[str, Any]: ...


_EVENTS = threading.Lock()  # creating a context's Event against cancelling it


class ToolContext:
    """Per-request context handed to tool handlers (and available to resource/prompt handlers)."""

    def __init__(self, session: Channel, request_id: Any, method: str, params: dict[str, Any],
                 send: Sender | None) -> None:
        self.session = session
        self.request_id = request_id
        self.method = method
        meta = params.get("_meta")
        self.meta: dict[str, Any] = meta if isinstance(meta, dict) else {}
        token = self.meta.get("progressToken")
        valid = isinstance(token, str) or (isinstance(token, int) and not isinstance(token, bool))
        self.progress_token: str | int | None = token if valid else None
        self._send = send
        # Cancellation: a flag, and an Event only once someone waits (a warm blz find is ~0.5 ms; an
        # Event per request, a Condition and two locks, was ~1% of it, for the rare waiting handler).
        self._cancelled = False
        self._event: threading.Event | None = None
        self.cancel_reason: str | None = None
        # End the HTTP SSE stream carrying this request now (the client reconnects with Last-Event-ID and
        # gets the rest); a no-op on transports without one.
        self.close_stream: Callable[[], None] = getattr(send, "close_stream", None) or (lambda: None)

    @property
    def cancelled(self) -> bool:
        """True once the client sent notifications/cancelled for this request."""
        return self._cancelled

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Block up to ``timeout`` seconds for a cancellation; True if cancelled."""
        with _EVENTS:  # _cancel sets the flag, then looks for an Event under this lock: one of them sees the other
            event = self._event
            if event is None:
                event = self._event = threading.Event()
                if self._cancelled:
                    event.set()
        return event.wait(timeout)

    def _cancel(self, reason: str | None) -> None:
        self.cancel_reason = reason
        self._cancelled = True
        with _EVENTS:
            event = self._event
        if event is not None:
            event.set()

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Send a notification related to this request (on its stream, where the transport has one)."""
        self.session.send_notification(method, params, self._send, related=self.request_id)

    def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """notifications/progress for this request; a no-op without ``_meta.progressToken``."""
        if self.progress_token is None:
            return
        params: dict[str, Any] = {"progressToken": self.progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        self.notify("notifications/progress", params)

    def log(self, level: str, data: Any, logger: str | None = None) -> None:
        """notifications/message at ``level``, sent only at or above the session's logging/setLevel."""
        self.session.log(level, data, logger, self._send, related=self.request_id)

    def request(self, method: str, params: dict[str, Any] | None = None, timeout: float = 60.0) -> dict[str, Any]:
        """Send a request to the client (e.g. ``sampling/createMessage``) and wait for its result.

        Raises ``cairn_servers.core.errors.InvalidInput`` where the transport cannot carry it (stateless HTTP),
        ``Timeout`` after ``timeout`` seconds, and ``CairnError`` when the client answers with an error.
        """
        return self.session.send_request(method, params, self._send, timeout=timeout, related=self.request_id)
