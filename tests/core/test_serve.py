from __future__ import annotations

from pathlib import Path

import pytest

from cairn_servers.core.errors import InvalidInput
from cairn_servers.core.serve import is_loopback, parse_bind, serve


@pytest.mark.parametrize(
    ("bind", "expected"),
    [
        ("127.0.0.1:7331", ("127.0.0.1", 7331)),
        ("localhost", ("localhost", 9)),
        (":8080", ("127.0.0.1", 8080)),
        ("[::1]:3110", ("::1", 3110)),
        ("[::1]", ("::1", 9)),
    ],
)
def test_parse_bind(bind: str, expected: tuple[str, int]) -> None:
    assert parse_bind(bind, 9) == expected


@pytest.mark.parametrize("bind", ["host:port", "1.2.3.4:99999", "[::1", "[::1]x"])
def test_parse_bind_errors(bind: str) -> None:
    with pytest.raises(InvalidInput):
        parse_bind(bind, 9)


def test_loopback() -> None:
    assert is_loopback("127.0.0.2") and is_loopback("::1") and is_loopback("LOCALHOST")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5") and not is_loopback("example.com")


def test_remote_bind_needs_explicit_permission() -> None:
    with pytest.raises(InvalidInput, match="Refusing to bind demo to 0.0.0.0"):
        serve(object(), "0.0.0.0", 1, name="demo")


def test_sigterm_and_sigint_stop_a_server_cleanly(tmp_path: Path) -> None:
    import signal
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = (
        "from starlette.applications import Starlette\n"
        "from cairn_servers.core.serve import serve\n"
        f"serve(Starlette(), '127.0.0.1', {port}, name='t')\n"
    )
    for sig in (signal.SIGTERM, signal.SIGINT):
        proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, (sig, err)
        assert "Traceback" not in err and "KeyboardInterrupt" not in err
