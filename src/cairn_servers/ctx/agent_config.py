"""The records of ``[agents.inline.NAME]`` and ``[agents.script.NAME]`` in ``ctx.toml``.

:mod:`cairn_servers.ctx.config` validates the section and builds these; they live in their own module, imported
only when a configuration has agents, because building a dataclass compiles its methods at import
(about 5 M instructions for these two): ``ctx search`` on a configuration without agents does not pay
for them (docs/benchmarks.md, *`ctx search` start-up after the lazy parser*).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# ``{{argument}}`` in a system prompt (checked against the arguments at load, filled in by cairn_servers.ctx.agents)
PLACEHOLDER = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")


@dataclass(frozen=True)
class AgentArgument:
    """One argument an agent takes (an MCP prompt argument): always a string."""

    name: str
    description: str = ""
    required: bool = False
    default: str | None = None


@dataclass(frozen=True)
class AgentConfig:
    """``[agents.inline.NAME]`` (a prompt written in the file) or ``[agents.script.NAME]`` (a Lua script
    whose ``agent.resolve`` builds it, e.g. from a search). ``system_prompt`` may use ``{{argument}}``."""

    kind: str  # "inline" | "script"
    name: str
    description: str = ""
    system_prompt: str = ""
    tools: tuple[str, ...] = ()
    arguments: tuple[AgentArgument, ...] = ()
    search_mode: str = "keyword"
    search_sources: tuple[str, ...] = ()
    search_limit: int | None = None
    path: Path | None = None  # script agents
    timeout: float = 30.0
    config: dict[str, Any] = field(default_factory=dict, repr=False)  # script agents: other keys; may hold secrets
