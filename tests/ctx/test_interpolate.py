"""``${VAR}`` / ``${VAR:-default}`` in ctx.toml: expansion, errors naming variable, file and line, and
values from the environment kept out of every message."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn_servers.core import sanitize
from cairn_servers.core.errors import InvalidInput
from cairn_servers.ctx import config as cfg
from cairn_servers.ctx.interpolate import expand_document

from .conftest import config_file

SECRET = "tok-3f9a61c2e5b74d08"


@pytest.fixture(autouse=True)
def _clean_secrets(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(sanitize.SECRET_ENV, raising=False)
    monkeypatch.delenv("CTX_AUTH_TOKEN", raising=False)
    sanitize.clear_secrets()
    yield
    sanitize.clear_secrets()


def test_expands_strings_everywhere_and_only_strings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_TOKEN", SECRET)
    monkeypatch.setenv("KB_HOST", "git.example.org")
    monkeypatch.setenv("NOTES", "notes-dir")
    monkeypatch.setenv("EMPTY", "")
    monkeypatch.delenv("UNSET_X", raising=False)
    c = cfg.load(config_file(tmp_path, """
[db]
path = "${DB_DIR_UNSET:-state}/kb.sqlite"
[server]
auth_token = "${KB_TOKEN}"
cors_origins = ["https://${KB_HOST}"]
[connectors.filesystem.notes]
root = "${NOTES}"
include_globs = ["**/*.${EXT_UNSET:-md}", "$${literal}/*.txt", "$HOME/*.rst"]
[connectors.git.kb]
url = "https://${KB_HOST}/kb.git"
branch = "${EMPTY:-main}"
[tools.script.echo]
path = "tools/echo.lua"
api_key = "${KB_TOKEN}"
greeting = "hi ${EMPTY}there"
"${NOT_A_KEY}" = "keys are never expanded"
"""))
    assert c.db.path == tmp_path / "state" / "kb.sqlite"
    assert c.server.auth_token == SECRET
    assert c.server.cors_origins == ("https://git.example.org",)
    by = {x.source: x for x in c.connectors}
    assert by["filesystem:notes"].options["root"] == tmp_path / "notes-dir"  # relative to the config, after expansion
    assert by["filesystem:notes"].options["include_globs"] == ["**/*.md", "${literal}/*.txt", "$HOME/*.rst"]
    assert by["git:kb"].options["url"] == "https://git.example.org/kb.git"
    assert by["git:kb"].options["branch"] == "main"  # ":-" also covers a variable set to ""
    assert c.tools[0].config == {"api_key": SECRET, "greeting": "hi there", "${NOT_A_KEY}": "keys are never expanded"}
    assert c.from_env == {("server", "auth_token"), ("server", "cors_origins", 0), ("connectors", "filesystem", "notes", "root"),
                          ("connectors", "git", "kb", "url"), ("tools", "script", "echo", "api_key"),
                          ("tools", "script", "echo", "greeting")}
    assert SECRET not in repr(c)


def test_missing_variable_names_it_the_file_and_the_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CTX_TEST_TOKEN", raising=False)
    path = config_file(tmp_path, """# a comment mentioning "${CTX_TEST_TOKEN}" is not the line
[db]
path = "kb.sqlite"

[server]
bind = "127.0.0.1:7331"
auth_token = "${CTX_TEST_TOKEN}"
""")
    with pytest.raises(InvalidInput) as info:
        cfg.load(path)
    assert info.value.message == (
        f"{path}:7: [server] auth_token: ${{CTX_TEST_TOKEN}} is not set and has no default. "
        "Set CTX_TEST_TOKEN in the environment, or write ${CTX_TEST_TOKEN:-default}.")
    assert info.value.details == {"file": str(path), "key": "[server] auth_token", "line": 7}


def test_missing_variable_in_a_list_and_a_script_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_SUCH_VAR", raising=False)
    path = config_file(tmp_path, '[connectors.filesystem.a]\nroot = "x"\ninclude_globs = [\n  "*.md",\n  "${NO_SUCH_VAR}/*.md",\n]\n')
    with pytest.raises(InvalidInput, match=r"ctx.toml:5: \[connectors.filesystem.a\] include_globs: \$\{NO_SUCH_VAR\} is not set"):
        cfg.load(path)
    path = config_file(tmp_path, '[tools.script.t]\npath = "t.lua"\ntoken = "Bearer ${NO_SUCH_VAR}"\n')
    with pytest.raises(InvalidInput, match=r"ctx.toml:3: \[tools.script.t\] token: \$\{NO_SUCH_VAR\} is not set"):
        cfg.load(path)


@pytest.mark.parametrize("value, shown", [("${1BAD}", "${1BAD}"), ("${OPEN", "${OPEN"), ("${}", "${}"),
                                          ("${A B}", "${A B}"), ("${X:default}", "${X:default}")])
def test_malformed_reference(tmp_path: Path, value: str, shown: str) -> None:
    path = config_file(tmp_path, f'[embedding]\nmodel = "{value}"\n')
    with pytest.raises(InvalidInput) as info:
        cfg.load(path)
    assert info.value.message == (
        f"{path}:2: [embedding] model: {shown} is not a valid reference: write ${{NAME}} or ${{NAME:-default}} "
        "(NAME is letters, digits and '_'), and $${ for a literal ${.")


def test_values_from_the_environment_never_appear_in_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTX_BIND", SECRET)
    path = config_file(tmp_path, '[server]\nbind = "${CTX_BIND}"\n')
    with pytest.raises(InvalidInput) as info:
        cfg.load(path)
    assert info.value.message == f"{path}: [server] bind: must be host:port, such as 127.0.0.1:7331, not '${{CTX_BIND}}'"
    # Inside a longer value, and in a list.
    monkeypatch.setenv("CTX_ORIGIN_HOST", SECRET)
    path = config_file(tmp_path, '[server]\ncors_origins = ["https://${CTX_ORIGIN_HOST}/path"]\n')
    with pytest.raises(InvalidInput) as info:
        cfg.load(path)
    assert SECRET not in info.value.message
    assert "'https://${CTX_ORIGIN_HOST}/path' is not an origin" in info.value.message


def test_a_token_variable_set_to_empty_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``auth_token = "${T}"`` with ``T=""`` would silently serve without authentication."""
    monkeypatch.setenv("CTX_EMPTY_TOKEN", "")
    path = config_file(tmp_path, '[server]\nauth_token = "${CTX_EMPTY_TOKEN}"\n')
    with pytest.raises(InvalidInput) as info:
        cfg.load(path)
    assert info.value.message == (f"{path}: [server] auth_token: ${{CTX_EMPTY_TOKEN}} expands to an empty string, "
                                  "which would serve without a token. Set the variable, or remove auth_token")
    monkeypatch.setenv("CTX_AUTH_TOKEN", "from-the-env-override")  # the override still wins
    assert cfg.load(path).server.auth_token == "from-the-env-override"
    assert cfg.load(config_file(tmp_path, '[server]\nauth_token = "${CTX_EMPTY_TOKEN:-}"\n', "b.toml"))


def test_expanded_secrets_are_scrubbed_from_messages_and_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from cairn_servers.core import log

    monkeypatch.setenv("CTX_GIT_SECRET", SECRET)
    monkeypatch.setenv("CTX_NOTES_DIR", str(tmp_path / "notes-folder"))
    cfg.load(config_file(tmp_path, '[connectors.git.kb]\nurl = "https://example.org/${CTX_GIT_SECRET}.git"\n'
                                   '[connectors.filesystem.notes]\nroot = "${CTX_NOTES_DIR}"\n'))
    assert sanitize.scrub(f"git clone https://example.org/{SECRET}.git failed") == \
        "git clone https://example.org/***.git failed"
    assert str(tmp_path / "notes-folder") in sanitize.scrub(f"{tmp_path}/notes-folder: not found")  # paths stay
    monkeypatch.setattr(log, "level", log.DEBUG)
    log.debug(f"calling with {SECRET}")
    assert capsys.readouterr().err.endswith("calling with ***\n")
    # Child processes (the Lua workers) learn which variables hold secrets, not their values.
    import os

    assert os.environ[sanitize.SECRET_ENV] == "CTX_GIT_SECRET"


def test_expand_document_keeps_types_and_reports_templates() -> None:
    data = {"a": {"n": 1, "b": True, "s": "${X}-${Y:-y}", "l": ["${X}", 2]}}
    out, exp = expand_document(data, Path("c.toml"), None, environ={"X": "secretvalue"})
    assert out == {"a": {"n": 1, "b": True, "s": "secretvalue-y", "l": ["secretvalue", 2]}}
    assert exp.from_env == {("a", "s"): ("${X}-${Y:-y}", "secretvalue-y"), ("a", "l", 0): ("${X}", "secretvalue")}
    assert exp.mask("bad 'secretvalue-y' and secretvalue") == "bad '${X}-${Y:-y}' and ${X}"
    assert data["a"]["s"] == "${X}-${Y:-y}"  # the input is not changed
