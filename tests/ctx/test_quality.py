"""Retrieval quality on real documentation: questions with known answer pages, recall@5 per mode.

The corpus is two llms-full files of the test data (tests/data/llms) cut into their pages: react.dev
(one document per page, split on its YAML front-matter) and Hono (one document per top-level section).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cairn_servers.ctx.service import Service

# question -> acceptable answer titles
QUESTIONS: dict[str, set[str]] = {
    "read a value from context inside a component": {"useContext", "Passing Data Deeply with Context"},
    "cache an expensive calculation between re-renders": {"useMemo"},
    "keep a mutable value that does not cause a re-render": {"useRef", "Referencing Values with Refs"},
    "render children into a different part of the DOM": {"createPortal"},
    "display a fallback while content is loading": {"<Suspense>"},
    "update an array in state without mutating it": {"Updating Arrays in State"},
    "clean up a subscription when the component unmounts": {"useEffect", "Synchronizing with Effects",
                                                             "Lifecycle of Reactive Effects"},
    "attach React to HTML rendered on the server": {"hydrateRoot"},
    "generate unique ids for accessibility attributes": {"useId"},
    "stream HTML from a Node.js server": {"renderToPipeableStream"},
    "show the expected result before the server responds": {"useOptimistic"},
    "update state without blocking the UI": {"useTransition", "startTransition"},
    "load a component's code only when it is first rendered": {"lazy"},
    "skip re-rendering when props are unchanged": {"memo"},
    "measure rendering performance of a component tree": {"<Profiler>", "React Performance tracks"},
    "find bugs by rendering twice in development": {"<StrictMode>"},
    "deploy the app to Cloudflare Workers": {"Cloudflare Workers"},
    "run Hono on AWS Lambda": {"AWS Lambda"},
    "validate the request body with a schema": {"Validation"},
    "type-safe client calling the server API": {"RPC"},
    "write tests for the application's routes": {"Testing"},
    "get query parameters from the request": {"HonoRequest"},
}

FLOORS = {"keyword": 0.5, "semantic": 0.5, "hybrid": 0.6}


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "page"


def build_corpus(data: Path, out: Path) -> int:
    n = 0
    react = (data / "llms" / "react-dev" / "llms-full.txt").read_text(encoding="utf-8")
    for i, page in enumerate(re.split(r"\n---\ntitle: ", react)[1:]):
        title_line, _, rest = page.partition("\n")
        title = title_line.strip().strip('"')
        body = rest.split("\n---\n", 1)[1] if "\n---\n" in rest else rest
        (out / "react").mkdir(parents=True, exist_ok=True)
        (out / "react" / f"{i:03d}-{_slug(title)}.md").write_text(f"# {title}\n\n{body}", encoding="utf-8")
        n += 1
    hono = (data / "llms" / "hono" / "llms-small.txt").read_text(encoding="utf-8")
    for i, section in enumerate(re.split(r"(?m)^(?=# )", hono)):
        if section.startswith("# "):
            (out / "hono").mkdir(parents=True, exist_ok=True)
            (out / "hono" / f"{i:03d}-{_slug(section.splitlines()[0])}.md").write_text(section, encoding="utf-8")
            n += 1
    return n


def _synced_kb(test_data: Path, base: Path, db: str) -> Service:
    """The quality corpus under ``base``, synced and embedded into the database ``db`` names (a ``[db]`` line)."""
    assert build_corpus(test_data, base / "corpus") > 150
    (base / "ctx.toml").write_text(f"""
[db]
{db}
[embedding]
provider = "local"
[connectors.filesystem.docs]
root = "{base / 'corpus'}"
""")
    svc = Service.from_config(base / "ctx.toml")
    summary = svc.sync("all")
    assert summary.embedding is not None and summary.embedding.pending == 0
    return svc


@pytest.fixture(scope="module")
def kb(test_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Service:
    return _synced_kb(test_data, tmp_path_factory.mktemp("quality"), 'path = "kb.sqlite"')


def recall_at_5(svc: Service, mode: str) -> tuple[float, list[str]]:
    misses = []
    for question, answers in QUESTIONS.items():
        titles = [r.title for r in svc.search(question, mode, limit=5)]
        if not answers & set(titles):
            misses.append(f"{question!r} -> {titles}")
    return 1 - len(misses) / len(QUESTIONS), misses


@pytest.mark.parametrize("mode", ["keyword", "semantic", "hybrid"])
def test_recall_at_5(kb: Service, mode: str, record_property: Callable[[str, object], None]) -> None:
    recall, misses = recall_at_5(kb, mode)
    record_property(f"recall@5_{mode}", recall)
    print(f"\nrecall@5 {mode}: {recall:.2f} ({len(QUESTIONS)} questions)")
    assert recall >= FLOORS[mode], "\n".join(misses)


def test_reference_minmax_fusion_still_available(kb: Service, record_property: Callable[[str, object], None]) -> None:
    import dataclasses

    original = kb.config
    kb.config = dataclasses.replace(original, retrieval=dataclasses.replace(original.retrieval, fusion="minmax"))
    try:
        recall, misses = recall_at_5(kb, "hybrid")
    finally:
        kb.config = original
    record_property("recall@5_hybrid_minmax", recall)
    print(f"\nrecall@5 hybrid (minmax): {recall:.2f}")
    assert recall >= FLOORS["hybrid"], "\n".join(misses)


# ---- the same corpus on PostgreSQL + pgvector: recall floors, and agreement with SQLite -----------------

@pytest.fixture(scope="module")
def kb_pg(test_data: Path, tmp_path_factory: pytest.TempPathFactory, pg_server: str) -> Iterator[Service]:
    from .conftest import drop_database, pg_database

    name, url = pg_database(pg_server)
    svc = _synced_kb(test_data, tmp_path_factory.mktemp("quality-pg"), f'url = "{url}"')
    yield svc
    svc.close()
    drop_database(pg_server, name)


@pytest.mark.parametrize("mode", ["keyword", "semantic", "hybrid"])
def test_recall_at_5_on_postgres(kb_pg: Service, mode: str, record_property: Callable[[str, object], None]) -> None:
    recall, misses = recall_at_5(kb_pg, mode)
    record_property(f"recall@5_{mode}_postgres", recall)
    print(f"\nrecall@5 {mode} (postgres): {recall:.2f} ({len(QUESTIONS)} questions)")
    assert recall >= FLOORS[mode], "\n".join(misses)


# Mean share of the top 5 (by source_id) both backends return, over the questions and their key terms.
AGREEMENT = {"keyword": 0.6, "semantic": 0.9, "hybrid": 0.6}


@pytest.mark.parametrize("mode", ["keyword", "semantic", "hybrid"])
def test_backends_agree_on_the_top_5(kb: Service, kb_pg: Service, mode: str,
                                     record_property: Callable[[str, object], None]) -> None:
    queries = list(QUESTIONS) + ["useEffect cleanup", "hydrateRoot", "middleware", "use-effect", "\"server components\"",
                                 "Cloudflare Workers", "zod validator", "ref forwarding"]
    shares: dict[int, list[float]] = {5: [], 10: []}
    for q in queries:
        a = [r.source_id for r in kb.search(q, mode, limit=10)]
        b = [r.source_id for r in kb_pg.search(q, mode, limit=10)]
        for n, got in shares.items():
            got.append(len(set(a[:n]) & set(b[:n])) / max(1, min(n, len(a), len(b))) if a or b else 1.0)
    overlap = {n: sum(v) / len(v) for n, v in shares.items()}
    record_property(f"top5_overlap_{mode}", overlap[5])
    record_property(f"top10_overlap_{mode}", overlap[10])
    print(f"\ntop-5 / top-10 overlap sqlite/postgres {mode}: {overlap[5]:.2f} / {overlap[10]:.2f} ({len(queries)} queries)")
    assert overlap[5] >= AGREEMENT[mode]
