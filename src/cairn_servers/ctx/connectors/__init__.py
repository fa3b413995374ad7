"""Connectors turn a configured source into documents.

A connector's :meth:`Connector.scan` lists :class:`Entry` objects cheaply (a stat, a git tree
listing); each carries a *fingerprint* (size and mtime, a blob hash, a body hash) and a ``load``
callable that reads the full :class:`Item` only when the fingerprint changed. Files in a document
format (PDF, DOCX, PPTX, XLSX, HTML) go through :func:`file_item`, which extracts their text
(``cairn_servers.ctx.extract``) and turns a file that gives none into a per-file warning. Connector types are
registered by name (:func:`register`); the ``script`` type (Lua) and the ``s3`` type (boto3) register
themselves from their own modules, imported when one is configured, so this package knows nothing about
Lua or boto3. The building blocks live in
:mod:`cairn_servers.ctx.connectors.base`, which the connector modules import (never this package).
"""

from __future__ import annotations

from cairn_servers.core.errors import ExtensionError
from cairn_servers.ctx.config import ConnectorConfig
from cairn_servers.ctx.connectors.base import _TYPES
from cairn_servers.ctx.connectors.base import Connector as Connector
from cairn_servers.ctx.connectors.base import MAX_WARNINGS as MAX_WARNINGS
from cairn_servers.ctx.connectors.base import Entry as Entry
from cairn_servers.ctx.connectors.base import Item as Item
from cairn_servers.ctx.connectors.base import Skips as Skips
from cairn_servers.ctx.connectors.base import file_item as file_item
from cairn_servers.ctx.connectors.base import register as register


def create(config: ConnectorConfig) -> Connector:
    """The connector for ``config``; built-in types are registered on first use."""
    # Importing registers the built-ins; cheap after the first time, and independent of which
    # connector module something else happened to import first.
    from cairn_servers.ctx.connectors import filesystem, git  # noqa: F401
    factory = _TYPES.get(config.type)
    if factory is None and config.type == "script":
        from cairn_servers.ctx.connectors.script import ScriptConnector  # Lua: loaded only when configured

        factory = _TYPES.setdefault("script", ScriptConnector)
    if factory is None and config.type == "s3":
        from cairn_servers.ctx.connectors.s3 import S3Connector  # boto3: imported only when a bucket is synced

        factory = _TYPES.setdefault("s3", S3Connector)
    if factory is None:
        raise ExtensionError(
            f"Connector type {config.type!r} ({config.source}) is not available in this build; "
            "script connectors need the Lua extension module."
        )
    return factory(config)
