"""The official MCP conformance suite (@modelcontextprotocol/conformance 0.1.16) against the fixture
server on ``cairn_servers.mcp`` served over streamable HTTP (stateful, so server-to-client requests work).

Every server scenario the suite lists runs in one ``conformance server --suite all`` invocation: the
active suite plus the two 0.1.16 keeps pending (json-schema-2020-12, server-sse-polling), which the
core passes too. Its per-scenario ``checks.json`` files are parsed here: a scenario passes only with
at least one SUCCESS check and no FAILURE or WARNING check (a scenario with 0 passed / 0 failed tested
nothing and fails). Scenarios listed in
``conformance-expected-failures.txt`` (one per line, ``name  # reason``) must fail; a listed scenario
that passes is a stale entry and fails the test, as the suite's own baseline check does.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
NODE_BIN = REPO / ".tools" / "node" / "node_modules" / ".bin"
CONFORMANCE = NODE_BIN / "conformance"
FIXTURE = Path(__file__).resolve().parent / "conformance_server.py"
EXPECTED_FAILURES = Path(__file__).resolve().parent / "conformance-expected-failures.txt"

pytestmark = [
    pytest.mark.node,
    pytest.mark.skipif(not (NODE_BIN / "node").exists() or not CONFORMANCE.exists(),
                       reason=f"project-local Node tools missing ({NODE_BIN}); run `make test` to install them"),
]


@dataclass
class Scenario:
    name: str
    checks: list[dict[str, Any]] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(1 for c in self.checks if c.get("status") == status)

    @property
    def ok(self) -> bool:
        return self.count("SUCCESS") > 0 and self.count("FAILURE") == 0 and self.count("WARNING") == 0

    def describe(self) -> str:
        lines = [f"{self.name}: {self.count('SUCCESS')} passed, {self.count('FAILURE')} failed, "
                 f"{self.count('WARNING')} warnings"]
        for c in self.checks:
            if c.get("status") in ("FAILURE", "WARNING"):
                lines.append(f"    {c['status']} {c.get('id')}: {c.get('errorMessage') or c.get('description')}")
        return "\n".join(lines)


def node_env() -> dict[str, str]:
    return dict(os.environ, PATH=f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_listening(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 20.0) -> None:
    """Readiness by TCP connect: a GET /mcp may open an SSE stream that never closes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"fixture server exited with {proc.returncode} before listening:\n{log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"fixture server did not listen on 127.0.0.1:{port} within {timeout} s:\n{log.read_text()}")


def read_expected_failures() -> dict[str, str]:
    """``{scenario: reason}`` from the expected-failures file (absent file: none expected)."""
    if not EXPECTED_FAILURES.exists():
        return {}
    out: dict[str, str] = {}
    for raw in EXPECTED_FAILURES.read_text().splitlines():
        name, _, reason = raw.partition("#")
        if name.strip():
            assert reason.strip(), f"{EXPECTED_FAILURES.name}: {name.strip()!r} needs a '# reason'"
            out[name.strip()] = reason.strip()
    return out


_TIMESTAMP = re.compile(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$")
_SUMMARY = re.compile(r"^[✓✗] (\S+): (\d+) passed, (\d+) failed$", re.MULTILINE)


def parse_results(out_dir: Path) -> dict[str, Scenario]:
    """Per-scenario checks from ``OUT/server-<scenario>-<timestamp>/checks.json``."""
    results: dict[str, Scenario] = {}
    for checks_file in sorted(out_dir.glob("server-*/checks.json")):
        name = _TIMESTAMP.sub("", checks_file.parent.name).removeprefix("server-")
        checks = json.loads(checks_file.read_text())
        assert isinstance(checks, list), f"{checks_file}: expected a JSON array of checks"
        assert name not in results, f"scenario {name} reported twice"
        results[name] = Scenario(name, checks)
    return results


def listed_scenarios() -> set[str]:
    proc = subprocess.run([str(CONFORMANCE), "list", "--server"], capture_output=True, text=True, timeout=30,
                          env=node_env())
    assert proc.returncode == 0, proc.stderr
    return set(re.findall(r"^\s+- (\S+)", proc.stdout, re.MULTILINE))


def run_suite(tmp_path: Path, *, stateless: bool) -> tuple[dict[str, Scenario], subprocess.CompletedProcess[str], str]:
    """Serve the fixture over HTTP, run every listed server scenario in one invocation, parse the results.

    Returns (results by scenario, the suite's process, a context string for assertion messages), after
    checking that the run covered every listed scenario and that its printed summary matches the files.
    """
    port = free_port()
    log = tmp_path / "server.log"
    cmd = [sys.executable, str(FIXTURE), "http", "--port", str(port)] + (["--stateless"] if stateless else [])
    with log.open("wb") as log_fh:
        server = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log_fh, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        wait_listening(port, server, log)
        out_dir = tmp_path / "results"
        suite = subprocess.run(
            [str(CONFORMANCE), "server", "--url", f"http://127.0.0.1:{port}/mcp", "--suite", "all",
             "-o", str(out_dir)],
            capture_output=True, text=True, timeout=100, env=node_env(), cwd=tmp_path)
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()

    results = parse_results(out_dir)
    summary = {m.group(1): (int(m.group(2)), int(m.group(3))) for m in _SUMMARY.finditer(suite.stdout)}
    context = f"\n--- suite stdout (tail) ---\n{suite.stdout[-3000:]}\n--- server log (tail) ---\n{log.read_text()[-3000:]}"
    assert results, f"the suite wrote no checks.json (exit {suite.returncode}){context}"
    assert set(summary) == set(results), f"summary {sorted(summary)} != checks files {sorted(results)}{context}"
    for name, (passed, failed) in summary.items():
        assert (passed, failed) == (results[name].count("SUCCESS"), results[name].count("FAILURE")), name
    missing = listed_scenarios() - set(results)
    assert not missing, f"the suite did not run these listed scenarios: {sorted(missing)}{context}"
    return results, suite, context


@pytest.mark.timeout(150)
def test_official_conformance_suite_every_server_scenario_passes(tmp_path: Path) -> None:
    results, suite, context = run_suite(tmp_path, stateless=False)
    expected = read_expected_failures()
    unknown = set(expected) - set(results)
    assert not unknown, f"expected-failures names scenarios the suite did not run: {sorted(unknown)}"
    unexpected = [s.describe() for name, s in sorted(results.items()) if not s.ok and name not in expected]
    stale = [name for name in sorted(expected) if results[name].ok]
    assert not unexpected, "conformance scenarios failed:\n" + "\n".join(unexpected) + context
    assert not stale, f"expected failures now pass; remove them from {EXPECTED_FAILURES.name}: {stale}"
    if not expected:
        assert suite.returncode == 0, f"suite exited {suite.returncode} although every scenario passed{context}"


# Stateless HTTP has no channel for server-to-client requests and issues no session id, by design.
STATELESS_LIMITS = {
    "tools-call-sampling": "needs a server-to-client request",
    "tools-call-elicitation": "needs a server-to-client request",
    "elicitation-sep1034-defaults": "needs a server-to-client request",
    "elicitation-sep1330-enums": "needs a server-to-client request",
    "server-sse-polling": "warns: no session id",
    "server-sse-multiple-streams": "warns: no session id",
}


@pytest.mark.timeout(150)
def test_conformance_suite_in_stateless_mode(tmp_path: Path) -> None:
    results, _, context = run_suite(tmp_path, stateless=True)
    broken = [s.describe() for name, s in sorted(results.items()) if not s.ok and name not in STATELESS_LIMITS]
    assert not broken, "conformance scenarios failed in stateless mode:\n" + "\n".join(broken) + context
    for name, why in STATELESS_LIMITS.items():
        got = results[name]
        assert not got.ok, f"{name} passed in stateless mode; update STATELESS_LIMITS"
        if why.startswith("warns"):  # everything else in these scenarios works without a session
            assert got.count("FAILURE") == 0 and got.count("WARNING") > 0, got.describe()
    # A tool needing the client gets a clear isError result, not a hang or a protocol error.
    (check,) = results["tools-call-sampling"].checks
    result = check["details"]["result"]
    assert result["isError"] is True
    assert "stateless" in result["content"][0]["text"] and "stateful" in result["content"][0]["text"]
