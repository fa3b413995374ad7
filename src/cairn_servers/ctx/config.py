"""``ctx.toml``: load, validate (unknown keys and bad values fail with file, key and reason), defaults.

Location: ``--config`` flag > ``$CTX_CONFIG`` > the first that exists of ``./config/ctx.toml``,
``./.ctx/ctx.toml`` and ``$XDG_CONFIG_HOME/ctx/ctx.toml`` (:func:`search_paths`). Relative paths inside the
file (``[db] path``, connector ``root``, script ``path``, git ``cache_dir``) resolve against the
directory that holds the config file, so ``ctx`` behaves the same from any working directory.
String values may use ``${VAR}`` and ``${VAR:-default}`` (``cairn_servers.ctx.interpolate``); values taken
from the environment are masked in errors, in scrubbed output and logs, and by ``ctx config show``.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn_servers.core.errors import InvalidInput, NotFound
from cairn_servers.search.embed import EmbeddingSettings, hybrid_defaults

if TYPE_CHECKING:
    from cairn_servers.ctx.agent_config import AgentArgument, AgentConfig

KeyPath = tuple[str | int, ...]  # ("connectors", "git", "kb", "url"); an int indexes a list

DEFAULT_CONFIG = Path("config") / "ctx.toml"
# Text and the document formats cairn_servers.ctx.extract reads.
DEFAULT_INCLUDE = ["**/*.md", "**/*.txt", "**/*.pdf", "**/*.docx", "**/*.pptx", "**/*.xlsx", "**/*.html", "**/*.htm"]
MAX_DOCUMENT_BYTES = 50_000_000  # PDF and Office files (text files: max_file_bytes, 2 MB)
CONNECTOR_TYPES = ("filesystem", "git", "s3", "script")
MODES = ("keyword", "semantic", "hybrid")
VECTOR_INDEXES = ("hnsw", "exact")


@dataclass(frozen=True)
class DbConfig:
    path: Path
    # postgresql://user:password@host:port/dbname (``[db] url`` or $CTX_DATABASE_URL): PostgreSQL + pgvector
    # instead of the SQLite file at ``path``. Never printed with its password (:func:`mask_url`).
    url: str | None = None
    # PostgreSQL only: "hnsw" (pgvector's HNSW index per model, cosine) or "exact" (no vector index: an
    # exact scan, fine up to ~100k chunks, and for servers whose pgvector build cannot run HNSW).
    vector_index: str = "hnsw"
    # Database connections a server process holds at most, shared by all its threads (``[db] pool_size`` or
    # $CTX_DB_POOL_SIZE; :class:`cairn_servers.ctx.service.ServicePool`). The CLI's commands hold one.
    pool_size: int = 8

    @property
    def label(self) -> str:
        """Where the knowledge base lives, safe to print."""
        return mask_url(self.url) if self.url else str(self.path)


def mask_url(url: str) -> str:
    """``url`` with every password in it replaced by ``***`` (:func:`cairn_servers.core.sanitize.mask_dsn`:
    URL user info, ``password=`` parameters and libpq's ``key=value`` form)."""
    from cairn_servers.core.sanitize import mask_dsn

    return mask_dsn(url)


POOL_SIZE_MAX = 1000  # [db] pool_size: a typo such as 80000 would exhaust any server's max_connections

# Patterns are compiled where used (re caches them): compiling is start-up time a search need not pay.
_PG_URL = r"(?i)postgres(ql)?://"


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


LOOPBACK_ORIGINS = ("http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*")
# "*", or scheme://host[:port] with no path; the port may be "*" (any port, or none).
_ORIGIN = r"(?i)\*|[a-z][a-z0-9+.-]*://(\[[0-9a-f:.]+\]|[a-z0-9_.~%-]+)(:(\d{1,5}|\*))?"


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
    options: dict[str, Any] = field(repr=False)  # may hold ${VAR} secrets: kept out of reprs and tracebacks

    @property
    def source(self) -> str:
        """The source label stored on documents and used by filters: ``type:name``."""
        return f"{self.type}:{self.name}"


@dataclass(frozen=True)
class ToolConfig:
    name: str
    path: Path
    timeout: float
    config: dict[str, Any] = field(repr=False)  # may hold ${VAR} secrets


class RegistryConfig:
    """``[registries.NAME]``: a git repository (or a plain folder) of Lua tools, agents and connectors
    (:mod:`cairn_servers.ctx.registry`). ``path`` None: the clone lives under ctx's data directory.
    (A plain class with slots, not a frozen dataclass: this module is imported by every ``ctx`` command,
    and a dataclass costs its start-up.)"""

    __slots__ = ("name", "url", "branch", "path", "readonly", "auto_update", "timeout")

    def __init__(self, name: str, url: str | None, branch: str, path: Path | None, readonly: bool,
                 auto_update: bool, timeout: float) -> None:
        self.name, self.url, self.branch, self.path = name, url, branch, path
        self.readonly, self.auto_update, self.timeout = readonly, auto_update, timeout

    def fields(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RegistryConfig) and self.fields() == other.fields()

    def __repr__(self) -> str:
        return f"RegistryConfig({', '.join(f'{k}={v!r}' for k, v in self.fields().items())})"


@dataclass(frozen=True)
class Config:
    path: Path
    db: DbConfig
    chunking: ChunkingConfig = ChunkingConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    embedding: EmbeddingSettings = EmbeddingSettings()
    server: ServerConfig = ServerConfig()
    connectors: list[ConnectorConfig] = field(default_factory=list)
    tools: list[ToolConfig] = field(default_factory=list)
    agents: list[AgentConfig] = field(default_factory=list)  # cairn_servers.ctx.agent_config, imported when there are any
    registries: list[RegistryConfig] = field(default_factory=list)  # in the file's order: later ones win
    # key paths (("server", "auth_token"), ("connectors", "git", "kb", "url")) of values that came
    # from the environment through ${VAR}: `ctx config show` masks them
    from_env: frozenset[KeyPath] = field(default=frozenset(), repr=False, compare=False)


def search_paths() -> list[Path]:
    """Where ctx looks for its config when neither ``--config`` nor ``$CTX_CONFIG`` names one, in order:
    ``./config/ctx.toml``, ``./.ctx/ctx.toml`` then ``./.ctx/config.toml`` (Context Harness's name), and
    ``$XDG_CONFIG_HOME/ctx/ctx.toml`` then ``.../config.toml`` (``~/.config`` when ``$XDG_CONFIG_HOME`` is
    unset or, as the XDG specification says to treat it, relative)."""
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    home = Path(xdg) if xdg and Path(xdg).is_absolute() else Path("~/.config").expanduser()
    return [DEFAULT_CONFIG, Path(".ctx") / "ctx.toml", Path(".ctx") / "config.toml",
            home / "ctx" / "ctx.toml", home / "ctx" / "config.toml"]


def resolve_path(flag: str | os.PathLike[str] | None) -> Path:
    """The config file to use: the flag, else ``$CTX_CONFIG``, else the first of :func:`search_paths` that
    exists, else ``./config/ctx.toml`` (where ``ctx init`` writes one)."""
    if flag:
        return Path(flag).expanduser()
    env = os.environ.get("CTX_CONFIG")
    if env:
        return Path(env).expanduser()
    return next((p for p in search_paths() if p.is_file()), DEFAULT_CONFIG)


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
        r.check_keys(["root", "include_globs", "exclude_globs", "follow_symlinks", "max_file_bytes", "max_document_bytes"])
        opts = {
            "root": r.path("root", None, base),
            "include_globs": r.globs("include_globs", DEFAULT_INCLUDE),
            "exclude_globs": r.globs("exclude_globs", []),
            "follow_symlinks": r.bool("follow_symlinks", False),
            "max_file_bytes": r.int("max_file_bytes", 2_000_000, lo=1),
            "max_document_bytes": r.int("max_document_bytes", MAX_DOCUMENT_BYTES, lo=1),
        }
    elif ctype == "git":
        r.check_keys(
            ["url", "branch", "root", "include_globs", "exclude_globs", "shallow", "cache_dir", "max_file_bytes",
             "max_document_bytes"]
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
            "max_document_bytes": r.int("max_document_bytes", MAX_DOCUMENT_BYTES, lo=1),
        }
    elif ctype == "s3":
        opts = _s3_options(r)
    else:  # script: path, timeout; other keys are handed to the script as its config
        opts = dict(r.table)
        opts["path"] = r.path("path", None, base)
        opts["timeout"] = r.float("timeout", 30.0, 0.001, 3600.0)
        for key in ("allow_hosts", "allow_env"):  # http hosts and environment variables the script may use
            if key in opts:
                r.globs(key, [])
    return ConnectorConfig(type=ctype, name=name, options=opts)


S3_KEYS = ["bucket", "prefix", "region", "endpoint_url", "include_globs", "exclude_globs", "access_key_env",
           "secret_key_env", "session_token_env", "max_file_bytes", "max_document_bytes", "page_size", "timeout"]
# Credentials are never read from ctx.toml: a key under one of these names is refused, not ignored.
_S3_CREDENTIAL_KEYS = ("access_key", "access_key_id", "aws_access_key_id", "secret_key", "secret_access_key",
                       "aws_secret_access_key", "session_token", "aws_session_token", "password", "secret")
_ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,127}"
# S3 bucket names: 3-63 lowercase letters, digits, '.' and '-', starting and ending with a letter or digit.
_BUCKET = r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]"


def _s3_options(r: _Reader) -> dict[str, Any]:
    """``[connectors.s3.NAME]``: validated options. Credentials come from the environment only."""
    for key in r.table:
        if key.lower() in _S3_CREDENTIAL_KEYS:
            r.fail(key, "credentials are never read from the config file. Put them in the environment "
                        "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) or name the variables that hold them with "
                        "access_key_env and secret_key_env.")
    r.check_keys(S3_KEYS)
    bucket = r.text("bucket", None)
    if not re.fullmatch(_BUCKET, bucket):
        r.fail("bucket", f"is not a valid bucket name (3-63 lowercase letters, digits, '.' and '-'): {bucket!r}")
    endpoint = r.text("endpoint_url", "")
    if endpoint and not re.fullmatch(r"(?i)https?://[^\s/@]+(/[^\s]*)?", endpoint):
        r.fail("endpoint_url", f"must be an http:// or https:// URL with no user info, such as "
                               f"http://127.0.0.1:9000, not {mask_url(endpoint)!r}")
    region = r.text("region", "")
    if region and not re.fullmatch(r"[a-z0-9-]{1,40}", region):
        r.fail("region", f"is not a region name such as us-east-1 or auto: {region!r}")
    names: dict[str, str] = {}
    for key in ("access_key_env", "secret_key_env", "session_token_env"):
        value = r.text(key, "")
        if value and not re.fullmatch(_ENV_NAME, value):  # the value itself is not quoted: it may be a pasted key
            r.fail(key, "must be the NAME of an environment variable (letters, digits and '_'), not a key; "
                        "put the key itself in that variable")
        names[key] = value
    if bool(names["access_key_env"]) != bool(names["secret_key_env"]):
        r.fail("access_key_env" if not names["access_key_env"] else "secret_key_env",
               "access_key_env and secret_key_env are set together (or neither, for the standard AWS_* variables)")
    return {
        "bucket": bucket,
        "prefix": r.text("prefix", ""),
        "region": region,
        "endpoint_url": endpoint,
        "include_globs": r.globs("include_globs", DEFAULT_INCLUDE),
        "exclude_globs": r.globs("exclude_globs", []),
        **names,
        "max_file_bytes": r.int("max_file_bytes", 2_000_000, lo=1),
        "max_document_bytes": r.int("max_document_bytes", MAX_DOCUMENT_BYTES, lo=1),
        "page_size": r.int("page_size", 1000, lo=1, hi=1000),
        "timeout": r.float("timeout", 30.0, 0.1, 3600.0),
    }


def load(path: str | os.PathLike[str] | None = None) -> Config:
    """Read and validate the config; raises NotFound (no file) or InvalidInput (bad content)."""
    file = resolve_path(path)
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        if path or os.environ.get("CTX_CONFIG"):
            raise NotFound(f"No config file at {file}. Run `ctx init` to create one, or pass --config PATH.") from None
        looked = [str(p) if p.is_absolute() else f"./{p}" for p in search_paths()]
        raise NotFound(f"No config file found; looked in {', '.join(looked)}. Run `ctx init` to create "
                       f"./{DEFAULT_CONFIG}, pass --config PATH, or set $CTX_CONFIG.", details={"searched": looked}
                       ) from None
    except OSError as exc:
        raise InvalidInput(f"Cannot read the config file {file}: {exc.strerror}.") from None
    try:
        text = raw.decode("utf-8")
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{file}: not valid TOML: {exc}.") from None
    return parse(data, file, text)


# Keys holding paths: their ${VAR} values are masked by `config show` but not scrubbed from every
# message (a folder from $HOME is not a secret, and hiding it would make path errors unreadable).
def _is_path_key(path: KeyPath) -> bool:
    return (path == ("db", "path") or (len(path) == 4 and path[0] == "connectors" and path[3] in (
        "root", "path", "cache_dir")) or (len(path) == 4 and path[:2] in (("tools", "script"), ("agents", "script"))
                                         and path[3] == "path")) or (len(path) == 3 and path[0] == "registries"
                                                                     and path[2] == "path")


def parse(data: dict[str, Any], file: Path, text: str | None = None) -> Config:
    """Validate an already-parsed TOML document that came from ``file`` (``text``: its source, which
    lets errors about ``${VAR}`` name the line), expanding ``${VAR}`` in its strings first."""
    if text is not None and "${" not in text:  # nothing to expand: skip the module (start-up time)
        conf = _parse(data, file, {})
        values: list[tuple[KeyPath, str, str]] = []
    else:
        from cairn_servers.ctx.interpolate import expand_document

        data, expansion = expand_document(data, file, text)
        try:
            conf = _parse(data, file, expansion.templated)
        except InvalidInput as exc:  # a value from the environment may be quoted in the reason
            raise InvalidInput(expansion.mask(exc.message), details=exc.details) from None
        conf = replace(conf, from_env=frozenset(expansion.from_env))
        values = expansion.values
    if values or conf.server.auth_token:
        from cairn_servers.core.sanitize import register_secret, register_secret_env

        for path, name, _ in values:
            if not _is_path_key(path):
                register_secret_env(name)
        if os.environ.get("CTX_AUTH_TOKEN"):
            register_secret_env("CTX_AUTH_TOKEN")
        register_secret(conf.server.auth_token)
    if conf.db.url and mask_url(conf.db.url) != conf.db.url:  # the database password: masked in every message
        from urllib.parse import unquote, urlsplit

        from cairn_servers.core.sanitize import register_secret as _register

        try:
            password = urlsplit(conf.db.url).password
        except ValueError:  # an unparsable port: the URL is refused when connecting, masked
            password = None
        if password:
            _register(password)
            _register(unquote(password))
    return conf


def _parse(data: dict[str, Any], file: Path, templated: dict[KeyPath, str]) -> Config:
    base = file.parent.resolve() if file.parent != Path("") else Path.cwd()
    top = _Reader(file, "", data)
    known = ["db", "chunking", "retrieval", "embedding", "server", "connectors", "tools", "agents", "registries"]
    for key in data:
        if key not in known:
            raise InvalidInput(f"{file}: unknown section [{key}]. Known sections: {', '.join(known)}.")
    del top

    r = _Reader(file, "db", data.get("db", {}))
    r.check_keys(["path", "url", "vector_index", "pool_size"])
    url = os.environ.get("CTX_DATABASE_URL") or r.text("url", "") or None
    if url is not None and not re.match(_PG_URL, url):
        r.fail("url", f"must be a postgresql:// URL, not {mask_url(url)!r} (for SQLite set path instead)")
    if url is not None and _raw_at_in_user_info(url):
        # libpq ends the user info at the first "@" or "/": the rest of the password would be taken
        # for a host name and sent to the DNS resolver (and quoted in its error).
        r.fail("url", f"{mask_url(url)!r} has a raw '@' or '/' in its user name or password; "
                      "percent-encode them (@ as %40, / as %2F)")
    vector_index = os.environ.get("CTX_VECTOR_INDEX") or r.text("vector_index", "hnsw")
    if vector_index not in VECTOR_INDEXES:
        r.fail("vector_index", f"must be one of {', '.join(VECTOR_INDEXES)}, not {vector_index!r}")
    pool_size = r.int("pool_size", DbConfig.pool_size, lo=1, hi=POOL_SIZE_MAX)
    env_pool = os.environ.get("CTX_DB_POOL_SIZE", "").strip()
    if env_pool:
        if not (env_pool.isascii() and env_pool.isdigit() and len(env_pool) <= 4
                and 1 <= int(env_pool) <= POOL_SIZE_MAX):
            raise InvalidInput(
                f"$CTX_DB_POOL_SIZE must be an integer from 1 to {POOL_SIZE_MAX}, not {env_pool[:40]!r}.")
        pool_size = int(env_pool)
    db = DbConfig(path=r.path("path", "data/ctx.sqlite", base), url=url, vector_index=vector_index,
                  pool_size=pool_size)

    r = _Reader(file, "chunking", data.get("chunking", {}))
    r.check_keys(["max_tokens", "overlap_tokens"])
    max_tokens = r.int("max_tokens", ChunkingConfig.max_tokens, lo=16, hi=100_000)
    overlap = r.int("overlap_tokens", ChunkingConfig.overlap_tokens, lo=0)
    if overlap >= max_tokens // 2:
        r.fail("overlap_tokens", f"must be less than half of max_tokens ({max_tokens}), not {overlap}")
    chunking = ChunkingConfig(max_tokens=max_tokens, overlap_tokens=overlap)

    r = _Reader(file, "retrieval", data.get("retrieval", {}))
    r.check_keys(["hybrid_alpha", "candidate_k_keyword", "candidate_k_vector", "final_limit", "fusion"])
    # Unset, hybrid_alpha is the embedding provider's tuned weight (cairn_servers.search.embed.HYBRID_DEFAULTS).
    provider = data.get("embedding", {}).get("provider") if isinstance(data.get("embedding"), dict) else None
    retrieval = RetrievalConfig(
        hybrid_alpha=r.float("hybrid_alpha", hybrid_defaults(provider if isinstance(provider, str) else "")[0],
                             0.0, 1.0),
        candidate_k_keyword=r.int("candidate_k_keyword", RetrievalConfig.candidate_k_keyword, lo=1, hi=10_000),
        candidate_k_vector=r.int("candidate_k_vector", RetrievalConfig.candidate_k_vector, lo=1, hi=10_000),
        final_limit=r.int("final_limit", RetrievalConfig.final_limit, lo=1, hi=1000),
        fusion=r.text("fusion", RetrievalConfig.fusion, ("rrf", "minmax")),
    )

    r = _Reader(file, "embedding", data.get("embedding", {}))
    r.check_keys(["provider", "model", "dims", "batch_size", "url", "api_key_env", "timeout", "background"])
    embedding = EmbeddingSettings(
        provider=r.text("provider", "disabled", ("disabled", "local", "minilm", "e5", "openai", "ollama")),
        model=r.text("model", ""),
        dims=r.int("dims", 0, lo=0, hi=65_536),
        batch_size=r.int("batch_size", EmbeddingSettings.batch_size, lo=1, hi=10_000),
        url=r.text("url", ""),
        api_key_env=r.text("api_key_env", ""),
        timeout=r.float("timeout", 30.0, 0.1, 3600.0),
        background=r.bool("background", EmbeddingSettings.background),
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
    if not token and ("server", "auth_token") in templated:  # "${TOKEN}" with TOKEN="": no auth at all
        r.fail("auth_token", f"{templated['server', 'auth_token']} expands to an empty string, which would serve "
                             "without a token. Set the variable, or remove auth_token")
    origins = r.table.get("cors_origins", list(ServerConfig.cors_origins))
    if not isinstance(origins, list) or not all(isinstance(o, str) and o for o in origins):
        r.fail("cors_origins", 'must be a list of origins such as ["https://app.example", "http://localhost:*"] '
                               f"(or [] for none), not {origins!r}")
    for origin in origins if "cors_origins" in r.table else ():  # the defaults need no check
        if not re.fullmatch(_ORIGIN, origin):
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

    agents: list[AgentConfig] = []
    r = _Reader(file, "agents", data.get("agents", {}))
    for key, value in r.table.items():
        if key not in AGENT_KINDS:
            example = key if isinstance(value, dict) else "NAME"
            r.fail(key, f"unknown agent kind. Write [agents.inline.{example}] (a prompt in this file) or "
                        f"[agents.script.{example}] (a Lua script that builds it).")
    names: set[str] = set()
    for kind in AGENT_KINDS:
        group = _Reader(file, f"agents.{kind}", r.table.get(kind, {}))
        for name, table in group.table.items():
            if name in names:
                group.fail(name, "is defined both inline and as a script; agent names are unique")
            names.add(name)
            agents.append(_agent(file, base, kind, name, table, connectors, tools))

    registries: list[RegistryConfig] = []
    group = _Reader(file, "registries", data.get("registries", {}))
    for name, table in group.table.items():
        g = _Reader(file, f"registries.{name}", table)
        g.check_keys(["url", "branch", "path", "readonly", "auto_update", "timeout"])
        if not name or not set(name) <= _NAME_CHARS or name.startswith("-") or len(name) > MAX_NAME:
            g.fail(None, f"registry names use lowercase letters, digits, '_' and '-', at most {MAX_NAME} characters")
        url = g.text("url", "") or None
        if url is None and "path" not in g.table:
            g.fail(None, "needs `url` (a git repository to clone) or `path` (a folder of extensions), or both")
        if url is not None and url.startswith("-"):
            g.fail("url", f"must be a git URL or a path, not {url[:70]!r}")
        if url is not None and url.startswith(("/", "./", "../", "~")):  # a local repository
            url = os.path.normpath(g.path("url", None, base))
        branch = g.text("branch", "main")
        if not branch or branch.startswith("-") or any(c.isspace() or c in "~^:?*[\\" for c in branch) or ".." in branch:
            g.fail("branch", f"must be a git branch or tag name, not {branch[:70]!r}")
        registries.append(RegistryConfig(
            name=name, url=url, branch=branch, path=g.path("path", None, base) if "path" in g.table else None,
            readonly=g.bool("readonly", False), auto_update=g.bool("auto_update", False),
            timeout=g.float("timeout", 120.0, 1.0, 3600.0)))

    return Config(
        path=file, db=db, chunking=chunking, retrieval=retrieval, embedding=embedding, server=server,
        connectors=connectors, tools=tools, agents=agents, registries=registries,
    )


AGENT_KINDS = ("inline", "script")
# The built-in MCP tools (cairn_servers.ctx.ops: the operations on MCP); tests/ctx/test_agents.py checks they agree.
BUILTIN_TOOLS = ("search", "get", "sources")
_AGENT_KEYS = ["description", "system_prompt", "tools", "arguments", "search_mode", "search_sources", "search_limit"]
_ARGUMENT_KEYS = ("name", "description", "required", "default")


def _agent(file: Path, base: Path, kind: str, name: str, table: Any, connectors: list[ConnectorConfig],
           tools: list[ToolConfig]) -> AgentConfig:
    """One agent, every field checked here, so a mistake stops ``ctx`` at load with the agent and the key."""
    from cairn_servers.ctx.agent_config import PLACEHOLDER, AgentConfig

    r = _Reader(file, f"agents.{kind}.{name}", table)
    if not name or not set(name) <= _NAME_CHARS or name.startswith("-") or len(name) > MAX_NAME:
        r.fail(None, f"agent names use lowercase letters, digits, '_' and '-', at most {MAX_NAME} characters")
    if kind == "inline":
        r.check_keys(_AGENT_KEYS)
        if "system_prompt" not in r.table:
            r.fail("system_prompt", "is required: the prompt the agent starts from (it may use {{argument}})")
    description = r.text("description", "")
    system_prompt = r.text("system_prompt", "")
    if kind == "inline" and not system_prompt.strip():
        r.fail("system_prompt", "must not be empty")

    known_tools = [*BUILTIN_TOOLS, *(t.name for t in tools)]
    listed = r.table.get("tools", [])
    if not isinstance(listed, list) or not all(isinstance(t, str) for t in listed):
        r.fail("tools", f"must be a list of tool names such as [\"search\", \"get\"], not {listed!r}")
    for tool in listed:
        if tool not in known_tools:
            r.fail("tools", f"{tool!r} is not a tool. Tools: {', '.join(known_tools)}.")
    if len(set(listed)) != len(listed):
        r.fail("tools", "lists a tool twice")

    arguments = _agent_arguments(r)
    declared = {a.name for a in arguments}
    for placeholder in PLACEHOLDER.findall(system_prompt):
        if placeholder not in declared:
            hint = f"Arguments: {', '.join(sorted(declared))}." if declared else "Declare it in `arguments`."
            r.fail("system_prompt", f"uses {{{{{placeholder}}}}}, which is not an argument of this agent. {hint}")

    mode = r.text("search_mode", "keyword", MODES)
    sources = r.table.get("search_sources", [])
    if isinstance(sources, str):
        sources = [sources]
    if not isinstance(sources, list) or not all(isinstance(s, str) and s for s in sources):
        r.fail("search_sources", f"must be a list of sources (type:name, a type or a name), not {sources!r}")
    for wanted in sources:
        if not any(wanted in (c.source, c.type, c.name) for c in connectors):
            known = ", ".join(c.source for c in connectors) or "none configured"
            r.fail("search_sources", f"{wanted!r} matches no connector. Sources: {known}.")
    limit = r.int("search_limit", 0, lo=1, hi=1000) if "search_limit" in r.table else None

    path: Path | None = None
    timeout = 30.0
    extra: dict[str, Any] = {}
    if kind == "script":
        path = r.path("path", None, base)
        timeout = r.float("timeout", 30.0, 0.001, 3600.0)
        extra = {k: v for k, v in r.table.items() if k not in (*_AGENT_KEYS, "path", "timeout")}
        for key in ("allow_hosts", "allow_env"):  # http hosts and environment variables the script may use
            if key in extra:
                r.globs(key, [])
    return AgentConfig(kind=kind, name=name, description=description, system_prompt=system_prompt,
                       tools=tuple(listed), arguments=arguments, search_mode=mode, search_sources=tuple(sources),
                       search_limit=limit, path=path, timeout=timeout, config=extra)


def _agent_arguments(r: _Reader) -> tuple[AgentArgument, ...]:
    from cairn_servers.ctx.agent_config import AgentArgument

    raw = r.table.get("arguments", [])
    if not isinstance(raw, list):
        r.fail("arguments", 'must be a list of tables such as [{ name = "topic", required = true }]')
    out: list[AgentArgument] = []
    for i, item in enumerate(raw, 1):
        where = f"arguments[{i}]"
        if not isinstance(item, dict):
            r.fail(where, f'must be a table such as {{ name = "topic", description = "...", required = true }}, '
                          f"not {item!r}")
        for key in item:
            if key not in _ARGUMENT_KEYS:
                r.fail(where, f"{key}: unknown key. Known keys: {', '.join(_ARGUMENT_KEYS)}.")
        name = item.get("name")
        if not isinstance(name, str) or not name or not all(c.isalnum() or c in "_-" for c in name) \
                or not name.isascii():
            r.fail(where, f"name: must be a non-empty name of letters, digits, '_' and '-', not {name!r}")
        if any(a.name == name for a in out):
            r.fail(where, f"name: {name!r} is declared twice")
        description = item.get("description", "")
        if not isinstance(description, str):
            r.fail(where, f"description: must be a string, not {description!r}")
        required = item.get("required", False)
        if not isinstance(required, bool):
            r.fail(where, f"required: must be true or false, not {required!r}")
        default = item.get("default")
        if default is not None and not isinstance(default, str):
            r.fail(where, f"default: must be a string (arguments are text), not {default!r}")
        if required and default is not None:
            r.fail(where, "default: a required argument has no default; drop one of them")
        out.append(AgentArgument(name=str(name), description=str(description), required=bool(required),
                                 default=default))
    return tuple(out)


def _raw_at_in_user_info(url: str) -> bool:
    """Whether the part of ``url`` before its query holds an "@" that is not the single one ending
    user info placed before the first "/"."""
    rest = url.split("://", 1)[1].split("?", 1)[0].split("#", 1)[0]
    at = rest.rfind("@")
    return at != -1 and (rest.count("@") > 1 or "/" in rest[:at])


# ---- the effective configuration (`ctx config show`) ---------------------------------------------

MASK = "***"
_SECRET_WORDS = ("token", "secret", "password", "passwd", "api_key", "apikey", "credential")


def effective(conf: Config) -> dict[str, Any]:
    """The configuration in force, defaults filled in and paths resolved, shaped like ``ctx.toml``.
    Every value that came from the environment, the auth token and string values under secret-looking
    keys (``token``, ``password``, ...) read ``"***"``, and passwords inside URLs or connection strings
    anywhere are masked: this is safe to print or paste."""
    data: dict[str, Any] = {
        "db": {"path": str(conf.db.path),
               **({"url": mask_url(conf.db.url), "vector_index": conf.db.vector_index} if conf.db.url else {}),
               "pool_size": conf.db.pool_size},
        "chunking": _fields(conf.chunking),
        "retrieval": _fields(conf.retrieval),
        "embedding": _fields(conf.embedding),
        "server": _fields(conf.server),
        "connectors": {},
        "tools": {"script": {}},
    }
    for a in conf.agents:
        entry: dict[str, Any] = {"description": a.description}
        if a.system_prompt:
            entry["system_prompt"] = a.system_prompt
        entry.update(tools=list(a.tools), arguments=[_plain(arg.__dict__) for arg in a.arguments],
                     search_mode=a.search_mode, search_sources=list(a.search_sources), search_limit=a.search_limit)
        if a.kind == "script":
            entry.update(path=a.path, timeout=a.timeout, **a.config)
        data.setdefault("agents", {}).setdefault(a.kind, {})[a.name] = _plain(entry)
    for c in conf.connectors:
        data["connectors"].setdefault(c.type, {})[c.name] = _plain(c.options)
    for t in conf.tools:
        data["tools"]["script"][t.name] = _plain({"path": t.path, "timeout": t.timeout, **t.config})
    for reg in conf.registries:
        data.setdefault("registries", {})[reg.name] = _plain(
            {k: v for k, v in reg.fields().items() if k != "name" and v is not None})
    if data["server"]["auth_token"]:
        data["server"]["auth_token"] = MASK
    for path in conf.from_env:
        _mask_at(data, path)
    masked: dict[str, Any] = _mask_secret_keys(data)
    return masked


def _fields(obj: Any) -> dict[str, Any]:
    return {k: _plain(v) for k, v in obj.__dict__.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _mask_at(data: Any, path: KeyPath) -> None:
    *parents, last = path
    for key in parents:
        try:
            data = data[key]
        except (KeyError, IndexError, TypeError):
            return
    try:
        if isinstance(data[last], str):
            data[last] = MASK
    except (KeyError, IndexError, TypeError):
        pass


def _mask_secret_keys(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _mask_secret_keys(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_secret_keys(v, key) for v in value]
    lowered = key.lower()
    if (isinstance(value, str) and value and not lowered.endswith("_env")
            and any(word in lowered for word in _SECRET_WORDS)):
        return MASK
    if isinstance(value, str) and ("@" in value or "password" in value.lower()):
        from cairn_servers.core.sanitize import mask_dsn

        return mask_dsn(value)  # a password in a URL anywhere: [embedding] url, a tool's options
    return value


_BARE_KEY = r"[A-Za-z0-9_-]+"


def to_toml(data: dict[str, Any], header: str = "") -> str:
    """``data`` (as :func:`effective` returns it) as TOML that ``tomllib`` reads back to the same values."""
    lines = [f"# {line}" for line in header.splitlines()]

    def table(prefix: list[str], body: dict[str, Any]) -> None:
        scalars = {k: v for k, v in body.items() if not isinstance(v, dict) or not _is_table_section(prefix, k)}
        if prefix and (scalars or not body):
            lines.extend(["", f"[{'.'.join(_key(p) for p in prefix)}]"])
        for k, v in scalars.items():
            lines.append(f"{_key(k)} = {_value(v)}")
        for k, v in body.items():
            if k not in scalars:
                table([*prefix, k], v)

    table([], data)
    return "\n".join(lines).lstrip("\n")


def _is_table_section(prefix: list[str], key: str) -> bool:
    # Sub-tables are written as [sections] down to a connector or tool; deeper (script config) tables inline.
    depth = len(prefix)
    return depth == 0 or (prefix[0] in ("connectors", "tools", "agents") and depth <= 2) or (
        prefix[0] == "registries" and depth == 1)


def _key(key: str) -> str:
    import json

    return key if re.fullmatch(_BARE_KEY, key) else json.dumps(key, ensure_ascii=False)


def _value(value: Any) -> str:
    import json

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):  # a JSON string is a TOML basic string (but for DEL); "${" stays literal
        return json.dumps(value.replace("${", "$${"), ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return value.isoformat() if hasattr(value, "isoformat") else json.dumps(str(value))


STARTER = '''# ctx.toml: the knowledge base's configuration. Relative paths resolve against this file's directory.
# Unknown keys or bad values stop ctx with the file, the key and the reason.
# Any string may use ${VAR} (must be set) or ${VAR:-default}; $${ is a literal ${. Values read from
# the environment are masked (***) in `ctx config show`, error messages and logs.

[db]
path = "data/ctx.sqlite"          # one SQLite file: documents, chunks, full-text index, vectors
# url = "postgresql://ctx@db.internal/kb"   # PostgreSQL + pgvector instead: a base a team shares (docs/ctx.md)
# pool_size = 8                 # connections a server process holds at most, shared by its threads

[chunking]
max_tokens = 400                  # tokens = whitespace-separated words
overlap_tokens = 40               # words repeated between consecutive chunks of a long section

[retrieval]
# hybrid_alpha = 0.8              # weight of the semantic signal in hybrid search (keyword gets 1 - alpha);
                                  # unset: tuned per provider (minilm 0.8, local 0.6; docs/ctx.md)
candidate_k_keyword = 80          # keyword candidates per query (after filters)
candidate_k_vector = 80           # vector candidates per query (after filters)
final_limit = 12                  # default number of results
fusion = "rrf"                    # "rrf" (weighted reciprocal rank fusion) or "minmax" (alpha blend of
                                  # min-max normalised scores, as in Context Harness)

[embedding]
provider = "minilm"               # "minilm" (offline all-MiniLM-L6-v2: finds paraphrases, ~0.15 s of CPU per
                                  # chunk), "local" (offline wordllama: ~1,000x faster, weaker), "e5",
                                  # "openai", "ollama" or "disabled". Changing it re-embeds (ctx embed pending)
model = "all-MiniLM-L6-v2"        # local: "l2_supercat"
dims = 384                        # local: 256
batch_size = 256
# url = "https://api.openai.com/v1"   # openai: any OpenAI-compatible base URL; ollama: http://127.0.0.1:11434
# api_key_env = "OPENAI_API_KEY"     # the environment variable holding the API key
# background = false              # `ctx serve` does not embed pending chunks while it serves (default true;
                                  # then `ctx sync` or `ctx embed pending` embeds them)

[server]
bind = "127.0.0.1:7331"           # `ctx serve mcp`; non-loopback addresses also need --allow-remote
# auth_token = "${CTX_TOKEN}"     # require `Authorization: Bearer <token>` ($CTX_AUTH_TOKEN overrides);
                                  # keep the token itself in the environment, not in this file
# Browser pages allowed to read the API through CORS. The default is loopback pages only:
# cors_origins = ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"]   # ":*" = any port
# Add your web app's origin ("https://app.example"); [] turns CORS off. "*" lets EVERY website you
# visit read the knowledge base and run its Lua tools through your browser: use it only with an auth_token.

[connectors.filesystem.docs]
root = "../docs"
include_globs = ["**/*.md", "**/*.txt", "**/*.pdf", "**/*.docx", "**/*.pptx", "**/*.xlsx", "**/*.html", "**/*.htm"]
exclude_globs = []
follow_symlinks = false
max_file_bytes = 2000000          # larger text files are skipped (with a warning in the sync report)
max_document_bytes = 50000000     # the same for PDF, DOCX, PPTX and XLSX files

# [connectors.git.handbook]
# url = "https://${GIT_HOST:-github.com}/example/handbook.git"   # also a local path or file:// URL
# branch = "main"
# root = "."
# include_globs = ["**/*.md"]
# shallow = true

# [connectors.s3.reports]           # objects in an S3 bucket (AWS, MinIO, R2, ...): pip install "cairn-servers[s3]"
# bucket = "team-reports"
# prefix = "published/"            # only keys starting with this
# region = "eu-west-1"
# endpoint_url = "http://127.0.0.1:9000"   # MinIO, R2 and other S3-compatible servers; unset for AWS
# access_key_env = "REPORTS_KEY_ID"        # variables holding the credentials (never the keys themselves);
# secret_key_env = "REPORTS_SECRET"        # unset: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, profiles, roles

# [tools.script.word_count]        # a Lua tool: POST /tools/word_count, MCP tool `word_count`
# path = "tools/word_count.lua"
# timeout = 5                      # seconds; other keys become context.config
# allow_hosts = []                 # hosts `http.get/post` may reach; none by default
# allow_env = []                   # variables `env.get` may read; none by default

# [agents.inline.reviewer]         # an MCP prompt (prompts/get), POST /agents/reviewer, `ctx agent show reviewer`
# description = "Reviews a change against the docs' conventions"
# tools = ["search", "get"]        # tools it should use: search, get, sources or a [tools.script.*] name
# search_mode = "keyword"          # and the search it should prefer: mode, search_sources, search_limit
# arguments = [{ name = "area", description = "what the change touches", required = true }]
# system_prompt = "You review changes to {{area}}. Search the docs for the conventions that apply."
# [agents.script.oncall]           # a Lua agent: agent.resolve(args, config, context) builds the prompt
# path = "agents/oncall.lua"       # (e.g. from context.search); same sandbox and keys as a Lua tool
'''
