from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn_servers.core import sanitize


@pytest.fixture(autouse=True)
def _clean_roots() -> Iterator[None]:
    sanitize.clear_roots()
    yield
    sanitize.clear_roots()


def test_home_becomes_tilde() -> None:
    home = os.path.expanduser("~")
    assert sanitize.scrub(f"see {home}/docs/x.txt") == "see ~/docs/x.txt"
    assert sanitize.scrub(f"{home}fs/x") == f"{home}fs/x"  # not a path component of home


def test_data_root_placeholder_wins_over_home(tmp_path: Path) -> None:
    sanitize.register_root(tmp_path, "<data>")
    assert sanitize.scrub(f"file {tmp_path}/a/b.txt") == "file <data>/a/b.txt"


def test_url_credentials_masked() -> None:
    assert sanitize.scrub("clone https://user:s3cret@github.com/o/r.git") == "clone https://***@github.com/o/r.git"
    assert sanitize.scrub("https://ghp_token@host/x") == "https://***@host/x"
    assert sanitize.scrub("mail me at a@b.org") == "mail me at a@b.org"


def test_scrub_obj_recurses() -> None:
    home = os.path.expanduser("~")
    assert sanitize.scrub_obj({"p": [f"{home}/x", 3]}) == {"p": ["~/x", 3]}


def test_registered_secrets_are_masked_here_and_in_child_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    monkeypatch.delenv(sanitize.SECRET_ENV, raising=False)
    monkeypatch.setenv("CAIRN_T_SECRET", "s3cr3t-value-xyz")
    sanitize.clear_secrets()
    try:
        sanitize.register_secret("short")  # under MIN_SECRET: would mask unrelated words
        sanitize.register_secret_env("CAIRN_T_SECRET")
        assert sanitize.scrub("short key s3cr3t-value-xyz!") == "short key ***!"
        assert os.environ[sanitize.SECRET_ENV] == "CAIRN_T_SECRET"  # the name travels, not the value
        code = "from cairn_servers.core.sanitize import scrub; print(scrub('got s3cr3t-value-xyz'))"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        assert out == "got ***\n"
    finally:
        sanitize.clear_secrets()


def test_the_credentials_precheck_never_skips_a_match() -> None:
    """scrub() runs the URL-credentials regex only where some "://" has an "@" after it before the next
    whitespace (h-blzfind): on generated texts it masks exactly what the regex alone masks."""
    import random

    rng = random.Random(16)
    pieces = ["://", "@", ":", "/", " ", "\n", "\u00a0", "\u2028", "http", "https", "a", "s3", "+", ".", "-", "x" * 40,
              "user", "pw", "file", "é", "\"", "<", "9", "", "@@", ":/", "//", "http://", "u:p@", "tok@"]
    seen = 0
    for _ in range(8000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        expected = sanitize._URL_CREDENTIALS.sub(r"\1***@", text)
        assert sanitize._may_hold_credentials(text) or expected == text, text
        assert sanitize.scrub(text) == expected, text  # no root, secret or home directory in these texts
        seen += expected != text
    assert seen > 200  # the generated texts do hold credentials


@pytest.mark.parametrize("dsn, shown", [
    ("postgresql://u:S3cret@host:5432/db", "postgresql://u:***@host:5432/db"),
    ("postgresql://u:ret@PW@host/db", "postgresql://u:***@host/db"),  # a raw "@": nothing of it shown
    ("postgresql://u:a/b@c@host/db", "postgresql://u:***@host/db"),
    ("postgresql://tok3n@host/db", "postgresql://***@host/db"),
    ("postgresql://host/db?sslmode=require&password=S3cret", "postgresql://host/db?sslmode=require&password=***"),
    ("postgresql://host/db", "postgresql://host/db"),
    ("host=x password=S3cret", "host=x password=***"),
    ("host=x password='a b' user=y", "host=x password=*** user=y"),
    ("password = 'it\\'s S3cret' dbname=d", "password = *** dbname=d"),
    ("host=x password='never closed S3cret", "host=x password=***"),
    ("host=x PASSWORD=S3cret sslpassword=K3y", "host=x PASSWORD=*** sslpassword=***"),
])
def test_mask_dsn_hides_every_form_of_password(dsn: str, shown: str) -> None:
    assert sanitize.mask_dsn(dsn) == shown


def test_scrub_masks_a_password_with_a_raw_at_whole() -> None:
    assert sanitize.scrub("url postgresql://u:ret@PW@host/db ok") == "url postgresql://***@host/db ok"
    assert sanitize.scrub('{"u": "http://a:b@c/", "mail": "x@y"}') == '{"u": "http://***@c/", "mail": "x@y"}'
