"""The cancel check of :mod:`cairn_servers.core.deadline`: what the stores see, and the watcher that cancels
a running statement (PostgreSQL) never after the statement has ended."""

from __future__ import annotations

import threading
import time

import pytest

from cairn_servers.core import deadline
from cairn_servers.core.errors import Cancelled, Timeout


def test_passed_and_check_see_the_cancel_check_only_inside_the_block() -> None:
    gone = threading.Event()
    assert not deadline.passed()
    with deadline.cancellable(gone.is_set):
        assert not deadline.passed() and not deadline.cancelled()
        deadline.check()
        gone.set()
        assert deadline.passed() and deadline.cancelled()
        with pytest.raises(Cancelled):
            deadline.check()
    assert not deadline.passed() and not deadline.cancelled() and deadline.cancel_check() is None


def test_a_failure_after_the_caller_gave_up_is_cancelled_and_other_failures_stay_themselves() -> None:
    gone = threading.Event()
    with pytest.raises(ValueError):
        with deadline.cancellable(gone.is_set):
            raise ValueError("a real error")
    with pytest.raises(Cancelled) as caught:
        with deadline.cancellable(gone.is_set):
            gone.set()
            raise RuntimeError("interrupted")  # what SQLite raises once the progress handler says stop
    assert caught.value.http_status == 499 and caught.value.code == "cancelled"


def test_nested_checks_combine_and_a_deadline_still_times_out() -> None:
    outer, inner = threading.Event(), threading.Event()
    with deadline.cancellable(outer.is_set), deadline.cancellable(inner.is_set):
        outer.set()
        assert deadline.cancelled()
    with pytest.raises(Timeout):
        with deadline.cancellable(lambda: False):
            with deadline.bounded(time.monotonic() + 0.05, "The test"):
                while True:
                    deadline.check()


def test_on_cancel_stops_a_running_block_once_and_never_after_it_ended() -> None:
    gone = threading.Event()
    stops: list[float] = []
    with deadline.cancellable(gone.is_set):
        with deadline.on_cancel(lambda: stops.append(time.monotonic())):
            time.sleep(0.2)
        assert stops == []  # not cancelled while it ran
        with deadline.on_cancel(lambda: stops.append(time.monotonic())):
            pass
        gone.set()
        time.sleep(4 * deadline.WATCH_EVERY)
        assert stops == []  # the block had ended: nothing to stop (a pooled connection is someone else's now)
    gone.clear()
    with deadline.cancellable(gone.is_set):
        with deadline.on_cancel(lambda: stops.append(time.monotonic())):
            started = time.monotonic()
            threading.Timer(0.1, gone.set).start()
            while not stops and time.monotonic() - started < 5:
                time.sleep(0.01)
            time.sleep(4 * deadline.WATCH_EVERY)
        assert len(stops) == 1 and stops[0] - started < 2.0, stops
        with pytest.raises(Cancelled):  # a new statement does not start once the caller has gone
            with deadline.on_cancel(lambda: None):
                pass
    # outside a cancellable block nothing is watched
    with deadline.on_cancel(lambda: stops.append(0.0)):
        pass
    assert len(stops) == 1
