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


def test_xdist_workers_build_a_shared_artefact_once(tmp_path: Path) -> None:
    """`make test` runs on pytest-xdist workers: two workers asking for one ``shared_artefact`` at the same
    time get the same folder, built by one of them while the other waited on the file lock."""
    (tmp_path / "conftest.py").write_text(
        "import os, time\nimport pytest\nfrom tests._workers import WORKER, shared_artefact\n\n"
        "@pytest.fixture(scope='session')\ndef artefact(tmp_path_factory):\n"
        "    def build(folder):\n"
        "        with open(os.environ['SHARE_LOG'], 'a') as log:\n            log.write(WORKER + '\\n')\n"
        "        time.sleep(1.0)  # the other worker asks meanwhile\n"
        "        (folder / 'out').mkdir()\n        (folder / 'out' / 'x').write_text('built')\n"
        "        return folder / 'out'\n"
        "    return shared_artefact(tmp_path_factory, 'thing', build)\n")
    for name in ("a", "b"):
        (tmp_path / f"test_{name}.py").write_text(
            "import os\n\ndef test_it(artefact):\n    assert (artefact / 'x').read_text() == 'built'\n"
            f"    open(os.environ['SHARE_LOG'] + '.{name}', 'w').write(os.environ['PYTEST_XDIST_WORKER'] + ' ' + str(artefact))\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    log = tmp_path / "built.log"
    # plain pytest with xdist alone: each of the three processes skips ~1 s of other plugins' imports
    env = dict(os.environ, PYTHONPATH=str(REPO), SHARE_LOG=str(log), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "xdist", "-n", "2",
                          "--dist", "loadfile",
                          f"--basetemp={tmp_path / 'tmp'}", str(tmp_path)],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180)
    assert res.returncode == 0 and "2 passed" in res.stdout, res.stdout + res.stderr
    assert len(log.read_text().split()) == 1, log.read_text()  # built once
    (worker_a, path_a), (worker_b, path_b) = (Path(f"{log}.{n}").read_text().split(" ", 1) for n in "ab")
    assert {worker_a, worker_b} == {"gw0", "gw1"} and path_a == path_b == str(tmp_path / "tmp" / "shared-thing" / "out")


def test_make_test_runs_on_one_worker_per_core_and_test_serial_in_one_process() -> None:
    makefile = (REPO / "Makefile").read_text()
    rules = {name: makefile[makefile.index(f"\n{name}:"):].split("\n\n")[0] for name in ("test", "test-serial", "test-random")}
    assert re.search(r"(?m)^JOBS \?= \$\(shell nproc\b", makefile) and "-n $(JOBS) --dist loadfile" in makefile
    assert "$(XDIST)" in rules["test"] and "-p no:xdist" in rules["test-serial"], rules
    assert "-n $(JOBS)" in rules["test-random"] and "--random-order-seed=$(SEED)" in rules["test-random"], rules
    assert "make test" in (REPO / ".ci" / "run").read_text()
    pins = (REPO / "constraints.txt").read_text()
    assert re.search(r"(?m)^pytest-xdist==[\d.]+$", pins) and re.search(r"(?m)^filelock==[\d.]+$", pins)
    assert '"pytest-xdist>=' in (REPO / "pyproject.toml").read_text()
