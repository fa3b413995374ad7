from __future__ import annotations

import os
from pathlib import Path

import pytest

from cairn_servers.core.errors import InvalidInput, NotFound
from cairn_servers.ctx import config as cfg
from cairn_servers.ctx.interpolate import expand_document
from cairn_servers.ctx.service import init

from .conftest import config_file


def test_defaults_match_the_anchors(tmp_path: Path) -> None:
    c = cfg.load(config_file(tmp_path, ""))
    assert c.db.path == tmp_path / "data" / "ctx.sqlite"
    assert (c.retrieval.hybrid_alpha, c.retrieval.candidate_k_keyword, c.retrieval.candidate_k_vector,
            c.retrieval.final_limit) == (0.6, 80, 80, 12)
    assert c.embedding.provider == "disabled"
    assert c.server.bind == "127.0.0.1:7331"
    assert c.connectors == []


def test_connectors_several_instances_and_relative_paths(tmp_path: Path) -> None:
    c = cfg.load(config_file(tmp_path, """
[connectors.filesystem.a]
root = "docs"
[connectors.filesystem.b]
root = "/abs/notes"
include_globs = ["**/*.rst"]
follow_symlinks = true
[connectors.git.repo]
url = "https://token@example.org/r.git"
[connectors.git.local]
url = "repos/x"
branch = "dev"
shallow = false
[connectors.script.jira]
path = "jira.lua"
timeout = 5
project = "ABC"
[tools.script.echo]
path = "tools/echo.lua"
greeting = "hi"
"""))
    by = {x.source: x for x in c.connectors}
    assert by["filesystem:a"].options["root"] == tmp_path / "docs"
    assert by["filesystem:a"].options["include_globs"] == [
        "**/*.md", "**/*.txt", "**/*.pdf", "**/*.docx", "**/*.pptx", "**/*.xlsx", "**/*.html", "**/*.htm"]
    assert by["filesystem:a"].options["max_document_bytes"] == 50_000_000
    assert by["filesystem:b"].options["follow_symlinks"] is True
    assert by["git:repo"].options["branch"] == "main" and by["git:repo"].options["shallow"] is True
    assert by["git:repo"].options["url"] == "https://token@example.org/r.git"
    assert by["git:local"].options["url"] == str(tmp_path / "repos/x")
    assert by["script:jira"].options["project"] == "ABC"
    assert c.tools[0].name == "echo" and c.tools[0].config == {"greeting": "hi"} and c.tools[0].timeout == 30.0


@pytest.mark.parametrize(
    "body, message",
    [
        ("[db]\npath = 'x'\ncolour = 1\n", "[db] colour: unknown key. Known keys: path, url, vector_index, pool_size."),
        ("[retrieval]\nhybrid_alpha = 1.5\n", "[retrieval] hybrid_alpha: must be between 0.0 and 1.0, not 1.5"),
        ("[retrieval]\nfinal_limit = 'ten'\n", "[retrieval] final_limit: must be an integer, not 'ten'"),
        ("[embedding]\nprovider = 'magic'\n", "[embedding] provider: must be one of disabled, local, minilm, e5, openai, ollama, not 'magic'"),
        ("[embedding]\nprovider = 'openai'\n", "[embedding] model: is required for provider 'openai'"),
        ("[chunking]\nmax_tokens = 100\noverlap_tokens = 60\n", "[chunking] overlap_tokens: must be less than half of max_tokens (100), not 60"),
        ("[server]\nbind = 'localhost'\n", "[server] bind: must be host:port"),
        ("[connectors.filesystem.a]\n", "[connectors.filesystem.a] root: is required"),
        ("[connectors.filesystem.a]\nroot = 'x'\ninclude = ['*.md']\n", "[connectors.filesystem.a] include: unknown key."),
        ("[connectors.ftp.a]\nroot = 'x'\n", "[connectors] ftp: unknown key. Known keys: filesystem, git, s3, script."),
        ("[connectors.git.a]\nurl = 'x'\nroot = '../up'\n", "[connectors.git.a] root: must be a relative path inside the repository"),
        ("[connectors.filesystem.Bad]\nroot = 'x'\n", "[connectors.filesystem.Bad]: connector names use lowercase"),
        ("[extras]\n", "unknown section [extras]"),
        ("[connectors.git.a]\nurl = 'x'\nbranch = '--upload-pack=evil'\n", "[connectors.git.a] branch: is not a valid branch name"),
        ("[connectors.git.a]\nurl = '-oProxyCommand=x'\n", "[connectors.git.a] url: must not start with '-'"),
        ("[db\n", "not valid TOML"),
    ],
)
def test_bad_config_names_file_key_and_reason(tmp_path: Path, body: str, message: str) -> None:
    path = config_file(tmp_path, body)
    with pytest.raises(InvalidInput) as info:
        cfg.load(path)
    assert info.value.message.startswith(str(path))
    assert message in info.value.message


def test_location_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CTX_CONFIG", raising=False)
    assert cfg.resolve_path(None) == Path("config/ctx.toml")
    monkeypatch.setenv("CTX_CONFIG", str(tmp_path / "env.toml"))
    assert cfg.resolve_path(None) == tmp_path / "env.toml"
    assert cfg.resolve_path("flag.toml") == Path("flag.toml")
    with pytest.raises(NotFound, match="Run `ctx init`"):
        cfg.load(None)


def test_init_writes_a_loadable_commented_starter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CTX_CONFIG", raising=False)
    report = init(None)
    assert report.created_config
    text = (tmp_path / "config" / "ctx.toml").read_text()
    assert text.count("#") > 10
    loaded = cfg.load(None)
    assert loaded.embedding.provider == "minilm" and loaded.embedding.dims == 384
    assert loaded.retrieval.hybrid_alpha == 0.8  # the provider's tuned weight (the starter leaves it unset)
    assert Path(report.db_path).is_file()
    # A second init keeps the user's file.
    (tmp_path / "config" / "ctx.toml").write_text(text + "\n# mine\n")
    assert not init(None).created_config
    assert (tmp_path / "config" / "ctx.toml").read_text().endswith("# mine\n")


def test_effective_config_masks_environment_values_and_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tomllib

    monkeypatch.delenv("CTX_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("CTX_T_GIT", "ghp_0123456789abcdef")
    monkeypatch.setenv("CTX_T_BRANCH", "dev")
    c = cfg.load(config_file(tmp_path, """
[server]
auth_token = "written-in-the-file"
[connectors.git.kb]
url = "https://${CTX_T_GIT}@example.org/kb.git"
branch = "${CTX_T_BRANCH}"
include_globs = ["${CTX_T_BRANCH}/**/*.md", "**/*.txt"]
[tools.script.t]
path = "t.lua"
password = "hunter2-in-file"
max_tokens = 5
api_key_env = "OPENAI_API_KEY"
when = 2024-01-02T03:04:05Z
nested = {depth = [1, 2], "odd key" = "v\\u007f"}
literal = "$${NOT_EXPANDED}"
"""))
    shown = cfg.effective(c)
    assert shown["server"]["auth_token"] == "***"  # a token is masked even when written in the file
    kb = shown["connectors"]["git"]["kb"]
    assert kb["url"] == "***" and kb["branch"] == "***" and kb["include_globs"] == ["***", "**/*.txt"]
    assert "cache_dir" not in kb  # unset: TOML has no null
    tool = shown["tools"]["script"]["t"]
    assert tool["password"] == "***" and tool["max_tokens"] == 5 and tool["api_key_env"] == "OPENAI_API_KEY"
    assert tool["literal"] == "${NOT_EXPANDED}" and tool["path"] == str(tmp_path / "t.lua")
    assert shown["retrieval"] == {"hybrid_alpha": 0.6, "candidate_k_keyword": 80, "candidate_k_vector": 80,
                                  "final_limit": 12, "fusion": "rrf"}
    text = cfg.to_toml(shown, "header line")
    assert text.startswith("# header line\n\n[db]\n")
    for secret in ("ghp_0123456789abcdef", "written-in-the-file", "hunter2-in-file"):
        assert secret not in text and secret not in str(shown)
    assert '"$${NOT_EXPANDED}"' in text  # escaped, so that loading it again gives the same value
    assert expand_document(tomllib.loads(text), c.path, text, environ={})[0] == shown


def test_effective_config_round_trips_through_toml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without secrets, `ctx config show` output is itself a config that loads to the same settings."""
    import tomllib

    monkeypatch.delenv("CTX_AUTH_TOKEN", raising=False)
    c = cfg.load(config_file(tmp_path, cfg.STARTER))
    again = cfg.parse(tomllib.loads(cfg.to_toml(cfg.effective(c))), c.path)
    assert again == c


def test_the_embedding_section_is_the_providers_one_settings_type(tmp_path: Path) -> None:
    import dataclasses

    from cairn_servers.search.embed import EmbeddingSettings

    c = cfg.load(config_file(tmp_path, """
[embedding]
provider = "ollama"
model = "nomic"
dims = 16
url = "http://127.0.0.1:9"
api_key_env = "MY_KEY"
timeout = 2.5
"""))
    assert type(c.embedding) is EmbeddingSettings  # handed to embed.create as it is, not copied field by field
    assert c.embedding == EmbeddingSettings("ollama", "nomic", 16, 256, "http://127.0.0.1:9", "MY_KEY", 2.5)
    # every field is a key of [embedding], and the defaults are the documented ones
    assert [f.name for f in dataclasses.fields(EmbeddingSettings)] == [
        "provider", "model", "dims", "batch_size", "url", "api_key_env", "timeout", "background"]
    assert cfg.load(config_file(tmp_path, "")).embedding == EmbeddingSettings()
    assert EmbeddingSettings().background is True
    off = cfg.load(config_file(tmp_path, '[embedding]\nprovider = "local"\nbackground = false\n'))
    assert off.embedding == EmbeddingSettings(provider="local", background=False)
    path = config_file(tmp_path, '[embedding]\nbackground = "no"\n')
    with pytest.raises(InvalidInput) as err:
        cfg.load(path)
    assert err.value.message == f"{path}: [embedding] background: must be true or false, not 'no'"


def test_init_starter_config_is_owner_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CTX_CONFIG", raising=False)
    init(None)
    assert (tmp_path / "config" / "ctx.toml").stat().st_mode & 0o777 == 0o600  # as before the atomic-write helper
    assert not [p.name for p in (tmp_path / "config").iterdir() if p.name.startswith(".tmp-")]


@pytest.mark.parametrize("url", ["host=x password=S3cretPW", "host=x password='S3cret PW'",
                                 "postgresql://u:S3cret@PW@127.0.0.1:1/db", "postgresql://u:S3cret/PW@127.0.0.1:1/db"])
@pytest.mark.parametrize("command", [["config", "show"], ["stats"], ["serve", "mcp", "--stdio"],
                                     ["serve", "mcp", "--bind", "127.0.0.1:0"]])
def test_a_database_url_is_never_printed_with_its_password(tmp_path: Path, url: str, command: list[str]) -> None:
    """libpq's keyword form, and a raw "@" or "/" in the password: a clear config error (exit 2) on
    the CLI and at server start, no part of the password in it, and no connection tried."""
    import subprocess
    import sys

    (tmp_path / "ctx.toml").write_text("")
    env = {**os.environ, "CTX_DATABASE_URL": url, "CTX_CONFIG": str(tmp_path / "ctx.toml")}
    proc = subprocess.run([sys.executable, "-m", "cairn_servers.ctx.cli", *command], env=env, input="",
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "S3cret" not in proc.stderr + proc.stdout and "PW" not in proc.stderr + proc.stdout
    assert proc.stderr.startswith("ctx: error: ") and "[db] url" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_effective_config_masks_passwords_inside_urls_written_in_the_file(tmp_path: Path) -> None:
    c = cfg.load(config_file(tmp_path, """
[embedding]
provider = "openai"
model = "m"
dims = 3
url = "https://u:S3cretPW@127.0.0.1:1/v1"
[tools.script.t]
path = "t.lua"
upstream = "http://bot:pa@ss@wiki.internal/api"
dsn = "host=db password='S3cret PW' dbname=x"
"""))
    shown = cfg.effective(c)
    assert shown["embedding"]["url"] == "https://u:***@127.0.0.1:1/v1"
    assert shown["tools"]["script"]["t"]["upstream"] == "http://bot:***@wiki.internal/api"
    assert shown["tools"]["script"]["t"]["dsn"] == "host=db password=*** dbname=x"
    assert "S3cret" not in cfg.to_toml(shown, "h") and "pa@ss" not in cfg.to_toml(shown, "h")
