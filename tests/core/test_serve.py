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


def test_connection_limits_from_the_environment() -> None:
    from cairn_servers.core.connections import Limits, limits_from_env

    assert limits_from_env("CTX", {}) == Limits(idle_timeout=5.0, read_timeout=30.0, max_connections=1000)
    assert limits_from_env("BRK", {"BRK_HTTP_IDLE_TIMEOUT": "0.5", "BRK_HTTP_READ_TIMEOUT": " 12 ",
                                   "BRK_HTTP_MAX_CONNECTIONS": "64", "CTX_HTTP_IDLE_TIMEOUT": "9"}) == \
        Limits(idle_timeout=0.5, read_timeout=12.0, max_connections=64)
    for var, value, kind in (("CTX_HTTP_IDLE_TIMEOUT", "0", "a number of seconds"),
                             ("CTX_HTTP_IDLE_TIMEOUT", "nan", "a number of seconds"),
                             ("CTX_HTTP_READ_TIMEOUT", "inf", "a number of seconds"),
                             ("CTX_HTTP_MAX_CONNECTIONS", "1e3", "a whole number of connections"),
                             ("CTX_HTTP_MAX_CONNECTIONS", "0", "a whole number of connections")):
        with pytest.raises(InvalidInput) as info:
            limits_from_env("CTX", {var: value})
        assert str(info.value).startswith(f"{var}={value!r} is not valid: give {kind} greater than 0, such as ")


def test_the_open_file_limit_is_raised_to_fit_the_cap_or_the_cap_lowered() -> None:
    """In a child process: a soft limit below the cap is raised up to the hard limit; a hard limit too
    low for the cap brings the cap down to what fits (256 descriptors kept for everything else)."""
    import subprocess
    import sys

    code = (
        "import resource\n"
        "from cairn_servers.core.connections import Limits, fit_descriptors\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (300, 5000))\n"
        "print(fit_descriptors(Limits(max_connections=1000)).max_connections, "
        "resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (300, 400))\n"
        "print(fit_descriptors(Limits(max_connections=1000)).max_connections, "
        "resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.split("\n")[:2] == ["1000 1256", "144 400"], out
