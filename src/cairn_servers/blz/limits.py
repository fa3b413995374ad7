"""Limits and enums shared by blz's service and its adapters (a leaf module: cheap to import)."""

from __future__ import annotations

MAX_LIMIT = 50  # search hits per page (maxResults)
MAX_PADDING = 50  # context lines each side (linePadding / -C)
CONTEXT_MODES = ("none", "symmetric", "all")
DEFAULT_MAX_LINES = 2000  # lines one `get` returns at most
WHITELIST = ("stats", "history", "list", "validate", "inspect", "schema")  # run-command
TOC_DEFAULT_LIMIT = 100  # outline entries per page (toc)
TOC_MAX_LIMIT = 1000
MAX_DEPTH = 6  # heading levels: H1-H6
# The built-in registry's categories (cairn_servers.blz.registry), with what each holds, in listing order.
CATEGORIES = {
    "ai": "LLM SDKs, agent frameworks and AI platforms",
    "auth": "authentication and user management",
    "backend": "web servers, backend frameworks and backend platforms",
    "build": "bundlers, build systems and monorepo tools",
    "cloud": "hosting, edge and serverless platforms",
    "database": "databases, ORMs and vector stores",
    "email": "sending email",
    "frontend": "web UI frameworks and meta-frameworks",
    "library": "general-purpose libraries",
    "mobile": "mobile app frameworks",
    "payments": "payments and billing",
    "python": "Python libraries and web frameworks",
    "runtime": "JavaScript/TypeScript runtimes",
    "spec": "specifications and protocols",
    "testing": "test runners",
    "tooling": "developer tools and editors",
    "ui": "component libraries and design systems",
    "workflow": "background jobs and durable workflows",
}

KEEP_VERSIONS = 20  # updates whose line maps a source keeps: citations up to this many versions old resolve
DEFAULT_REFRESH_HOURS = 24  # a source checked longer ago than this is stale (list, update --stale)
MAX_REFRESH_HOURS = 24 * 366
# blz add --crawl: the highest page cap, depth cap and politeness delay (seconds) accepted
CRAWL_MAX_PAGES = 10_000
CRAWL_MAX_DEPTH = 20
CRAWL_MAX_DELAY = 30.0
