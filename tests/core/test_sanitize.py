from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.core import sanitize


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
