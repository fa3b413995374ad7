"""Lua connectors: ``[connectors.script.NAME] path = "x.lua"``; ``connector.scan(config)`` returns the items.

The script runs once per sync in the sandbox (``cairn.ctx.lua``), with the connector's extra config
keys as ``config``. Each item's fingerprint is a hash of everything it returned, so an unchanged item
costs nothing on the next sync and an item no longer returned is deleted like a removed file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from typing import Any

from cairn.core.errors import ExtensionError
from cairn.ctx.config import ConnectorConfig
from cairn.ctx.connectors.base import Entry, Item, register

ITEM_KEYS = ("source_id", "body", "title", "author", "source_url", "updated_at", "metadata")


class ScriptConnector:
    def __init__(self, config: ConnectorConfig) -> None:
        self.config = config
        self.skipped = 0

    def scan(self) -> Iterator[Entry]:
        from cairn.ctx.scripts import run_connector

        opts = self.config.options
        extra = {k: v for k, v in opts.items() if k not in ("path", "timeout")}
        raw = run_connector(self.config.name, opts["path"], float(opts["timeout"]), extra)
        seen: set[str] = set()
        entries = []
        for i, value in enumerate(raw, 1):
            item = to_item(value, i, self.config.source)
            if item.source_id in seen:
                raise ExtensionError(f"{self.config.source}: item {i}: source_id {item.source_id!r} was returned twice.")
            seen.add(item.source_id)
            fingerprint = hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode("utf-8")).hexdigest()
            entries.append(Entry(item.source_id, fingerprint, _loader(item)))
        return iter(entries)


def _loader(item: Item) -> Callable[[], Item | None]:
    return lambda: item


def to_item(value: Any, index: int, source: str) -> Item:
    """One returned table as an :class:`Item`; a bad field names the item and the field."""
    where = f"{source}: item {index}"
    if not isinstance(value, dict):
        raise ExtensionError(f"{where}: must be a table with source_id and body, not {type(value).__name__}.")
    unknown = sorted(set(value) - set(ITEM_KEYS))
    if unknown:
        raise ExtensionError(f"{where}: unknown field(s) {', '.join(unknown)}. Known: {', '.join(ITEM_KEYS)}.")
    sid = value.get("source_id")
    if isinstance(sid, int) and not isinstance(sid, bool):
        sid = str(sid)
    if not isinstance(sid, str) or not sid:
        raise ExtensionError(f"{where}: source_id must be a non-empty string.")
    body = value.get("body")
    if not isinstance(body, str):
        raise ExtensionError(f"{where} ({sid}): body must be a string.")
    for key in ("title", "author", "source_url"):
        if value.get(key) is not None and not isinstance(value[key], str):
            raise ExtensionError(f"{where} ({sid}): {key} must be a string.")
    updated = value.get("updated_at")
    if updated is not None:
        from cairn.core.errors import InvalidInput
        from cairn.ctx.times import parse_time

        try:
            updated = parse_time(updated if isinstance(updated, (str, int)) and not isinstance(updated, bool) else repr(updated),
                                 "updated_at")
        except InvalidInput as exc:
            raise ExtensionError(f"{where} ({sid}): {exc.message}") from None
    meta = value.get("metadata")
    if meta is None or meta == []:
        meta = {}
    if not isinstance(meta, dict):
        raise ExtensionError(f"{where} ({sid}): metadata must be a table of fields.")
    return Item(source_id=sid, body=body, title=value.get("title") or None, author=value.get("author"),
                source_url=value.get("source_url"), updated_at=updated, metadata=meta)


register("script", ScriptConnector)
