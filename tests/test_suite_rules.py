"""Rules the suite enforces on itself: test data ships with the repository, and a skip for missing data fails."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

from ._data import DATA, is_data_skip

REPO = Path(__file__).resolve().parents[1]
BESIDE_THE_REPO = re.compile(r"REPO\.parent|parents\[\d\]\.parent|\.\./\w+/data\b")


def test_test_data_is_materialised_with_its_layout(test_data: Path) -> None:
    assert (test_data / "llms" / "react-dev" / "llms-full.txt").read_bytes().startswith(b"# React Documentation\n")
    assert (test_data / "btc" / "hadoopcryptoledger" / "firstblocks.blk").read_bytes()[:4] == bytes.fromhex("f9beb4d9")
    assert not list(test_data.rglob("*.xz")) and not (test_data / "README.md").exists()
    shipped = {p.relative_to(DATA).as_posix().removesuffix(".xz") for p in DATA.rglob("*") if p.is_file()} - {"README.md"}
    assert shipped == {p.relative_to(test_data).as_posix() for p in test_data.rglob("*") if p.is_file()}


def test_readme_names_every_data_file_with_its_checksum(test_data: Path) -> None:
    """tests/data/README.md names each file's origin and licence, with the size and sha256 it was collected with."""
    rows = {m[0]: m for m in re.findall(r"(?m)^\| `([^`]+)` \|(?:[^|\n]*\|)? ([\d,]+) \| `([0-9a-f]{16})…` \|", (DATA / "README.md").read_text())}
    for path in DATA.rglob("*"):
        if path.is_file() and path.name != "README.md" and "LICENSE" not in path.name and path.name != "manifest.json.xz":
            rel = path.relative_to(DATA).as_posix()
            assert rel in rows, f"{rel} is not in tests/data/README.md"
            data = (test_data / rel.removesuffix(".xz")).read_bytes()
            assert len(data) == int(rows[rel][1].replace(",", "")), rel
            assert hashlib.sha256(data).hexdigest().startswith(rows[rel][2]), rel
    for rel in rows:
        assert (DATA / rel).is_file(), f"tests/data/README.md names {rel}, which is not there"
    assert (DATA / "btc" / "manifest.json.xz").is_file() and "`btc/manifest.json.xz`" in (DATA / "README.md").read_text()


def test_no_test_reads_a_folder_beside_the_repository() -> None:
    for path in [*(REPO / "tests").rglob("*.py"), *(REPO / "benchmarks").glob("*.py")]:
        if path == Path(__file__).resolve():
            continue
        # Any path above the checkout: REPO.parent, parents[N].parent, or a relative "../NAME/data".
        assert not BESIDE_THE_REPO.search(path.read_text()), path


def test_data_skip_reasons_are_recognised() -> None:
    for reason in ("the sibling data folder is not present beside this clone", "test data missing", "corpus not found"):
        assert is_data_skip(reason), reason
    for reason in ("headless Chromium is not installed (apt-get install -y chromium)", "no mount command",
                   "project-local Node tools missing (/r/.tools/node/node_modules/.bin); run `make test` to install them"):
        assert not is_data_skip(reason), reason


def test_a_skip_for_missing_data_fails_the_run(tmp_path: Path) -> None:
    """Regression (issue 12): 33 tests skipped in a fresh clone because a data folder beside it was absent and the
    run still passed. Such a skip now fails, at run time and at collection; other skips stay skips."""
    (tmp_path / "conftest.py").write_text("from tests.conftest import pytest_make_collect_report, pytest_runtest_makereport\n")
    (tmp_path / "test_run.py").write_text(
        "import pytest\n\n"
        "def test_needs_data():\n    pytest.skip('the test data is not present')\n\n"
        "@pytest.mark.skipif(True, reason='corpus missing')\ndef test_marked():\n    pass\n\n"
        "def test_needs_a_browser():\n    pytest.skip('headless Chromium is not installed')\n\n"
        "def test_fine():\n    pass\n")
    (tmp_path / "test_module.py").write_text("import pytest\n\npytest.skip('data missing', allow_module_level=True)\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")  # plain pytest starts fast
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider",
                          "--continue-on-collection-errors", str(tmp_path)],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert "1 failed, 1 passed, 1 skipped, 2 errors" in out, out  # a skipif fails at setup: an error
    assert out.count("skipped for missing test data") >= 3 and "SKIPPED [1] test_run.py" in out, out


def test_the_tests_are_type_checked_strictly_too() -> None:
    """Issue 14: `make typecheck` (and so `make test`) runs strict mypy over tests/ as well as src/cairn_servers,
    and no test module is exempt from strictness."""
    makefile = (REPO / "Makefile").read_text()
    rule = makefile[makefile.index("\ntypecheck:"):].split("\n\n")[0]
    assert re.search(r"-m mypy src/cairn_servers tests\b", rule), rule
    pyproject = (REPO / "pyproject.toml").read_text()
    mypy = pyproject[pyproject.index("[tool.mypy]"):]
    assert "strict = true" in mypy
    overridden = re.findall(r"module = \[([^\]]*)\]", mypy)
    assert not [m for m in overridden if "tests" in m], overridden  # third-party stubs only
