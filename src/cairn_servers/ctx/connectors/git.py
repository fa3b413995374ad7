"""The git connector: a repository URL (https, ssh, file://, or a local path) checked out on a branch.

The repository is cloned once into a cache directory (shallow by default) and fetched on every
sync. Files come from ``git ls-tree`` at the fetched commit; the fingerprint is the blob hash, so an
unchanged file costs nothing. Each document carries its last commit's time and author. git runs
through ``subprocess`` with an argument list (never a shell), with prompts disabled; credentials in
the URL are scrubbed from every message, from ``source_url`` and from the cache directory's name.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

from cairn_servers.core.errors import NetworkError, StorageError
from cairn_servers.core.paths import cache_dir
from cairn_servers.core.sanitize import scrub
from cairn_servers.ctx.config import ConnectorConfig
from cairn_servers.ctx.connectors.base import Entry, Item, Matcher, Skips, file_cap, file_item, register, too_big

GIT_TIMEOUT = 600.0


def _is_local(url: str) -> bool:
    return "://" not in url and not ("@" in url.split("/")[0] and ":" in url)


def web_url(url: str, branch: str, path: str) -> str | None:
    """A browsable URL for ``path`` on an http(s) remote (credentials removed), else None."""
    if not url.startswith(("https://", "http://")):
        return None
    scheme, rest = url.split("://", 1)
    host_path = rest.split("@", 1)[1] if "@" in rest.split("/", 1)[0] else rest
    host_path = host_path.rstrip("/")
    if host_path.endswith(".git"):
        host_path = host_path[:-4]
    return f"{scheme}://{host_path}/blob/{branch}/{path}"


class GitConnector(Skips):
    def __init__(self, config: ConnectorConfig) -> None:
        super().__init__()
        self.config = config
        o = config.options
        self.url: str = o["url"]
        self.branch: str = o["branch"]
        self.root = o["root"].strip("/") if o["root"] not in (".", "./", "") else ""
        self.shallow: bool = o["shallow"]
        self.max_bytes = int(o["max_file_bytes"])
        self.max_doc_bytes = int(o.get("max_document_bytes", self.max_bytes))
        self.matcher = Matcher(o["include_globs"], o["exclude_globs"])
        digest = hashlib.sha256(self.url.encode("utf-8")).hexdigest()[:12]
        base = Path(o["cache_dir"]) if o.get("cache_dir") else cache_dir("ctx", "CTX_CACHE_DIR") / "git"
        self.checkout = base / f"{config.name}-{digest}"

    # ---- git plumbing ------------------------------------------------------------------------

    def _git(self, *args: str, cwd: Path | None = None) -> str:
        env = dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="", SSH_ASKPASS="", LC_ALL="C")
        cmd = ["git", "-c", "core.quotepath=off", "-c", "advice.detachedHead=false", *args]
        try:
            proc = subprocess.run(
                cmd, cwd=cwd, env=env, capture_output=True, timeout=GIT_TIMEOUT, stdin=subprocess.DEVNULL
            )
        except FileNotFoundError:
            raise StorageError("git is not installed or not on PATH; install git to use git connectors.") from None
        except subprocess.TimeoutExpired:
            raise NetworkError(f"{self.config.source}: git {args[0]} took over {GIT_TIMEOUT:.0f} s.") from None
        if proc.returncode != 0:
            err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            detail = scrub(" ".join(err[-3:])) if err else f"exit status {proc.returncode}"
            raise NetworkError(
                f"{self.config.source}: git {args[0]} of {scrub(self.url)} (branch {self.branch}) failed: {detail}"
            )
        return proc.stdout.decode("utf-8", "replace")

    def _remote(self) -> str:
        if _is_local(self.url):
            path = os.path.abspath(os.path.expanduser(self.url))
            # A plain local path ignores --depth; file:// makes shallow clones work locally too.
            return "file://" + path if self.shallow else path
        return self.url

    def update(self) -> str:
        """Clone or fetch, check out the branch tip; returns its commit hash."""
        depth = ["--depth", "1"] if self.shallow else []
        if not (self.checkout / ".git").is_dir():
            tmp = self.checkout.with_name(self.checkout.name + ".partial")
            if tmp.exists():
                import shutil

                shutil.rmtree(tmp)
            tmp.parent.mkdir(parents=True, exist_ok=True)
            self._git("clone", "--quiet", *depth, "--branch", self.branch, "--single-branch", "--", self._remote(), str(tmp))
            os.replace(tmp, self.checkout)  # a clone killed halfway never looks like a finished one
        else:
            self._git("fetch", "--quiet", *depth, "origin", self.branch, cwd=self.checkout)
            self._git("checkout", "--quiet", "--force", "FETCH_HEAD", cwd=self.checkout)
        return self._git("rev-parse", "HEAD", cwd=self.checkout).strip()

    def _commit_info(self) -> dict[str, tuple[int, str]]:
        """Path -> (last commit time, author) for files under root, newest commit first wins."""
        out = self._git(
            "log", "--no-renames", "--format=%x01%ct%x02%an", "--name-only", "HEAD", "--",
            self.root or ".", cwd=self.checkout,
        )
        info: dict[str, tuple[int, str]] = {}
        current = (0, "")
        for line in out.splitlines():
            if line.startswith("\x01"):
                ts, _, author = line[1:].partition("\x02")
                current = (int(ts or 0), author)
            elif line and line not in info:
                info[line] = current
        return info

    # ---- scanning ----------------------------------------------------------------------------

    def scan(self) -> Iterator[Entry]:
        self.reset()
        self.update()
        listing = self._git("ls-tree", "-r", "-l", "-z", "HEAD", "--", *( [self.root + "/"] if self.root else []), cwd=self.checkout)
        prefix = self.root + "/" if self.root else ""
        info: dict[str, tuple[int, str]] | None = None

        def commit_info(path: str) -> tuple[int, str]:
            nonlocal info
            if info is None:
                info = self._commit_info()
            return info.get(path, (0, ""))

        for record in listing.split("\0"):
            if not record:
                continue
            meta, _, path = record.partition("\t")
            mode, kind, blob, size = meta.split()
            if kind != "blob" or mode in ("120000", "160000") or not path.startswith(prefix):
                if kind == "blob":
                    self.skipped += 1
                continue
            rel = path[len(prefix) :]
            if not self.matcher(rel):
                continue
            cap = file_cap(rel, self.max_bytes, self.max_doc_bytes)
            if size.isdigit() and too_big(self, rel, int(size), cap):
                continue
            yield Entry(rel, blob, self._loader(path, rel, commit_info, cap))

    def _loader(self, path: str, rel: str, commit_info: Callable[[str], tuple[int, str]],
                cap: tuple[int, str]) -> Callable[[], Item | None]:
        def load() -> Item | None:
            try:
                with open(self.checkout / path, "rb") as f:
                    data = f.read(cap[0] + 1)
            except OSError:
                return None
            if too_big(self, rel, len(data), cap):
                return None
            ts, author = commit_info(path)
            return file_item(
                data,
                rel,
                self,
                author=author or None,
                updated_at=ts or None,
                source_url=web_url(self.url, self.branch, path),
                metadata={"repo": scrub(self.url), "branch": self.branch, "path": path},
            )

        return load


register("git", GitConnector)
