"""The built-in registry: well-known llms.txt sources, so ``blz add react`` needs no URL.

Curated by hand from projects that publish an ``llms.txt`` / ``llms-full.txt`` (the complete text
where the project has one). The URLs are not checked at build time (nothing here reaches the
network); a source that moved answers 404 and `blz add` says so. For a ``…/llms-full.txt`` entry,
`blz add` falls back to the ``llms.txt`` beside it when the complete text is gone.

Every entry has one category from :data:`CATEGORIES` (kept in :mod:`cairn_servers.blz.limits`); `blz lookup` (CLI and MCP) searches and
filters them.
"""

from __future__ import annotations

from typing import NamedTuple

from cairn_servers.blz.limits import CATEGORIES as CATEGORIES  # name -> what it holds (also the MCP schema's enum)


class Entry(NamedTuple):
    alias: str
    url: str
    description: str
    category: str


REGISTRY: tuple[Entry, ...] = (
    Entry("ai-sdk", "https://sdk.vercel.ai/llms.txt", "Vercel AI SDK: TypeScript toolkit for LLM apps and agents", "ai"),
    Entry("angular", "https://angular.dev/llms.txt", "Angular web framework", "frontend"),
    Entry("ant-design", "https://ant.design/llms-full.txt", "Ant Design React component library", "ui"),
    Entry("anthropic", "https://docs.anthropic.com/llms-full.txt", "Anthropic Claude API and developer platform", "ai"),
    Entry("ast-grep", "https://ast-grep.github.io/llms-full.txt", "ast-grep structural code search, lint and rewrite", "tooling"),
    Entry("astro", "https://docs.astro.build/llms-full.txt", "Astro web framework documentation", "frontend"),
    Entry("better-auth", "https://www.better-auth.com/llms.txt", "Better Auth authentication framework for TypeScript", "auth"),
    Entry("bun", "https://bun.sh/llms-full.txt", "Bun JavaScript runtime, bundler, test runner and package manager", "runtime"),
    Entry("chakra-ui", "https://chakra-ui.com/llms-full.txt", "Chakra UI accessible React components", "ui"),
    Entry("cloudflare", "https://developers.cloudflare.com/llms-full.txt", "Cloudflare developer platform (Workers, Pages, R2, D1)", "cloud"),
    Entry("convex", "https://docs.convex.dev/llms-full.txt", "Convex reactive backend: database, functions and sync", "backend"),
    Entry("cursor", "https://docs.cursor.com/llms-full.txt", "Cursor AI code editor", "tooling"),
    Entry("deno", "https://docs.deno.com/llms-full.txt", "Deno JavaScript/TypeScript runtime", "runtime"),
    Entry("drizzle", "https://orm.drizzle.team/llms-full.txt", "Drizzle ORM for TypeScript", "database"),
    Entry("dspy", "https://dspy.ai/llms.txt", "DSPy: programming (not prompting) language models in Python", "ai"),
    Entry("effect", "https://effect.website/llms-full.txt", "Effect: typed effects, concurrency and errors for TypeScript", "library"),
    Entry("expo", "https://docs.expo.dev/llms-full.txt", "Expo platform for React Native apps", "mobile"),
    Entry("fasthtml", "https://fastht.ml/docs/llms.txt", "FastHTML Python web framework (hypermedia apps)", "python"),
    Entry("hono", "https://hono.dev/llms-full.txt", "Hono web framework for edge runtimes", "backend"),
    Entry("inngest", "https://www.inngest.com/llms-full.txt", "Inngest durable functions, queues and workflows", "workflow"),
    Entry("langchain-js", "https://js.langchain.com/llms.txt", "LangChain for JavaScript/TypeScript", "ai"),
    Entry("langchain-python", "https://python.langchain.com/llms.txt", "LangChain for Python", "ai"),
    Entry("langgraph-js", "https://langchain-ai.github.io/langgraphjs/llms-full.txt", "LangGraph agent orchestration (JavaScript)", "ai"),
    Entry("langgraph-python", "https://langchain-ai.github.io/langgraph/llms-full.txt", "LangGraph agent orchestration (Python)", "ai"),
    Entry("llmstxt", "https://llmstxt.org/llms.txt", "The llms.txt proposal: the file format itself", "spec"),
    Entry("mastra", "https://mastra.ai/llms-full.txt", "Mastra TypeScript framework for AI agents and workflows", "ai"),
    Entry("model-context-protocol", "https://modelcontextprotocol.io/llms-full.txt", "Model Context Protocol specification and SDK guides", "spec"),
    Entry("mui-x", "https://mui.com/x/llms.txt", "MUI X: data grid, date pickers and charts for React", "ui"),
    Entry("nuxt", "https://nuxt.com/llms.txt", "Nuxt full-stack Vue framework", "frontend"),
    Entry("pinecone", "https://docs.pinecone.io/llms-full.txt", "Pinecone vector database", "database"),
    Entry("preact", "https://preactjs.com/llms.txt", "Preact: a 3 kB alternative to React", "frontend"),
    Entry("prisma", "https://prisma.io/docs/llms-full.txt", "Prisma ORM and database tools", "database"),
    Entry("pydantic", "https://docs.pydantic.dev/llms.txt", "Pydantic data validation for Python", "python"),
    Entry("pydantic-ai", "https://ai.pydantic.dev/llms-full.txt", "Pydantic AI agent framework for Python", "ai"),
    Entry("react", "https://react.dev/llms.txt", "React documentation", "frontend"),
    Entry("redis", "https://redis.io/llms.txt", "Redis in-memory data store", "database"),
    Entry("resend", "https://resend.com/llms-full.txt", "Resend email API for developers", "email"),
    Entry("shadcn-ui", "https://ui.shadcn.com/llms.txt", "shadcn/ui components you copy into your app", "ui"),
    Entry("stripe", "https://docs.stripe.com/llms.txt", "Stripe payments APIs and billing", "payments"),
    Entry("supabase-guides", "https://supabase.com/llms/guides.txt", "Supabase guides: Postgres, auth, storage, realtime", "backend"),
    Entry("supabase-js", "https://supabase.com/llms/js.txt", "Supabase JavaScript client reference", "backend"),
    Entry("supabase-python", "https://supabase.com/llms/python.txt", "Supabase Python client reference", "backend"),
    Entry("svelte", "https://svelte.dev/llms-full.txt", "Svelte and SvelteKit documentation", "frontend"),
    Entry("trigger-dev", "https://trigger.dev/docs/llms-full.txt", "Trigger.dev background jobs and AI workflows in TypeScript", "workflow"),
    Entry("turborepo", "https://turbo.build/repo/docs/llms-full.txt", "Turborepo build system for JavaScript monorepos", "build"),
    Entry("vercel", "https://vercel.com/llms.txt", "Vercel frontend cloud: deployments, functions, storage", "cloud"),
    Entry("vite", "https://vitejs.dev/llms-full.txt", "Vite frontend build tool", "build"),
    Entry("vitest", "https://vitest.dev/llms-full.txt", "Vitest test runner powered by Vite", "testing"),
    Entry("vue", "https://vuejs.org/llms-full.txt", "Vue.js progressive framework", "frontend"),
    Entry("zod", "https://zod.dev/llms.txt", "Zod TypeScript-first schema validation", "library"),
)


def get(alias: str) -> Entry | None:
    alias = alias.lower()
    for entry in REGISTRY:
        if entry.alias == alias:
            return entry
    return None


def categories() -> dict[str, int]:
    """Each category with its number of entries, in :data:`CATEGORIES` order."""
    counts = {name: 0 for name in CATEGORIES}
    for e in REGISTRY:
        counts[e.category] += 1
    return counts


def lookup(query: str, category: str | None = None) -> list[Entry]:
    """Entries whose alias, description, category or URL contains any word of ``query`` (case-
    insensitive), best first: alias matches, then the rest; an empty query lists everything.
    ``category`` keeps only that category's entries (see :data:`CATEGORIES`)."""
    pool = [e for e in REGISTRY if category is None or e.category == category]
    words = [w for w in query.lower().replace(",", " ").split() if w]
    if not words:
        return pool
    scored: list[tuple[int, str, Entry]] = []
    for e in pool:
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
