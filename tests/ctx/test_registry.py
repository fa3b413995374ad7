"""``ctx registry list|search|info|install|update`` on real git registries built in the test: a registry
cloned (``file://``, shallow) into the data directory, an extension installed beside ctx.toml and run,
an update that reports what changed, paths that try to leave a registry refused, and the errors with
their exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cairn_servers.ctx.cli import main

from .conftest import free_port, git, make_repo, write

TOOL = """\
tool = {
  name = "word-count",
  description = "How many documents match a query.",
  parameters = { { name = "query", type = "string", required = true, description = "what to look for" } },
}

function tool.execute(params, context)
  local hits = context.search(params.query, { limit = 5 })
  return { query = params.query, documents = #hits, first = hits[1] and hits[1].title or nil }
end
"""
AGENT = """\
agent = {}
function agent.resolve(args, config, context)
  local hits = context.search("deploy", { limit = 1 })
  return { system = "On call. First read: " .. hits[1].title, messages = {} }
end
return agent
"""
CONNECTOR = """\
connector = {}
function connector.scan(config)
  return { { source_id = "n1", title = "Note", body = "A note from the registry." } }
end
"""
MANIFEST = """\
[registry]
name = "team"
description = "Our extensions"

[tools.word-count]
description = "Count the documents that match a query"
path = "tools/word-count/tool.lua"
tags = ["search", "stats"]
host_apis = ["context"]

[agents.oncall]
description = "On-call helper"
path = "agents/oncall/agent.lua"
tags = ["ops"]
tools = ["search"]

[connectors.notes]
description = "Notes from the team wiki"
path = "connectors/notes/connector.lua"
tags = ["wiki"]
required_config = ["space"]
"""
REGISTRY = {"registry.toml": MANIFEST, "tools/word-count/tool.lua": TOOL,
            "tools/word-count/README.md": "# word-count\n\nCounts.\n", "agents/oncall/agent.lua": AGENT,
            "connectors/notes/connector.lua": CONNECTOR}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project (config/ctx.toml over two documents) with the registry ``team`` at file://.../registry."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CTX_CONFIG", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    make_repo(tmp_path / "registry", REGISTRY)
    write(tmp_path, {"docs/deploy.md": "# Deploy checklist\n\nDeploy on Tuesdays.\n",
                     "docs/vpn.md": "# VPN\n\nInstall WireGuard.\n",
                     "config/ctx.toml": f'[db]\npath = "kb.sqlite"\n\n[connectors.filesystem.docs]\n'
                                        f'root = "{tmp_path / "docs"}"\n\n[registries.team]\n'
                                        f'url = "file://{tmp_path / "registry"}"\n'})
    return tmp_path / "config" / "ctx.toml"


def ctx(capsys: pytest.CaptureFixture[str], *argv: str, fmt: str = "--json") -> tuple[int, object, str]:
    code = main([*argv, fmt])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if fmt == "--json" and out.strip() else out), err


def test_install_list_search_info(project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, listed, err = ctx(capsys, "registry", "list")
    assert code == 0, err
    assert isinstance(listed, dict) and listed["extensions"] == []
    assert listed["registries"][0]["installed"] is False
    code, done, err = ctx(capsys, "registry", "install")
    assert code == 0, err
    assert isinstance(done, dict)
    [cloned] = done["registries"]
    checkout = tmp_path / "data" / "ctx" / "registries" / "team"
    assert (cloned["status"], cloned["path"], cloned["counts"]) == ("cloned", str(checkout),
                                                                     {"tool": 1, "agent": 1, "connector": 1})
    assert cloned["commit"] == git(tmp_path / "registry", "rev-parse", "HEAD").strip()
    assert [p.name for p in checkout.parent.iterdir()] == ["team"]  # no half-made clone left aside
    code, text, _ = ctx(capsys, "config", "show", fmt="--text")  # shown as written, defaults filled in
    assert isinstance(text, str) and text.endswith(
        f'[registries.team]\nurl = "file://{tmp_path}/registry"\nbranch = "main"\nreadonly = false\n'
        "auto_update = false\ntimeout = 120.0\n")
    code, done, _ = ctx(capsys, "registry", "install", "team")  # once is enough
    assert code == 0 and isinstance(done, dict) and done["registries"][0]["status"] == "present"

    code, text, _ = ctx(capsys, "registry", "list", fmt="--text")
    assert code == 0 and text == (
        f"Registries:\n\n  team — {checkout} (git)\n    1 connectors, 1 tools, 1 agents\n\nAvailable extensions:\n\n"
        "  agents/oncall — On-call helper [ops] (from: team)\n"
        "  connectors/notes — Notes from the team wiki [wiki] (from: team)\n"
        "  tools/word-count — Count the documents that match a query [search, stats] (from: team)\n")
    code, hits, _ = ctx(capsys, "registry", "search", "COUNT", "stats")
    assert code == 0 and isinstance(hits, list) and [h["id"] for h in hits] == ["tools/word-count"]
    code, hits, _ = ctx(capsys, "registry", "search", "count", "wiki")  # every word must match
    assert code == 0 and hits == []
    code, text, _ = ctx(capsys, "registry", "search", "zebra", fmt="--text")
    assert text == "No extensions matching 'zebra'.\n"
    code, shown, err = ctx(capsys, "registry", "info", "word-count")
    assert code == 0, err
    assert isinstance(shown, dict)
    assert (shown["id"], shown["script"], shown["readme"], shown["host_apis"], shown["problem"]) == (
        "tools/word-count", str(checkout / "tools/word-count/tool.lua"), "# word-count\n\nCounts.\n", ["context"], None)
    code, text, _ = ctx(capsys, "registry", "info", "connectors/notes", fmt="--text")
    assert text == (f"Extension: connectors/notes\nRegistry:  team\nScript:    {checkout}/connectors/notes/connector.lua\n"
                    "Description: Notes from the team wiki\nTags: wiki\nRequired config: space\n"
                    "Install: ctx registry install connectors/notes\n")


def test_installed_extensions_run(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ctx(capsys, "registry", "install")[0] == 0
    assert ctx(capsys, "sync", "--progress", "none")[0] == 0
    before = project.read_text()
    code, done, err = ctx(capsys, "registry", "install", "tools/word-count")
    assert code == 0, err
    assert isinstance(done, dict)
    assert (done["path"], done["registered"], done["next"]) == ("config/tools/word-count.lua", True,
                                                                "ctx tool test word-count")
    assert Path(done["path"]).read_text() == TOOL
    assert project.read_text() == before + '\n[tools.script.word-count]\npath = "tools/word-count.lua"\n'
    code, result, err = ctx(capsys, "tool", "test", "word-count", "--param", "query=deploy")
    assert code == 0, err
    assert result == {"result": {"query": "deploy", "documents": 1, "first": "Deploy checklist"}}

    # never over an existing script without --force; with it, the script is replaced and ctx.toml kept
    code, _, err = ctx(capsys, "registry", "install", "tools/word-count")
    assert code == 4 and err == ("ctx: error: config/tools/word-count.lua already exists; `ctx registry install "
                                 "tools/word-count --force` replaces the script.\n")
    Path(done["path"]).write_text("-- mine\n")
    after = project.read_text()
    code, done, err = ctx(capsys, "registry", "install", "tools/word-count", "--force")
    assert code == 0 and isinstance(done, dict) and done["registered"] is False, err
    assert Path(done["path"]).read_text() == TOOL and project.read_text() == after

    # an agent is registered with its description and tools; a connector's section is only printed
    code, done, err = ctx(capsys, "registry", "install", "agents/oncall")
    assert code == 0 and isinstance(done, dict), err
    code, shown, err = ctx(capsys, "agent", "show", "oncall")
    assert code == 0 and isinstance(shown, dict) and shown["system"] == "On call. First read: Deploy checklist", err
    assert shown["description"] == "On-call helper" and shown["tools"] == ["search"]
    code, text, err = ctx(capsys, "registry", "install", "notes", fmt="--text")
    assert code == 0 and isinstance(text, str), err
    assert text.endswith("Add this section to config/ctx.toml, with the settings it needs:\n\n[connectors.script.notes]\n"
                         'path = "connectors/notes.lua"\n\nThen try it: ctx connector test notes\n')
    assert "connectors.script" not in project.read_text()
    assert sorted(p.name for p in (project.parent / "tools").iterdir()) == ["word-count.lua"]  # no temporary left


def test_update_reports_what_changed(project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ctx(capsys, "registry", "install")[0] == 0
    code, reports, err = ctx(capsys, "registry", "update")
    assert code == 0 and isinstance(reports, list) and reports[0]["status"] == "up to date", err
    repo = tmp_path / "registry"
    write(repo, {"tools/word-count/tool.lua": TOOL.replace("limit = 5", "limit = 9"),
                 "tools/echo/tool.lua": 'tool = { name = "echo" }\nfunction tool.execute(p) return p end\n',
                 "registry.toml": MANIFEST.replace("[connectors.notes]", "[connectors.gone]").split("[connectors.gone]")[0]})
    git(repo, "rm", "-q", "-r", "connectors")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "more", when="2024-03-02T12:00:00Z")
    old = reports[0]["to"]
    code, reports, err = ctx(capsys, "registry", "update", "team")
    assert code == 0, err
    assert isinstance(reports, list)
    [r] = reports
    assert (r["status"], r["from"], r["to"]) == ("updated", old, git(repo, "rev-parse", "HEAD").strip())
    # echo has no manifest entry: a registry with registry.toml offers what it lists
    assert (r["added"], r["removed"], r["changed"]) == ([], ["connectors/notes"], ["tools/word-count"])
    checkout = tmp_path / "data" / "ctx" / "registries" / "team"
    assert "limit = 9" in (checkout / "tools/word-count/tool.lua").read_text()
    (checkout / "local.txt").write_text("mine")
    code, text, _ = ctx(capsys, "registry", "update", fmt="--text")
    assert code == 0 and text == ("team: skipped (uncommitted changes in the checkout; commit or discard them "
                                  "first)\n")
    # history rewritten upstream: no fast-forward, the checkout is left as it was
    (checkout / "local.txt").unlink()
    git(repo, "commit", "-q", "--amend", "-m", "rewritten", when="2024-03-03T12:00:00Z")
    code, _, err = ctx(capsys, "registry", "update", "team")
    assert code == 4 and err.startswith("ctx: error: Registry 'team': 'main' cannot be fast-forwarded (") and err.endswith(
        f"). Remove {checkout} and run `ctx registry install team` to clone it afresh.\n"), err
    assert git(checkout, "rev-parse", "HEAD").strip() == r["to"]


def test_paths_leaving_a_registry_are_refused(project: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, {"outside.lua": TOOL, "local/tools/ok/tool.lua": TOOL})
    (tmp_path / "local/tools/link").mkdir()
    (tmp_path / "local/tools/link/tool.lua").symlink_to(tmp_path / "outside.lua")
    (tmp_path / "local/tools/dir").symlink_to(tmp_path / "local/tools/ok")
    write(tmp_path / "local", {"registry.toml": '[tools.climb]\npath = "../outside.lua"\n[tools.abs]\npath = '
                                                f'"{tmp_path}/outside.lua"\n[tools.link]\npath = "tools/link/tool.lua"\n'
                                                '[tools.ok]\npath = "tools/ok/tool.lua"\n'})
    with project.open("a") as fh:
        fh.write('\n[registries.mine]\npath = "../local"\n')
    code, listed, err = ctx(capsys, "registry", "list")
    assert code == 0 and isinstance(listed, dict), err
    problems = {e["id"]: e["problem"] for e in listed["extensions"] if e["registry"] == "mine"}
    assert problems == {"tools/abs": f"'{tmp_path}/outside.lua' leaves the registry or is not a plain relative path",
                        "tools/climb": "'../outside.lua' leaves the registry or is not a plain relative path",
                        "tools/link": "'tools/link/tool.lua' passes through a symlink (tools/link/tool.lua); refused",
                        "tools/ok": None}
    for ident, why in (("tools/climb", problems["tools/climb"]), ("tools/link", problems["tools/link"])):
        code, _, err = ctx(capsys, "registry", "install", ident)
        assert code == 2 and err == (f"ctx: error: Registry 'mine' offers {ident} with a bad path: {why}; not "
                                     "installed.\n")
    assert not (project.parent / "tools").exists()
    # without a manifest, symlinked folders are not followed
    (tmp_path / "local/registry.toml").unlink()
    code, listed, _ = ctx(capsys, "registry", "list")
    assert isinstance(listed, dict)
    assert {e["id"]: e["problem"] for e in listed["extensions"]} == {
        "tools/link": "'tools/link/tool.lua' passes through a symlink (tools/link/tool.lua); refused", "tools/ok": None}


def test_a_script_that_does_not_load_is_not_installed(project: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, {"bad/tools/broken/tool.lua": "tool = {\n", "bad/tools/half/tool.lua": "tool = {}\n",
                     "bad/connectors/odd/connector.lua": "connector = {}\nfunction connector.scan(config)\n",
                     # an attempt to run code at install time by closing a wrapper: it is only compiled
                     "bad/agents/sneaky/agent.lua": "end error('ran at install') local function f()\n"})
    with project.open("a") as fh:
        fh.write('\n[registries.bad]\npath = "../bad"\n')
    before = project.read_text()
    code, _, err = ctx(capsys, "registry", "install", "tools/broken")
    assert code == 8 and err.startswith("ctx: error: Lua tool 'broken': Lua syntax error: broken.lua:")
    code, _, err = ctx(capsys, "registry", "install", "half")
    assert code == 8 and err == ("ctx: error: Lua tool 'half': half.lua must define `function tool.execute(params, "
                                 "context)`.\n")
    code, _, err = ctx(capsys, "registry", "install", "connectors/odd")
    assert code == 8 and err == ("ctx: error: Lua connector 'odd' from registry 'bad': Lua syntax error: odd.lua:3: "
                                 "'end' expected (to close 'function' at line 2) near <eof>\n")
    code, _, err = ctx(capsys, "registry", "install", "sneaky")
    assert code == 8 and err == ("ctx: error: Lua agent 'sneaky' from registry 'bad': Lua syntax error: sneaky.lua:1: "
                                 "<eof> expected near 'end'\n")
    assert project.read_text() == before
    assert [sorted(p.iterdir()) for p in project.parent.iterdir() if p.is_dir()] == [[], [], []]


def test_a_git_that_hangs_is_stopped_at_the_timeout(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A server that accepts the connection and never answers: git (and its helper) is killed at 1 s."""
    import socket
    import time

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with project.open("a") as fh:
            fh.write(f'\n[registries.slow]\nurl = "http://127.0.0.1:{port}/r.git"\ntimeout = 1\n')
        started = time.monotonic()
        code, _, err = ctx(capsys, "registry", "install", "slow")
        took = time.monotonic() - started
    assert code == 6 and err == ("ctx: error: Registry 'slow': git took longer than 1 s. Raise `timeout` in the "
                                 "registry's section, or check the network.\n")
    assert took < 5, took
    assert list((project.parent.parent / "data" / "ctx" / "registries").iterdir()) == []  # the clone aside: gone


@pytest.mark.parametrize("extra, argv, exit_code, message", [
    ("", ["registry", "install", "nope"], 3,
     "No registry or extension named 'nope'. Registries: team; their extensions: `ctx registry list`."),
    ("", ["registry", "update", "nope"], 3, "No registry named 'nope'. Registries: team."),
    ("", ["registry", "info", "tools/nope"], 3,
     "No extension 'tools/nope' in any registry. Not installed yet: team (run `ctx registry install`)."),
    ("", ["registry", "info", "widgets/x"], 2, "'widgets/x': the kind is one of tools, agents, connectors "
                                               "(as in tools/NAME)."),
    ("", ["registry", "update", "team"], 3, "Registry 'team' is not installed at {data}/ctx/registries/team. "
                                           "Run `ctx registry install team`."),
    ('[registries.gone]\nurl = "{tmp}/missing"\n', ["registry", "install", "gone"], 3,
     "Registry 'gone': no git repository at {tmp}/missing (fatal: repository '{tmp}/missing' does not exist). "
     "Fix `url` in [registries.gone]."),
    ('[registries.twig]\nurl = "file://{tmp}/registry"\nbranch = "nope"\n', ["registry", "install", "twig"], 3,
     "Registry 'twig': file://{tmp}/registry has no branch 'nope'. Set `branch` in [registries.twig]."),
    ('[registries.far]\nurl = "http://127.0.0.1:{port}/r.git"\n', ["registry", "install", "far"], 5,
     "Registry 'far': cannot clone http://127.0.0.1:{port}/r.git: fatal: unable to access "
     "'http://127.0.0.1:{port}/r.git/': Failed to connect to 127.0.0.1 port {port} after ... Check the URL and the "
     "network."),  # curl's message says how many ms it tried
    ("[registries.empty]\nreadonly = true\n", ["registry", "list"], 2,
     "config/ctx.toml: [registries.empty]: needs `url` (a git repository to clone) or `path` (a folder of "
     "extensions), or both"),
    ('[registries.x]\nurl = "-uhoh"\n', ["registry", "list"], 2,
     "config/ctx.toml: [registries.x] url: must be a git URL or a path, not '-uhoh'"),
])
def test_errors(project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: str, argv: list[str],
                exit_code: int, message: str) -> None:
    port = free_port()
    fill = {"tmp": str(tmp_path), "data": str(tmp_path / "data"), "port": str(port)}
    with project.open("a") as fh:
        fh.write("\n" + extra.format(**fill))
    code, _, err = ctx(capsys, *argv)
    head, _, tail = f"ctx: error: {message.format(**fill)}\n".partition("...")
    assert code == exit_code and err.startswith(head) and err.endswith(tail), err


def test_a_password_in_a_registry_url_is_never_shown(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    with project.open("a") as fh:
        fh.write(f'\n[registries.private]\nurl = "http://ci:s3cret-pass@127.0.0.1:{port}/r.git"\n')
    code, listed, _ = ctx(capsys, "registry", "list")
    assert code == 0 and isinstance(listed, dict)
    assert listed["registries"][1]["url"] == f"http://ci:***@127.0.0.1:{port}/r.git"
    code, _, err = ctx(capsys, "registry", "install", "private")
    assert code == 5 and f"***@127.0.0.1:{port}/r.git" in err and "s3cret" not in err
    code, reports, err = ctx(capsys, "registry", "update")  # team is not installed; private fails: both reported
    assert code == 3 and isinstance(reports, list) and [r["status"] for r in reports] == ["failed", "failed"]
    assert "s3cret" not in json.dumps(reports) + err


def test_an_agent_in_toml_becomes_an_inline_agent(project: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A registry folder without git or manifest (read by convention); a TOML agent must fit ctx.toml."""
    write(tmp_path, {"folder/agents/reviewer/agent.toml": 'description = "Reviews a change"\nsystem_prompt = '
                                                          '"Review the change to {{area}}."\narguments = [{ name = '
                                                          '"area", required = true }]\n',
                     "folder/agents/loose/agent.toml": 'system_prompt = "x"\n[other]\nkey = 1\n'})
    with project.open("a") as fh:
        fh.write('\n[registries.folder]\npath = "../folder"\n')
    code, done, err = ctx(capsys, "registry", "install", "agents/reviewer")
    assert code == 0 and isinstance(done, dict) and done["path"] is None, err
    assert project.read_text().endswith('\n[agents.inline.reviewer]\ndescription = "Reviews a change"\n'
                                        'system_prompt = "Review the change to {{area}}."\narguments = [{ name = '
                                        '"area", required = true }]\n')
    code, shown, err = ctx(capsys, "agent", "show", "reviewer", "--arg", "area=docs")
    assert code == 0 and isinstance(shown, dict) and shown["system"] == "Review the change to docs.", err
    before = project.read_text()
    code, _, err = ctx(capsys, "registry", "install", "loose")
    assert code == 2 and err == ("ctx: error: agents/loose from registry 'folder' does not fit ctx.toml: "
                                 "config/ctx.toml: unknown section [other]. Known sections: db, chunking, retrieval, "
                                 "embedding, server, connectors, tools, agents, registries.\n")
    assert project.read_text() == before
    code, _, err = ctx(capsys, "registry", "install", "reviewer")
    assert code == 4 and err == ("ctx: error: An agent named 'reviewer' is already in config/ctx.toml; edit or remove it "
                                 "there.\n")
