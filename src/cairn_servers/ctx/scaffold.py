"""``ctx tool|agent|connector init NAME``: a minimal, working Lua extension to start from.

Each writes one script beside the configuration (``tools/NAME.lua``, ``agents/NAME.lua`` or
``connectors/NAME.lua`` in the directory that holds ``ctx.toml``, or will: ``./config`` when there is
none yet), so the ``path`` of the section it prints resolves to it. It never edits ``ctx.toml`` and never
overwrites a file: the script appears whole or not at all (written aside, then linked into place, which
fails when the name is taken). As generated, the tool passes ``ctx tool test NAME``, the agent
``ctx agent show NAME`` and the connector ``ctx connector test NAME``, once their section is added.

``ctx connector test NAME`` (:func:`connector_test`) scans a configured connector and reads its items as
a sync would, writing nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn_servers.core.errors import Conflict, InvalidInput, NotFound, StorageError

if TYPE_CHECKING:
    from cairn_servers.ctx.config import Config

KINDS = ("tool", "agent", "connector")
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789_-")
MAX_NAME = 64

_TOOL = """\
-- {name}: a ctx Lua tool. ctx checks the parameters against this list before execute runs.
-- context.search/get/sources reach the knowledge base; json, log, http (hosts in allow_hosts) and env
-- (names in allow_env) are there too. Try it: ctx tool test {name} --param query=deploy
tool = {{
  name = "{name}",
  description = "List the titles of the documents that match a query.",
  parameters = {{
    {{ name = "query", type = "string", required = true, description = "what to look for" }},
    {{ name = "limit", type = "integer", default = 5, description = "maximum number of documents" }},
  }},
}}

function tool.execute(params, context)
  local hits = context.search(params.query, {{ limit = params.limit }})
  local titles = {{}}
  for _, hit in ipairs(hits) do
    titles[#titles + 1] = hit.title
  end
  return {{ query = params.query, count = #hits, titles = titles }}
end
"""

_AGENT = """\
-- {name}: a ctx Lua agent. Its description, tools, arguments and system_prompt are in ctx.toml;
-- resolve builds the prompt (context.search uses the agent's search defaults unless given others).
-- Try it: ctx agent show {name} --arg topic=deploy
agent = {{}}

function agent.resolve(args, config, context)
  local hits = context.search(args.topic, {{ limit = 3 }})
  local lines = {{}}
  for i, hit in ipairs(hits) do
    lines[#lines + 1] = string.format("%d. %s (id %s)", i, hit.title, hit.id)
  end
  local found = #lines > 0 and table.concat(lines, "\\n") or "No document matches yet."
  return {{
    system = context.system_prompt .. "\\n\\nDocuments about " .. args.topic .. ":\\n" .. found,
    messages = {{ {{ role = "assistant", content = "I found " .. #hits .. " document(s). What do you need?" }} }},
  }}
end

return agent
"""

_CONNECTOR = """\
-- {name}: a ctx Lua connector. scan returns every document of the source; ctx writes the new and
-- changed ones and removes those no longer returned. config holds the section's other keys
-- (here `entries`); http, json, log and env are there to fetch real data.
-- Try it: ctx connector test {name}, then ctx sync {name}
connector = {{}}

function connector.scan(config)
  local items = {{}}
  for i, entry in ipairs(config.entries or {{}}) do
    items[#items + 1] = {{
      source_id = entry.id or ("entry-" .. i),
      title = entry.title,
      body = entry.body or "",
      updated_at = entry.updated,
    }}
  end
  return items
end
"""

_SECTIONS = {
    "tool": '[tools.script.{name}]\npath = "tools/{name}.lua"\ntimeout = 30\n',
    "agent": ('[agents.script.{name}]\npath = "agents/{name}.lua"\ntimeout = 30\n'
              'description = "Answers questions about a topic from the matching documents"\n'
              'tools = ["search", "get"]\n'
              'arguments = [{{ name = "topic", description = "what the conversation is about", required = true }}]\n'
              'system_prompt = "You help with {{{{topic}}}}. Cite the documents you use."\n'),
    "connector": ('[connectors.script.{name}]\npath = "connectors/{name}.lua"\ntimeout = 30\n'
                  'entries = [{{ id = "hello", title = "Hello", body = "The first document of {name}.", '
                  'updated = "2024-05-01" }}]\n'),
}
_TEMPLATES = {"tool": _TOOL, "agent": _AGENT, "connector": _CONNECTOR}
_NEXT = {"tool": "ctx tool test {name} --param query=deploy", "agent": "ctx agent show {name} --arg topic=deploy",
         "connector": "ctx connector test {name}"}


@dataclass
class Scaffold:
    """What ``init`` wrote and how to use it."""

    kind: str
    name: str
    path: str  # the script written
    config: str  # the ctx.toml its section goes into
    section: str  # the section to add
    next: str  # the command that tries it


def check_name(kind: str, name: str) -> None:
    """A name ctx.toml accepts for this kind (it is also the script's file name)."""
    if not name or not set(name) <= _NAME_CHARS or name.startswith("-") or len(name) > MAX_NAME:
        raise InvalidInput(f"{name[:70]!r} is not a valid {kind} name: use lowercase letters, digits, '_' and '-' "
                           f"(not first), at most {MAX_NAME} characters.")


def init(kind: str, name: str, config_path: Path) -> Scaffold:
    """Write the ``kind`` script ``name`` beside ``config_path`` (refusing to overwrite one) and say how
    to register it."""
    if kind not in KINDS:
        raise InvalidInput(f"Unknown kind {kind!r}: {', '.join(KINDS)}.")
    check_name(kind, name)
    folder = config_path.parent / f"{kind}s"
    dest = folder / f"{name}.lua"
    if dest.exists():
        raise Conflict(f"{dest} already exists; ctx {kind} init never overwrites a script. Choose another name "
                       "or remove the file.", details={"path": str(dest)})
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _create(dest, _TEMPLATES[kind].format(name=name).encode("utf-8"))
    except FileExistsError:
        raise Conflict(f"{dest} already exists; ctx {kind} init never overwrites a script. Choose another name "
                       "or remove the file.", details={"path": str(dest)}) from None
    except OSError as exc:
        raise StorageError(f"Cannot write {dest}: {exc.strerror}.") from None
    return Scaffold(kind, name, str(dest), str(config_path), _SECTIONS[kind].format(name=name),
                    _NEXT[kind].format(name=name))


def _create(dest: Path, data: bytes) -> None:
    """``dest`` with ``data``, whole or not at all, and only if it does not exist (``os.link`` refuses)."""
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.link(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def text(s: Scaffold) -> str:
    """What ``ctx KIND init`` prints."""
    return (f"Wrote {s.path}\nAdd this section to {s.config}:\n\n{s.section}\nThen try it: {s.next}")


def connector_test(conf: "Config", name: str, limit: int = 20) -> dict[str, Any]:
    """``ctx connector test NAME``: scan the connector ``NAME`` (or ``type:name``) and read its items as a
    sync would, writing nothing: how many, the first ``limit`` (id, title, date, size) and the warnings."""
    from cairn_servers.ctx import connectors
    from cairn_servers.ctx.times import iso

    if limit < 1:
        raise InvalidInput(f"--limit must be 1 or more, not {limit}.")
    chosen = [c for c in conf.connectors if name in (c.source, c.name)]
    if len(chosen) != 1:
        names = ", ".join(c.source for c in conf.connectors) or "none configured"
        if chosen:
            raise InvalidInput(f"{name!r} names {len(chosen)} connectors ({', '.join(c.source for c in chosen)}); "
                               "give one as type:name.")
        raise NotFound(f"No connector named {name!r}. Configured: {names}.")
    c = chosen[0]
    connector = connectors.create(c)
    items: list[dict[str, Any]] = []
    count = 0
    for entry in connector.scan():
        item = entry.load()
        if item is None:
            continue
        count += 1
        if len(items) < limit:  # the rest are counted, not kept
            items.append({"source_id": item.source_id, "title": item.title,
                          "updated_at": iso(item.updated_at) if item.updated_at is not None else None,
                          "chars": len(item.body)})
    return {"source": c.source, "items": count, "shown": items, "skipped": connector.skipped,
            "warnings": list(getattr(connector, "warnings", []))}


def connector_text(report: dict[str, Any]) -> str:
    lines = [f"{report['source']}: {report['items']} item(s), {report['skipped']} skipped (nothing written)"]
    for it in report["shown"]:
        lines.append(f"  {it['source_id']}  {it['title'] or ''}  {it['updated_at'] or '-'}  {it['chars']} chars")
    if report["items"] > len(report["shown"]):
        lines.append(f"  ... and {report['items'] - len(report['shown'])} more")
    lines.extend(f"  warning: {w}" for w in report["warnings"])
    return "\n".join(lines)
