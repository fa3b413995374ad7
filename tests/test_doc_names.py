"""The docs name nothing that is gone: every environment variable they mention is read by the code
(src, tests or benchmarks), and every ``cairn.…`` name they cite imports (a module, or an attribute of one)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]
CODE = [p for folder in ("src", "tests", "benchmarks") for p in (REPO / folder).rglob("*.py")]


def _mentions(pattern: str) -> set[str]:
    return {m for doc in DOCS for m in re.findall(pattern, doc.read_text(encoding="utf-8"))}


def test_every_variable_in_the_docs_is_read_by_the_code() -> None:
    code = "\n".join(p.read_text(encoding="utf-8") for p in CODE)
    named = _mentions(r"\b(?:BLZ|CTX|BRK|CAIRN)_[A-Z_]*[A-Z]\b")
    assert "BLZ_DATA_DIR" in named and "CTX_OUTPUT_FORMAT" in named  # the pattern finds them
    assert sorted(v for v in named if v not in code) == []


@pytest.mark.parametrize("name", sorted(_mentions(r"\bcairn_servers(?:\.[A-Za-z_][A-Za-z0-9_]*)+")))
def test_every_cairn_name_in_the_docs_exists(name: str) -> None:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            assert hasattr(obj, attr), f"{name}: {'.'.join(parts[:cut])} has no {attr!r}"
            obj = getattr(obj, attr)
        return
    pytest.fail(f"{name} does not import")


def test_every_source_and_test_file_the_docs_name_exists() -> None:
    paths = _mentions(r"\b(?:src/)?cairn_servers/[A-Za-z0-9_/]+\.py\b") | _mentions(r"\b(?:tests|benchmarks)/[A-Za-z0-9_/]+\.py\b")
    assert "cairn_servers/core/serve.py" in paths or "src/cairn_servers/core/serve.py" in paths  # the patterns find them
    missing = [p for p in paths if not (REPO / p).exists() and not (REPO / "src" / p).exists()]
    assert sorted(missing) == []


def test_every_test_the_docs_cite_exists() -> None:
    code = "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "tests").rglob("test_*.py"))
    cited = {m.split("::")[1] for m in _mentions(r"\btest_\w+\.py::test_\w+\*?")}
    assert len(cited) > 20
    missing = [name for name in cited if not re.search(
        r"def " + (re.escape(name[:-1]) + r"\w*" if name.endswith("*") else re.escape(name) + r"\b"), code)]
    assert sorted(missing) == []
