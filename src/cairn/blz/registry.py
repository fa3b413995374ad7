"""The built-in registry: well-known llms.txt sources, so ``blz add react`` needs no URL."""

from __future__ import annotations

from typing import NamedTuple


class Entry(NamedTuple):
    alias: str
    url: str
    description: str
    category: str


REGISTRY: tuple[Entry, ...] = (
    Entry("astro", "https://docs.astro.build/llms-full.txt", "Astro web framework documentation", "frontend"),
    Entry("bun", "https://bun.sh/llms-full.txt", "Bun JavaScript runtime, bundler, test runner and package manager", "runtime"),
    Entry("cloudflare", "https://developers.cloudflare.com/llms-full.txt", "Cloudflare developer platform (Workers, Pages, R2, D1)", "cloud"),
    Entry("deno", "https://docs.deno.com/llms-full.txt", "Deno JavaScript/TypeScript runtime", "runtime"),
    Entry("drizzle", "https://orm.drizzle.team/llms-full.txt", "Drizzle ORM for TypeScript", "database"),
    Entry("hono", "https://hono.dev/llms-full.txt", "Hono web framework for edge runtimes", "backend"),
    Entry("langgraph-python", "https://langchain-ai.github.io/langgraph/llms-full.txt", "LangGraph agent orchestration (Python)", "ai"),
    Entry("model-context-protocol", "https://modelcontextprotocol.io/llms-full.txt", "Model Context Protocol specification and SDK guides", "ai"),
    Entry("prisma", "https://prisma.io/docs/llms-full.txt", "Prisma ORM and database tools", "database"),
    Entry("pydantic", "https://docs.pydantic.dev/llms.txt", "Pydantic data validation for Python", "python"),
    Entry("react", "https://react.dev/llms.txt", "React documentation", "frontend"),
    Entry("svelte", "https://svelte.dev/llms-full.txt", "Svelte and SvelteKit documentation", "frontend"),
    Entry("vite", "https://vitejs.dev/llms-full.txt", "Vite frontend build tool", "build"),
    Entry("vue", "https://vuejs.org/llms-full.txt", "Vue.js progressive framework", "frontend"),
)


def get(alias: str) -> Entry | None:
    alias = alias.lower()
    for entry in REGISTRY:
        if entry.alias == alias:
            return entry
    return None


def lookup(query: str) -> list[Entry]:
    """Entries whose alias, description, category or URL contains any word of ``query`` (case-
    insensitive), best first: alias matches, then the rest; an empty query lists everything."""
    words = [w for w in query.lower().replace(",", " ").split() if w]
    if not words:
        return list(REGISTRY)
    scored: list[tuple[int, str, Entry]] = []
    for e in REGISTRY:
        hay = f"{e.description} {e.category} {e.url}".lower()
        score = 0
        for w in words:
            if w == e.alias:
                score += 10
            elif w in e.alias:
                score += 5
            elif w in hay:
                score += 1
        if score:
            scored.append((-score, e.alias, e))
    return [e for _, _, e in sorted(scored)]
