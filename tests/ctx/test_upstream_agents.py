"""Context Harness's agent routes on a real server: ``GET /agents/list`` and ``POST /agents/{name}/prompt``
answer as its documentation shows them (the bodies and shapes of its agents guide and specification), as
aliases of ``GET /agents`` and ``POST /agents/{name}`` (one declaration each, in /openapi.json too), behind
the same guards: a GET never runs an agent, and a page of another site cannot POST without a token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cairn_servers.ctx import config as cfg
from cairn_servers.ctx.http import create_app
from cairn_servers.ctx.ops import OPS

from .conftest import config_file, serving, synced, write

pytestmark = pytest.mark.filterwarnings("ignore:.*(removed|deprecated) as of 2026")

# The agents of Context Harness's agents guide: an inline code-reviewer and a Lua incident-responder
# that pre-searches the runbooks and greets the user.
CONFIG = """
[db]
path = "data/ctx.sqlite"

[connectors.filesystem.runbooks]
root = "docs/runbooks"

[tools.script.create_jira_ticket]
path = "tools/jira.lua"

[agents.inline.code-reviewer]
description = "Reviews code changes against project conventions"
tools = ["search", "get"]
system_prompt = "You are a senior code reviewer for this project."

[agents.script.incident-responder]
path = "agents/incident-responder.lua"
timeout = 10
description = "Helps triage production incidents with relevant runbooks"
tools = ["search", "get", "create_jira_ticket"]
search_sources = ["runbooks"]
arguments = [
  { name = "service", description = "The service experiencing the incident" },
  { name = "severity", description = "Incident severity (P1, P2, P3)" },
]
"""

RESPONDER = """
local agent = {}
function agent.resolve(args, config, context)
  local service = args.service or "unknown"
  local severity = args.severity or "P2"
  local runbooks = context.search(service .. " incident runbook", { limit = 5 })
  return {
    system = string.format("You are an incident responder for the %s service (%s severity).", service, severity),
    messages = { { role = "assistant", content = string.format(
      "I'm ready to help with the %s %s incident. I've loaded %d relevant runbooks.", severity, service, #runbooks) } },
  }
end
return agent
"""

JIRA = """
tool = {description = "Open a ticket", parameters = {{name = "title", type = "string", required = true}}}
function tool.execute(params, context) return {key = "OPS-1"} end
"""

RUNBOOKS = {
    "docs/runbooks/payments.md": "# payments-api incident runbook\n\nDrain the payments-api queue, then restart.\n",
    "docs/runbooks/search.md": "# search incident runbook\n\nRebuild the index from the last snapshot.\n",
}

# The example bodies: the agents guide sends the arguments bare, the specification wraps them.
GUIDE_BODY = {"service": "payments-api", "severity": "P1"}
SPEC_BODY = {"arguments": {"service": "payments-api", "severity": "P1"}}
SYSTEM = "You are an incident responder for the payments-api service (P1 severity)."
GREETING = "I'm ready to help with the P1 payments-api incident. I've loaded 2 relevant runbooks."


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("upstream-agents")
    write(root, {**RUNBOOKS, "agents/incident-responder.lua": RESPONDER, "tools/jira.lua": JIRA})
    return synced(config_file(root, CONFIG))


@pytest.fixture(scope="module")
def base(kb: Path) -> Iterator[str]:
    with serving(create_app(cfg.load(kb))) as url:
        yield url


def test_agents_list_has_upstreams_shape(base: str) -> None:
    r = httpx.get(f"{base}/agents/list")
    assert r.status_code == 200, r.text
    agents = r.json()["agents"]
    # upstream's fields, with its values (source: toml | lua); ours add kind and search defaults
    assert [{k: a[k] for k in ("name", "description", "tools", "source", "arguments")} for a in agents] == [
        {"name": "code-reviewer", "description": "Reviews code changes against project conventions",
         "tools": ["search", "get"], "source": "toml", "arguments": []},
        {"name": "incident-responder", "description": "Helps triage production incidents with relevant runbooks",
         "tools": ["search", "get", "create_jira_ticket"], "source": "lua",
         "arguments": [
             {"name": "service", "description": "The service experiencing the incident", "required": False},
             {"name": "severity", "description": "Incident severity (P1, P2, P3)", "required": False}]}]
    assert r.json() == httpx.get(f"{base}/agents").json()  # the same operation


def test_agent_prompt_resolves_upstreams_example_bodies(base: str) -> None:
    answers = []
    for body in (GUIDE_BODY, SPEC_BODY):
        r = httpx.post(f"{base}/agents/incident-responder/prompt", json=body)
        assert r.status_code == 200, r.text
        answers.append(r.json())
    got = answers[0]
    assert got["system"] == SYSTEM
    assert got["tools"] == ["search", "get", "create_jira_ticket"]
    assert got["messages"] == [{"role": "assistant", "content": GREETING}]
    assert answers[1] == got
    assert httpx.post(f"{base}/agents/incident-responder", json=GUIDE_BODY).json() == got  # the same operation
    # no arguments: the script's own defaults; an inline agent answers its static prompt
    r = httpx.post(f"{base}/agents/incident-responder/prompt", json={})
    assert r.status_code == 200 and r.json()["system"] == (
        "You are an incident responder for the unknown service (P2 severity).")
    r = httpx.post(f"{base}/agents/code-reviewer/prompt", json={})
    assert r.status_code == 200
    assert (r.json()["system"], r.json()["tools"], r.json()["messages"]) == (
        "You are a senior code reviewer for this project.", ["search", "get"], [])


@pytest.mark.parametrize("method, path, body, status, code, message", [
    ("POST", "/agents/nonexistent/prompt", {}, 404, "not_found",
     "No agent named 'nonexistent'. Agents: code-reviewer, incident-responder."),
    ("POST", "/agents/incident-responder/prompt", {"service": "x", "priority": "P1"}, 400, "bad_request",
     "Agent 'incident-responder': unknown argument 'priority'. Arguments: service, severity."),
    ("POST", "/agents/incident-responder/prompt?service=x", None, 400, "bad_request",
     "POST /agents/incident-responder/prompt takes the agent's arguments as a JSON body"),
    # a GET never runs an agent
    ("GET", "/agents/incident-responder/prompt", None, 405, "method_not_allowed",
     "GET is not allowed on /agents/incident-responder/prompt."),
    ("GET", "/agents/list?verbose=1", None, 400, "bad_request",
     "Invalid parameter for 'agent_list': verbose: is not an allowed"),
])
def test_upstream_routes_errors(base: str, method: str, path: str, body: object, status: int, code: str,
                                message: str) -> None:
    r = httpx.request(method, f"{base}{path}", json=body)
    assert r.status_code == status and r.json()["error"]["code"] == code, r.text
    assert r.json()["error"]["message"].startswith(message), r.text


def test_upstream_routes_keep_the_guards(kb: Path, base: str) -> None:
    """No token: a page of another site cannot make the browser resolve an agent (a Lua agent runs
    searches); a page of this machine can. With a token, both routes need it."""
    evil = {"Origin": "https://evil.example"}
    r = httpx.post(f"{base}/agents/incident-responder/prompt", json=GUIDE_BODY, headers=evil)
    assert r.status_code == 403 and r.json()["error"]["message"].startswith(
        "Origin 'https://evil.example' is not allowed: a web page of another site cannot call this server")
    assert httpx.get(f"{base}/agents/list", headers=evil).status_code == 403
    r = httpx.post(f"{base}/agents/incident-responder/prompt", json=GUIDE_BODY,
                   headers={"Origin": "http://localhost:3000"})
    assert r.status_code == 200 and r.json()["system"] == SYSTEM
    with serving(create_app(cfg.load(kb), auth_token="s3cret-token")) as url:
        assert httpx.get(f"{url}/agents/list").status_code == 401
        assert httpx.post(f"{url}/agents/code-reviewer/prompt", json={}).status_code == 401
        r = httpx.post(f"{url}/agents/code-reviewer/prompt", json={}, headers={"Authorization": "Bearer s3cret-token"})
        assert r.status_code == 200


def test_aliases_are_declared_once_and_in_openapi(base: str) -> None:
    assert OPS["agent_list"].extra["http_aliases"] == (("GET", "/agents/list"),)
    assert OPS["agent_show"].extra["http_aliases"] == (("POST", "/agents/{name}/prompt"),)
    paths = httpx.get(f"{base}/openapi.json").json()["paths"]
    listed, prompt = paths["/agents/list"]["get"], paths["/agents/{name}/prompt"]["post"]
    assert listed["operationId"] == "agent_list_alias" and prompt["operationId"] == "agent_show_alias"
    # the alias documents exactly what the main route does (parameters, body, answers)
    main = paths["/agents/{name}"]["post"]
    assert {k: v for k, v in prompt.items() if k not in ("operationId", "summary")} == {
        k: v for k, v in main.items() if k not in ("operationId", "summary")}
    assert list(paths["/agents/{name}/prompt"]) == ["post"]
