"""JSON Schemas of the JSON that ``blz`` commands print (``blz schema [NAME]``, ``run-command schema``).

``toc`` is also the MCP ``toc`` tool's ``outputSchema`` (the only blz tool that declares one); ``error`` is
the shape of Cairn's error envelope (``cairn_servers.core.errors.envelope``), for clients of every server.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: `blz mcp` imports this module before its first reply,
if TYPE_CHECKING:     # where typing is kept off the start-up path (tests/mcp/test_startup.py)
    from typing import Any

_STR = {"type": "string"}
_INT = {"type": "integer"}
_NULLSTR = {"type": ["string", "null"]}
_PATH = {"type": "array", "items": _STR}


def _obj(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    return out


_NULLINT = {"type": ["integer", "null"]}
HIT = _obj({"alias": _STR, "lines": _STR, "headingPath": _PATH, "snippet": _STR, "score": {"type": "number"},
            "sourceUrl": _NULLSTR, "anchor": _NULLSTR, "version": _NULLINT},
           ["alias", "lines", "headingPath", "snippet", "score"])
SNIPPET = _obj({"alias": _STR, "lines": _STR, "content": _STR, "headingPath": _PATH,
                "truncated": {"type": "boolean"}, "remaining": _STR, "cited": _STR, "version": _NULLINT},
               ["alias", "lines", "content", "headingPath"])
# What a durable citation (alias:lines@V, alias#anchor) led to.
CITATION = _obj({"citation": _STR, "version": _INT,
                 "status": {"enum": ["unchanged", "moved", "changed", "partly removed", "removed", "found"]},
                 "lines": _NULLSTR, "anchor": _STR, "headingPath": _PATH, "removedIn": _INT, "was": _STR,
                 "parts": {"type": "array", "items": _obj({"was": _STR, "now": _STR, "removedIn": _INT,
                                                           "text": {"enum": ["same", "changed", "removed"]}})},
                 "message": _STR}, ["citation", "version", "status", "message"])
_SECTION = _obj({"anchor": _STR, "headingPath": _PATH, "lines": _STR, "version": _INT, "addedIn": _INT,
                 "changedIn": _INT, "removedIn": _INT, "was": _STR}, ["anchor", "headingPath"])
SOURCE = _obj({"alias": _STR, "title": _NULLSTR, "url": _STR, "kind": {"enum": ["installed", "registry"]},
               "fetchedAt": _STR, "checkedAt": _NULLSTR, "category": _NULLSTR, "suggestedCommand": _STR,
               "tags": _PATH, "aliases": _PATH, "refreshHours": _INT, "ageHours": {"type": ["number", "null"]},
               "stale": {"type": "boolean"},
               "metadata": _obj({"totalLines": _INT, "headings": _INT, "sections": _INT, "bytes": _INT,
                                 "sha256": _STR, "skippedLines": _INT, "skippedLanguages": {"type": "object"},
                                 "allLanguages": {"type": "boolean"}})}, ["alias", "url", "kind"])

TOC_ENTRY = _obj({"level": {"type": "integer", "minimum": 1, "maximum": 6}, "text": _STR, "headingPath": _PATH,
                  "lines": _STR, "citation": _STR, "alias": _STR},
                 ["level", "text", "headingPath", "lines", "citation"])
TOC_ENTRY["properties"]["children"] = {"type": "array", "items": {"$ref": "#/$defs/entry"},
                                      "description": "with tree: the deeper headings under this one"}
TOC = _obj({"alias": _NULLSTR, "url": _NULLSTR, "sources": _PATH, "depth": {"type": ["integer", "null"]}, "filter": _NULLSTR, "page": _INT,
            "limit": _INT, "total": _INT, "hasMore": {"type": "boolean"}, "tree": {"type": "boolean"},
            "entries": {"type": "array", "items": {"$ref": "#/$defs/entry"}}},
           ["alias", "page", "limit", "total", "hasMore", "entries"])
TOC["$defs"] = {"entry": TOC_ENTRY}

SCHEMAS: dict[str, dict[str, Any]] = {
    "search": _obj({"query": _STR, "sources": _PATH, "page": _INT, "limit": _INT,
                    "fallback": {"enum": [None, "any-term", "corrected"]}, "correctedQuery": _STR,
                    "note": _STR, "hasMore": {"type": "boolean"}, "headingsOnly": {"type": "boolean"},
                    "headingLevels": {"type": "array", "items": _INT},
                    "hits": {"type": "array", "items": HIT}},
                   ["query", "hits"]),
    "get": _obj({"snippets": {"type": "array", "items": SNIPPET}, "citations": {"type": "array", "items": CITATION}},
                ["snippets"]),
    "diff": _obj({"alias": _STR, "version": _INT, "since": _INT, "added": {"type": "array", "items": _SECTION},
                  "removed": {"type": "array", "items": _SECTION}, "changed": {"type": "array", "items": _SECTION},
                  "message": _STR}, ["alias", "version", "since", "added", "removed", "changed"]),
    "find": _obj({"snippets": {"type": "array", "items": SNIPPET}, "hits": {"type": "array", "items": HIT},
                  "citations": {"type": "array", "items": CITATION},
                  "executed": _obj({"searched": {"type": "boolean"}, "retrievedSnippets": {"type": "boolean"}}),
                  "fallback": {"enum": [None, "any-term", "corrected"]}, "correctedQuery": _STR,
                  "note": _STR},
                 ["snippets", "hits", "executed"]),
    "list": _obj({"sources": {"type": "array", "items": SOURCE}}, ["sources"]),
    "lookup": _obj({"query": _STR, "category": _NULLSTR, "categories": {"type": "object"},
                    "results": {"type": "array", "items": _obj(
        {"alias": _STR, "url": _STR, "description": _STR, "category": _STR, "installed": {"type": "boolean"},
         "suggestedCommand": _STR})}}),
    # one source (`blz add ALIAS [URL]`, DOMAIN), or with --manifest: {manifest, dryRun, added, failed,
    # message, results: [one source's answer + status, or {alias, status: failed, error, code}]}
    "add": _obj({"alias": _STR, "url": _STR, "title": _STR, "lines": _INT, "headings": _INT, "sections": _INT,
                 "bytes": _INT, "sha256": _STR, "elapsedMs": {"type": "number"}, "message": _STR,
                 "skippedLines": _INT, "skippedLanguages": {"type": "object"}, "dryRun": {"type": "boolean"},
                 "manifest": _STR, "added": _INT, "failed": _INT,
                 # asked for …/llms.txt, added the llms-full.txt beside it (the message says so too)
                 "substituted": _obj({"asked": _STR, "used": _STR}, ["asked", "used"]),
                 "results": {"type": "array", "items": _obj(
                     {"alias": _STR, "status": {"enum": ["added", "dry-run", "failed"]}, "error": _STR,
                      "code": _STR}, ["alias", "status"])}},
                ["message"]),
    "update": _obj({"results": {"type": "array", "items": _obj(
        {"alias": _STR, "status": {"enum": ["updated", "repaired", "unchanged", "failed"]}, "reason": _STR,
         "error": _STR})}}),
    "remove": _obj({"alias": _STR, "removed": {"type": "boolean"}}),
    "stats": _obj({"sources": _INT, "totalLines": _INT, "totalHeadings": _INT, "totalSections": _INT,
                   "totalBytes": _INT, "indexBytes": _INT, "perSource": {"type": "array"}}),
    "history": _obj({"events": {"type": "array", "items": _obj(
        {"alias": _STR, "action": {"enum": ["add", "replace", "update", "unchanged", "remove"]}, "at": _STR,
         "url": _NULLSTR, "sha256": _NULLSTR, "lines": {"type": ["integer", "null"]}, "detail": _NULLSTR})}}),
    "validate": _obj({"ok": {"type": "boolean"}, "indexOk": {"type": "boolean"}, "sources": {"type": "array", "items": _obj(
        {"alias": _STR, "ok": {"type": "boolean"}, "problems": _PATH, "fix": _NULLSTR})}}),
    "toc": TOC,
    "inspect": _obj({"alias": _STR, "url": _STR, "file": _STR, "headingLevels": {"type": "object"},
                     "outline": {"type": "array"}}),
    "error": _obj({"error": _obj({"code": _STR, "message": _STR}, ["code", "message"])}, ["error"]),
}
