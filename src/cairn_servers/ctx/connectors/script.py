"""Lua connectors: ``[connectors.script.NAME] path = "x.lua"``; ``connector.scan(config)`` returns the items.

The script runs once per sync in the sandbox (``cairn_servers.ctx.lua``), with the connector's extra config
keys as ``config``. Each item's fingerprint is a hash of everything it returned, so an unchanged item
costs nothing on the next sync and an item no longer returned is deleted like a removed file.

An item may name a document ``format`` (``pdf``, ``docx``, ``pptx``, ``xlsx``, ``html``, or a MIME
type) and carry its bytes as ``body_base64`` (``http.get(url, {binary = true})`` gives them) or, for
HTML, its text as ``body``: it is extracted like a file of that format when it is loaded, and one that
gives no text is skipped with a warning, like a file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from typing import Any

from cairn_servers.core.errors import ExtensionError
from cairn_servers.ctx.config import ConnectorConfig
from cairn_servers.ctx.connectors.base import Entry, Item, Skips, file_item, register

ITEM_KEYS = ("source_id", "body", "body_base64", "title", "author", "source_url", "updated_at", "metadata", "format")


class ScriptConnector(Skips):
    def __init__(self, config: ConnectorConfig) -> None:
        super().__init__()
        self.config = config

    def scan(self) -> Iterator[Entry]:
        from cairn_servers.ctx.scripts import run_connector

        self.reset()
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
            entries.append(Entry(item.source_id, fingerprint, self._loader(item, value)))
        return iter(entries)

    def _loader(self, item: Item, value: dict[str, Any]) -> Callable[[], Item | None]:
        fmt = _format(value)
        if fmt is None and value.get("body_base64") is None:
            return lambda: item

        def load() -> Item | None:
            data = _bytes(value) if value.get("body_base64") is not None else item.body.encode("utf-8")
            return file_item(data, item.source_id, self, fmt, title=item.title, author=item.author,
                             source_url=item.source_url, updated_at=item.updated_at, metadata=item.metadata)

        return load


def _format(value: dict[str, Any]) -> str | None:
    """The item's document format (checked by :func:`to_item`); without one, body_base64 goes by the id's suffix."""
    from cairn_servers.ctx.extract import normalize_format

    return normalize_format(value.get("format") or "")


def _bytes(value: dict[str, Any]) -> bytes:
    import base64

    return base64.b64decode(value["body_base64"])


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
    fmt = value.get("format")
    if fmt is not None:
        from cairn_servers.ctx.extract import normalize_format

        try:
            if not isinstance(fmt, str):
                raise ValueError(fmt)
            normalize_format(fmt)
        except ValueError:
            raise ExtensionError(f"{where} ({sid}): format {fmt!r} is not one of pdf, docx, pptx, xlsx, html, "
                                 "markdown, text (or their MIME types).") from None
    raw = value.get("body_base64")
    if raw is not None:
        import base64
        import binascii

        if body is not None:
            raise ExtensionError(f"{where} ({sid}): give body or body_base64, not both.")
        if not isinstance(raw, str):
            raise ExtensionError(f"{where} ({sid}): body_base64 must be a string.")
        try:
            base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise ExtensionError(f"{where} ({sid}): body_base64 is not valid base64.") from None
        body = ""
    if not isinstance(body, str):
        raise ExtensionError(f"{where} ({sid}): body must be a string.")
    for key in ("title", "author", "source_url"):
        if value.get(key) is not None and not isinstance(value[key], str):
            raise ExtensionError(f"{where} ({sid}): {key} must be a string.")
    updated = value.get("updated_at")
    if updated is not None:
        from cairn_servers.core.errors import InvalidInput
        from cairn_servers.ctx.times import parse_time

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
