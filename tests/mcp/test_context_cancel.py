"""ToolContext cancellation is a flag, with an Event made only for a handler that waits (h-blzfind):
cancelled before, during and after a wait, from another thread, it is seen every time."""

from __future__ import annotations

import threading
import time

from cairn_servers.mcp.context import ToolContext


class _Channel:
    client_info: dict[str, object] = {}
    client_capabilities: dict[str, object] = {}
    protocol_version = None

    def send_notification(self, *args: object, **kwargs: object) -> None:
        return None


def _ctx() -> ToolContext:
    return ToolContext(_Channel(), 1, "tools/call", {}, None)  # type: ignore[arg-type]


def test_cancel_before_a_wait_is_seen_at_once() -> None:
    ctx = _ctx()
    assert not ctx.cancelled and not ctx.wait_cancelled(0)
    ctx._cancel("stop")
    assert ctx.cancelled and ctx.cancel_reason == "stop"
    t0 = time.monotonic()
    assert ctx.wait_cancelled(5)
    assert time.monotonic() - t0 < 1


def test_cancel_wakes_every_waiting_thread() -> None:
    for _ in range(200):  # races between making the Event and cancelling
        ctx = _ctx()
        woke: list[bool] = []
        waiters = [threading.Thread(target=lambda: woke.append(ctx.wait_cancelled(10))) for _ in range(3)]
        for w in waiters:
            w.start()
        ctx._cancel(None)
        for w in waiters:
            w.join(10)
        assert woke == [True, True, True]


def test_a_wait_times_out_when_nothing_cancels() -> None:
    ctx = _ctx()
    t0 = time.monotonic()
    assert ctx.wait_cancelled(0.05) is False
    assert time.monotonic() - t0 >= 0.04 and not ctx.cancelled
