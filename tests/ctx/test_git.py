from __future__ import annotations

from pathlib import Path

import pytest

from cairn_servers.ctx.connectors.git import web_url
from cairn_servers.ctx.service import Service

from .conftest import config_file, git, make_repo, write

pytestmark = pytest.mark.usefixtures("ctx_backend")  # every test on SQLite and on PostgreSQL


def service(tmp_path: Path, url: str, extra: str = "") -> Service:
    return Service.from_config(config_file(tmp_path, f"""
[db]
path = "kb.sqlite"
[connectors.git.handbook]
url = "{url}"
cache_dir = "{tmp_path / 'cache'}"
{extra}
"""))


def docs(svc: Service) -> dict[str, tuple[str, str | None, int]]:
    rows = svc.store.sql("SELECT source_id, body, author, updated_at FROM documents")
    return {sid: (body, author, ts) for sid, body, author, ts in rows}


def test_shallow_clone_over_file_url_with_commit_metadata(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "origin", {
        "README.md": "# Handbook\n\nWelcome aboard.\n",
        "policies/leave.md": "# Leave\n\nTwenty days of paid leave per year.\n",
        "bin/tool.sh": "echo not indexed\n",
    })
    write(repo, {"policies/leave.md": "# Leave\n\nTwenty-five days of paid leave per year.\n"})
    git(repo, "commit", "-qam", "more leave", when="2024-06-01T09:30:00Z")

    svc = service(tmp_path, f"file://{repo}")
    report = svc.sync("git").sources[0]
    assert report.ok, report.error
    got = docs(svc)
    assert set(got) == {"README.md", "policies/leave.md"}
    assert got["policies/leave.md"][1] == "Ada Lovelace"
    # Shallow: only the tip commit exists, so every file carries its time.
    assert got["policies/leave.md"][2] == 1717234200  # 2024-06-01T09:30:00Z
    checkout = next((tmp_path / "cache").iterdir())
    assert (checkout / ".git" / "shallow").exists()
    assert svc.search("paid leave")[0].updated_at == "2024-06-01T09:30:00Z"


def test_full_history_gives_per_file_last_commit(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "origin", {"a.md": "# A\n\nfirst", "b.md": "# B\n\nsecond"},
                     when="2023-01-01T00:00:00Z")
    write(repo, {"b.md": "# B\n\nsecond, edited"})
    git(repo, "commit", "-qam", "edit b", when="2023-02-01T00:00:00Z")
    svc = service(tmp_path, str(repo), "shallow = false")  # a plain local path works too
    svc.sync("handbook")
    got = docs(svc)
    assert got["a.md"][2] == 1672531200
    assert got["b.md"][2] == 1675209600


def test_fetch_applies_changes_and_deletions(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "origin", {"keep.md": "# Keep\n\nstays", "gone.md": "# Gone\n\nremoved later"})
    svc = service(tmp_path, f"file://{repo}")
    svc.sync("all")
    git(repo, "rm", "-q", "gone.md")
    write(repo, {"new.md": "# New\n\narrived", "keep.md": "# Keep\n\nstays, changed"})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "second", when="2024-05-05T00:00:00Z")
    report = svc.sync("all").sources[0]
    assert (report.added, report.updated, report.deleted) == (1, 1, 1)
    assert set(docs(svc)) == {"keep.md", "new.md"}
    assert svc.sync("all").sources[0].unchanged == 2  # blob hashes unchanged -> nothing re-read


def test_branch_root_and_globs(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "origin", {"docs/x.md": "# X\n\nmain branch"})
    git(repo, "checkout", "-q", "-b", "release")
    write(repo, {"docs/x.md": "# X\n\nrelease branch", "docs/y.rst": "Y\n=\n\nrst file", "other/z.md": "# Z"})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "release", when="2024-01-01T00:00:00Z")
    svc = service(tmp_path, f"file://{repo}", 'branch = "release"\nroot = "docs"\ninclude_globs = ["**/*.md", "*.rst"]')
    svc.sync("all")
    got = docs(svc)
    assert set(got) == {"x.md", "y.rst"}
    assert "release branch" in got["x.md"][0]


def test_bad_url_fails_cleanly_and_never_echoes_credentials(tmp_path: Path) -> None:
    url = f"file://user:hunter2@{tmp_path}/missing-repo"
    svc = service(tmp_path, url)
    report = svc.sync("all").sources[0]
    assert not report.ok
    assert "hunter2" not in (report.error or "") and "git clone" in (report.error or "")
    status = svc.sources()[0]
    assert not status.healthy and "hunter2" not in (status.error or "")
    assert all("hunter2" not in p.name for p in (tmp_path / "cache").glob("*"))


def test_web_url_strips_credentials() -> None:
    assert web_url("https://tok:x@github.com/o/r.git", "main", "a/b.md") == "https://github.com/o/r/blob/main/a/b.md"
    assert web_url("file:///srv/r", "main", "a.md") is None
