from __future__ import annotations

import pytest

from cairn.core.errors import InvalidInput
from cairn.core.serve import is_loopback, parse_bind, serve


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
