"""``ctx.toml``: load, validate (unknown keys and bad values fail with file, key and reason), defaults.

Location: ``--config`` flag > ``$CTX_CONFIG`` > ``./config/ctx.toml``. Relative paths inside the
file (``[db] path``, connector ``root``, script ``path``, git ``cache_dir``) resolve against the
directory that holds the config file, so ``ctx`` behaves the same from any working directory.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cairn.core.errors import InvalidInput, NotFound

DEFAULT_CONFIG = Path("config") / "ctx.toml"
DEFAULT_INCLUDE = ["**/*.md", "**/*.txt"]
CONNECTOR_TYPES = ("filesystem", "git", "script")
MODES = ("keyword", "semantic", "hybrid")


@dataclass(frozen=True)
class DbConfig:
    path: Path


@dataclass(frozen=True)
class ChunkingConfig:
    max_tokens: int = 400
    overlap_tokens: int = 40


@dataclass(frozen=True)
class RetrievalConfig:
    hybrid_alpha: float = 0.6
    candidate_k_keyword: int = 80
    candidate_k_vector: int = 80
    final_limit: int = 12
    # rrf measured better than the reference's min-max blend on tests/ctx/test_quality.py
    # (recall@5 0.91 vs 0.82 at alpha 0.6, equal MRR); "minmax" restores the reference's behaviour.
    fusion: str = "rrf"


@dataclass(frozen=True)
class EmbeddingConfig:
    provider: str = "disabled"
    model: str = ""
    dims: int = 0
    batch_size: int = 256
    url: str = ""
    api_key_env: str = ""
    timeout: float = 30.0


LOOPBACK_ORIGINS = ("http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*")
# "*", or scheme://host[:port] with no path; the port may be "*" (any port, or none).
_ORIGIN = re.compile(r"\*|[a-z][a-z0-9+.-]*://(\[[0-9a-f:.]+\]|[a-z0-9_.~%-]+)(:(\d{1,5}|\*))?", re.IGNORECASE)


@dataclass(frozen=True)
class ServerConfig:
    bind: str = "127.0.0.1:7331"
    auth_token: str = field(default="", repr=False)  # $CTX_AUTH_TOKEN wins over the file
    # Browser origins that may read the API through CORS. Loopback pages only by default (":*" is any
    # port); "*" lets every website the user visits read the knowledge base and call its tools. [] is off.
    cors_origins: tuple[str, ...] = LOOPBACK_ORIGINS


@dataclass(frozen=True)
class ConnectorConfig:
    """One named connector instance; ``options`` holds its type-specific, validated keys."""

    type: str
    name: str
    options: dict[str, Any]

    @property
    def source(self) -> str:
        """The source label stored on documents and used by filters: ``type:name``."""
        return f"{self.type}:{self.name}"


@dataclass(frozen=True)
class ToolConfig:
    name: str
    path: Path
    timeout: float
    config: dict[str, Any]


@dataclass(frozen=True)
class Config:
    path: Path
    db: DbConfig
    chunking: ChunkingConfig = ChunkingConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    embedding: EmbeddingConfig = EmbeddingConfig()
    server: ServerConfig = ServerConfig()
    connectors: list[ConnectorConfig] = field(default_factory=list)
    tools: list[ToolConfig] = field(default_factory=list)


def resolve_path(flag: str | os.PathLike[str] | None) -> Path:
    """The config file to use: flag, else ``$CTX_CONFIG``, else ``./config/ctx.toml``."""
    if flag:
        return Path(flag).expanduser()
    env = os.environ.get("CTX_CONFIG")
    if env:
        return Path(env).expanduser()
    return DEFAULT_CONFIG


# ---- validation helpers -----------------------------------------------------------------------


class _Reader:
    def __init__(self, file: Path, section: str, table: Any) -> None:
        self.file = file
        self.section = section
        if not isinstance(table, dict):
            self.fail(None, f"must be a table, not {type(table).__name__}")
        self.table: dict[str, Any] = table

    def fail(self, key: str | None, reason: str) -> None:
        where = f"[{self.section}]" + (f" {key}" if key else "")
        raise InvalidInput(f"{self.file}: {where}: {reason}", details={"file": str(self.file), "key": where})

    def check_keys(self, known: list[str], extra_ok: bool = False) -> None:
        if extra_ok:
            return
        for key in self.table:
            if key not in known:
                self.fail(key, f"unknown key. Known keys: {', '.join(known)}.")

    def int(self, key: str, default: int, lo: int = 0, hi: int | None = None) -> int:
        value = self.table.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(key, f"must be an integer, not {value!r}")
        if value < lo or (hi is not None and value > hi):
            self.fail(key, f"must be between {lo} and {hi if hi is not None else 'infinity'}, not {value}")
        return int(value)

    def float(self, key: str, default: float, lo: float, hi: float) -> float:
        value = self.table.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(key, f"must be a number, not {value!r}")
        if not lo <= value <= hi:
            self.fail(key, f"must be between {lo} and {hi}, not {value}")
        return float(value)

    def text(self, key: str, default: str | None, choices: tuple[str, ...] | None = None) -> str:
        if key not in self.table and default is None:
            self.fail(key, "is required")
        value = self.table.get(key, default)
        if not isinstance(value, str):
            self.fail(key, f"must be a string, not {value!r}")
        if choices and value not in choices:
            self.fail(key, f"must be one of {', '.join(choices)}, not {value!r}")
        return str(value)

    def bool(self, key: str, default: bool) -> bool:
        value = self.table.get(key, default)
        if not isinstance(value, bool):
            self.fail(key, f"must be true or false, not {value!r}")
        return bool(value)

    def globs(self, key: str, default: list[str]) -> list[str]:
        value = self.table.get(key, default)
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            self.fail(key, f"must be a list of non-empty glob strings, not {value!r}")
        return list(value)

    def path(self, key: str, default: str | None, base: Path) -> Path:
        raw = self.text(key, default)
        if not raw:
            self.fail(key, "must not be empty")
        p = Path(raw).expanduser()
        return p if p.is_absolute() else (base / p)


_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789_-")
MAX_NAME = 64


def _connector(file: Path, base: Path, ctype: str, name: str, table: Any) -> ConnectorConfig:
    r = _Reader(file, f"connectors.{ctype}.{name}", table)
    if not name or not set(name) <= _NAME_CHARS or name.startswith("-"):
        r.fail(None, "connector names use lowercase letters, digits, '_' and '-'")
    if len(name) > MAX_NAME:  # a git checkout folder is named after it
        r.fail(None, f"connector names use lowercase letters, digits, '_' and '-', at most {MAX_NAME} characters")
    opts: dict[str, Any]
    if ctype == "filesystem":
        r.check_keys(["root", "include_globs", "exclude_globs", "follow_symlinks", "max_file_bytes"])
        opts = {
            "root": r.path("root", None, base),
            "include_globs": r.globs("include_globs", DEFAULT_INCLUDE),
            "exclude_globs": r.globs("exclude_globs", []),
            "follow_symlinks": r.bool("follow_symlinks", False),
            "max_file_bytes": r.int("max_file_bytes", 2_000_000, lo=1),
        }
    elif ctype == "git":
        r.check_keys(
            ["url", "branch", "root", "include_globs", "exclude_globs", "shallow", "cache_dir", "max_file_bytes"]
        )
        root = r.text("root", ".")
        if Path(root).is_absolute() or ".." in Path(root).parts:
            r.fail("root", f"must be a relative path inside the repository, not {root!r}")
        url = r.text("url", None)
        if not url:
            r.fail("url", "must not be empty")
        if url.startswith("-"):
            r.fail("url", f"must not start with '-': {url!r}")
        # A local path relative to the config file; URLs (scheme:// or scp-like user@host:path) stay as is.
        if "://" not in url and not ("@" in url.split("/")[0] and ":" in url):
            if not Path(url).expanduser().is_absolute():
                url = str(base / url)
        branch = r.text("branch", "main")
        if not branch or branch.startswith("-") or any(c.isspace() or c in "~^:?*[\\" for c in branch) or ".." in branch:
            r.fail("branch", f"is not a valid branch name: {branch!r}")
        opts = {
            "url": url,
            "branch": branch,
            "root": root,
            "include_globs": r.globs("include_globs", DEFAULT_INCLUDE),
            "exclude_globs": r.globs("exclude_globs", []),
            "shallow": r.bool("shallow", True),
            "cache_dir": r.path("cache_dir", None, base) if "cache_dir" in r.table else None,
            "max_file_bytes": r.int("max_file_bytes", 2_000_000, lo=1),
        }
    else:  # script: path, timeout; other keys are handed to the script as its config
        opts = dict(r.table)
        opts["path"] = r.path("path", None, base)
        opts["timeout"] = r.float("timeout", 30.0, 0.001, 3600.0)
        for key in ("allow_hosts", "allow_env"):  # http hosts and environment variables the script may use
            if key in opts:
                r.globs(key, [])
    return ConnectorConfig(type=ctype, name=name, options=opts)


def load(path: str | os.PathLike[str] | None = None) -> Config:
    """Read and validate the config; raises NotFound (no file) or InvalidInput (bad content)."""
    file = resolve_path(path)
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        raise NotFound(f"No config file at {file}. Run `ctx init` to create one, or pass --config PATH.") from None
    except OSError as exc:
        raise InvalidInput(f"Cannot read the config file {file}: {exc.strerror}.") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{file}: not valid TOML: {exc}.") from None
    return parse(data, file)


def parse(data: dict[str, Any], file: Path) -> Config:
    """Validate an already-parsed TOML document that came from ``file``."""
    base = file.parent.resolve() if file.parent != Path("") else Path.cwd()
    top = _Reader(file, "", data)
    known = ["db", "chunking", "retrieval", "embedding", "server", "connectors", "tools"]
    for key in data:
        if key not in known:
            raise InvalidInput(f"{file}: unknown section [{key}]. Known sections: {', '.join(known)}.")
    del top

    r = _Reader(file, "db", data.get("db", {}))
    r.check_keys(["path"])
    db = DbConfig(path=r.path("path", "data/ctx.sqlite", base))

    r = _Reader(file, "chunking", data.get("chunking", {}))
    r.check_keys(["max_tokens", "overlap_tokens"])
    max_tokens = r.int("max_tokens", ChunkingConfig.max_tokens, lo=16, hi=100_000)
    overlap = r.int("overlap_tokens", ChunkingConfig.overlap_tokens, lo=0)
    if overlap >= max_tokens // 2:
        r.fail("overlap_tokens", f"must be less than half of max_tokens ({max_tokens}), not {overlap}")
    chunking = ChunkingConfig(max_tokens=max_tokens, overlap_tokens=overlap)

    r = _Reader(file, "retrieval", data.get("retrieval", {}))
    r.check_keys(["hybrid_alpha", "candidate_k_keyword", "candidate_k_vector", "final_limit", "fusion"])
    retrieval = RetrievalConfig(
        hybrid_alpha=r.float("hybrid_alpha", RetrievalConfig.hybrid_alpha, 0.0, 1.0),
        candidate_k_keyword=r.int("candidate_k_keyword", RetrievalConfig.candidate_k_keyword, lo=1, hi=10_000),
        candidate_k_vector=r.int("candidate_k_vector", RetrievalConfig.candidate_k_vector, lo=1, hi=10_000),
        final_limit=r.int("final_limit", RetrievalConfig.final_limit, lo=1, hi=1000),
        fusion=r.text("fusion", RetrievalConfig.fusion, ("rrf", "minmax")),
    )

    r = _Reader(file, "embedding", data.get("embedding", {}))
    r.check_keys(["provider", "model", "dims", "batch_size", "url", "api_key_env", "timeout"])
    embedding = EmbeddingConfig(
        provider=r.text("provider", "disabled", ("disabled", "local", "openai", "ollama")),
        model=r.text("model", ""),
        dims=r.int("dims", 0, lo=0, hi=65_536),
        batch_size=r.int("batch_size", EmbeddingConfig.batch_size, lo=1, hi=10_000),
        url=r.text("url", ""),
        api_key_env=r.text("api_key_env", ""),
        timeout=r.float("timeout", 30.0, 0.1, 3600.0),
    )
    if embedding.provider in ("openai", "ollama"):
        if not embedding.model:
            r.fail("model", f"is required for provider {embedding.provider!r}")
        if not embedding.dims:
            r.fail("dims", f"is required for provider {embedding.provider!r}")

    r = _Reader(file, "server", data.get("server", {}))
    r.check_keys(["bind", "auth_token", "cors_origins"])
    bind = r.text("bind", ServerConfig.bind)
    host, _, port = bind.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        r.fail("bind", f"must be host:port, such as 127.0.0.1:7331, not {bind!r}")
    token = os.environ.get("CTX_AUTH_TOKEN") or r.text("auth_token", "")
    origins = r.table.get("cors_origins", list(ServerConfig.cors_origins))
    if not isinstance(origins, list) or not all(isinstance(o, str) and o for o in origins):
        r.fail("cors_origins", 'must be a list of origins such as ["https://app.example", "http://localhost:*"] '
                               f"(or [] for none), not {origins!r}")
    for origin in origins:
        if not _ORIGIN.fullmatch(origin):
            r.fail("cors_origins", f"{origin!r} is not an origin: write scheme://host or scheme://host:port "
                                   '(no path, no trailing "/"; port "*" means any), or "*" for every website')
    server = ServerConfig(bind=bind, auth_token=token, cors_origins=tuple(origins))

    connectors: list[ConnectorConfig] = []
    r = _Reader(file, "connectors", data.get("connectors", {}))
    r.check_keys(list(CONNECTOR_TYPES))
    for ctype, instances in r.table.items():
        group = _Reader(file, f"connectors.{ctype}", instances)
        for name, table in group.table.items():
            connectors.append(_connector(file, base, ctype, name, table))

    tools: list[ToolConfig] = []
    r = _Reader(file, "tools", data.get("tools", {}))
    r.check_keys(["script"])
    group = _Reader(file, "tools.script", r.table.get("script", {}))
    for name, table in group.table.items():
        t = _Reader(file, f"tools.script.{name}", table)
        extra = {k: v for k, v in t.table.items() if k not in ("path", "timeout")}
        for key in ("allow_hosts", "allow_env"):  # http hosts and environment variables the script may use
            if key in extra:
                t.globs(key, [])
        if not name or not set(name) <= _NAME_CHARS or name.startswith("-"):
            t.fail(None, "tool names use lowercase letters, digits, '_' and '-'")
        if len(name) > MAX_NAME:
            t.fail(None, f"tool names use lowercase letters, digits, '_' and '-', at most {MAX_NAME} characters")
        tools.append(
            ToolConfig(name=name, path=t.path("path", None, base), timeout=t.float("timeout", 30.0, 0.001, 3600.0), config=extra)
        )

    return Config(
        path=file, db=db, chunking=chunking, retrieval=retrieval, embedding=embedding, server=server,
        connectors=connectors, tools=tools,
    )


STARTER = '''# ctx.toml: the knowledge base's configuration. Relative paths resolve against this file's directory.
# Unknown keys or bad values stop ctx with the file, the key and the reason.

[db]
path = "data/ctx.sqlite"          # one SQLite file: documents, chunks, full-text index, vectors

[chunking]
max_tokens = 400                  # tokens = whitespace-separated words
overlap_tokens = 40               # words repeated between consecutive chunks of a long section

[retrieval]
hybrid_alpha = 0.6                # weight of the semantic signal in hybrid search (keyword gets 1 - alpha)
candidate_k_keyword = 80          # keyword candidates per query (after filters)
candidate_k_vector = 80           # vector candidates per query (after filters)
final_limit = 12                  # default number of results
fusion = "rrf"                    # "rrf" (weighted reciprocal rank fusion) or "minmax" (alpha blend of
                                  # min-max normalised scores, as in Context Harness)

[embedding]
provider = "local"                # "local" (offline wordllama), "openai", "ollama" or "disabled"
model = "l2_supercat"
dims = 256
batch_size = 256
# url = "https://api.openai.com/v1"   # openai: any OpenAI-compatible base URL; ollama: http://127.0.0.1:11434
# api_key_env = "OPENAI_API_KEY"     # the environment variable holding the API key

[server]
bind = "127.0.0.1:7331"           # `ctx serve mcp`; non-loopback addresses also need --allow-remote
# auth_token = "..."              # require `Authorization: Bearer <token>` ($CTX_AUTH_TOKEN overrides)
# Browser pages allowed to read the API through CORS. The default is loopback pages only:
# cors_origins = ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"]   # ":*" = any port
# Add your web app's origin ("https://app.example"); [] turns CORS off. "*" lets EVERY website you
# visit read the knowledge base and run its Lua tools through your browser: use it only with an auth_token.

[connectors.filesystem.docs]
root = "../docs"
include_globs = ["**/*.md", "**/*.txt"]
exclude_globs = []
follow_symlinks = false
max_file_bytes = 2000000          # larger files are skipped

# [connectors.git.handbook]
# url = "https://github.com/example/handbook.git"   # also a local path or file:// URL
# branch = "main"
# root = "."
# include_globs = ["**/*.md"]
# shallow = true

# [tools.script.word_count]        # a Lua tool: POST /tools/word_count, MCP tool `word_count`
# path = "tools/word_count.lua"
# timeout = 5                      # seconds; other keys become context.config
# allow_hosts = []                 # hosts `http.get/post` may reach; none by default
# allow_env = []                   # variables `env.get` may read; none by default
'''
