"""One error taxonomy for every server, mapped to CLI exit codes, HTTP statuses and JSON-RPC codes.

Services raise these; each adapter maps them by class (walking the MRO) in one table:
the CLI turns them into an exit code and a message on stderr, HTTP into a status and the
``{"error": {"code", "message"[, "details"]}}`` envelope (:func:`envelope`), MCP into an ``isError``
tool result carrying the same scrubbed message (:func:`public_error`) or a JSON-RPC error.
Set ``CAIRN_RAISE_ERRORS=1`` to let the original exception propagate (debugging; :func:`raise_errors`).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the stdio servers' start-up path
if TYPE_CHECKING:
    from typing import Any


class CairnError(Exception):
    """Base class of every error a Cairn service reports to a user."""

    code = "internal"  # stable machine-readable code, used in HTTP envelopes and JSON output
    exit_code = 1  # CLI exit status
    http_status = 500
    jsonrpc_code = -32603

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            body["details"] = self.details
        return body


class InvalidInput(CairnError):
    """The request is malformed or a parameter has a bad value."""

    code = "bad_request"
    exit_code = 2
    http_status = 400
    jsonrpc_code = -32602


class NotFound(CairnError):
    """The named thing (source, document, tool, index, vec) does not exist."""

    code = "not_found"
    exit_code = 3
    http_status = 404
    jsonrpc_code = -32602


class Conflict(CairnError):
    """The thing already exists or the state forbids the operation."""

    code = "conflict"
    exit_code = 4
    http_status = 409
    jsonrpc_code = -32602


class NetworkError(CairnError):
    """A remote server could not be reached or answered badly."""

    code = "network"
    exit_code = 5
    http_status = 502
    jsonrpc_code = -32603


class Timeout(CairnError):
    """An operation ran past its time budget."""

    code = "timeout"
    exit_code = 6
    http_status = 408
    jsonrpc_code = -32603


class Cancelled(CairnError):
    """The caller gave up on the work (its client disconnected or sent notifications/cancelled).

    Nobody reads the answer: MCP sends no response for a cancelled request, and an HTTP client that
    went away gets none. 499 is the status web servers log for "client closed the request"."""

    code = "cancelled"
    http_status = 499
    jsonrpc_code = -32800  # RequestCancelled, as in LSP


class StorageError(CairnError):
    """On-disk state is missing, corrupt, or could not be written."""

    code = "storage"
    exit_code = 7
    http_status = 500
    jsonrpc_code = -32603


def write_failure(exc: OSError) -> str:
    """Why a write failed, in words: the system's message; for a short write, which numpy reports with no
    error number ("N requested and M written"), the file system refusing more."""
    if exc.strerror:
        return exc.strerror
    if exc.errno is None:
        return f"{exc} (the disk is full or a file is too large for its limit)"
    return str(exc)


class ExtensionError(CairnError):
    """A user extension (Lua tool or connector) failed."""

    code = "extension"
    exit_code = 8
    http_status = 500
    jsonrpc_code = -32603


class TooLarge(InvalidInput):
    """A request or download exceeds a configured size cap."""

    code = "too_large"
    exit_code = 9
    http_status = 413


class Unauthorized(CairnError):
    """Missing or wrong credentials."""

    code = "unauthorized"
    exit_code = 10
    http_status = 401
    jsonrpc_code = -32600


EXIT_INTERNAL = 1  # an unexpected error; argparse's usage errors exit 2, like InvalidInput, deliberately

ALL_ERRORS: tuple[type[CairnError], ...] = (
    CairnError,
    InvalidInput,
    NotFound,
    Conflict,
    NetworkError,
    Timeout,
    StorageError,
    ExtensionError,
    TooLarge,
    Unauthorized,
)


def public_error(exc: CairnError) -> dict[str, Any]:
    """``exc`` as a client may see it: ``{"code", "message"[, "details"]}`` with every string scrubbed
    (no home directory, data roots, URL credentials or secrets). HTTP and MCP both show this."""
    from cairn_servers.core.sanitize import scrub_obj

    body: dict[str, Any] = scrub_obj(exc.to_dict())
    return body


def envelope(exc: CairnError) -> dict[str, Any]:
    """The HTTP error body every Cairn server answers with: ``{"error": public_error(exc)}``."""
    return {"error": public_error(exc)}


def raise_errors() -> bool:
    """True when ``CAIRN_RAISE_ERRORS`` asks adapters to re-raise instead of mapping errors."""
    import os

    return os.environ.get("CAIRN_RAISE_ERRORS", "") not in ("", "0", "false", "no")
