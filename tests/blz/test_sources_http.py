"""Adding and refreshing sources over real HTTP (a threaded server on 127.0.0.1 with ETags)."""

from __future__ import annotations

import pytest

from cairn_servers.blz import search as searching
from cairn_servers.blz import service, sources
from cairn_servers.blz.store import Store
from cairn_servers.core.errors import NotFound, TooLarge

from .conftest import LAST_MODIFIED, DocServer

V1 = b"# Docs\n\n## Alpha\n\nfirst version text\n"
V2 = b"# Docs\n\n## Alpha\n\nsecond version words\n\n## Beta\n\nmore\n"


def test_add_prefers_full_variant_then_falls_back(store: Store, doc_server: DocServer) -> None:
    doc_server.files["/a/llms.txt"] = V1
    doc_server.files["/a/llms-full.txt"] = V2
    doc_server.files["/b/llms.txt"] = V1
    full = sources.add(store, "a", doc_server.url("/a/llms.txt"))
    assert full["url"] == doc_server.url("/a/llms-full.txt") and full["lines"] == V2.count(b"\n")
    only = sources.add(store, "b", doc_server.url("/b/llms.txt"))
    assert only["url"] == doc_server.url("/b/llms.txt")
    assert [p for m, p, _ in doc_server.requests if p.startswith("/b/")] == ["/b/llms-full.txt", "/b/llms.txt"]
    site = sources.add(store, "c", doc_server.url("/a/"))
    assert site["url"] == doc_server.url("/a/llms-full.txt")


def test_update_sends_conditional_headers_and_304_changes_nothing(store: Store, doc_server: DocServer) -> None:
    doc_server.files["/llms.txt"] = V1
    sources.add(store, "d", doc_server.url("/llms.txt"), exact=True)
    row = store.source("d")
    assert row is not None and row.etag == doc_server.etag("/llms.txt") and row.last_modified == LAST_MODIFIED
    result = sources.update(store, "d")
    assert result["status"] == "unchanged" and result["reason"] == "not modified (304)"
    sent = doc_server.gets("/llms.txt")[-1]
    assert sent["if-none-match"] == row.etag and sent["if-modified-since"] == LAST_MODIFIED
    after = store.source("d")
    assert after is not None
    assert (after.sha256, after.file, after.fetched_at) == (row.sha256, row.file, row.fetched_at)
    assert service.history(store, "d")["events"][0]["action"] == "unchanged"


def test_update_reindexes_changed_content(store: Store, doc_server: DocServer) -> None:
    doc_server.files["/llms.txt"] = V1
    sources.add(store, "d", doc_server.url("/llms.txt"), exact=True)
    old = store.source("d")
    doc_server.files["/llms.txt"] = V2
    result = sources.update(store, "d")
    assert result["status"] == "updated" and result["lines"] == V2.count(b"\n")
    new = store.source("d")
    assert new is not None and old is not None
    assert store.file_path(new).read_bytes() == V2 and not store.file_path(old).exists()
    assert searching.search(store, "second")["hits"][0]["lines"] == "3-6"
    assert searching.search(store, "first")["hits"] == []


def test_redirects_are_followed(store: Store, doc_server: DocServer) -> None:
    doc_server.files["/real.txt"] = V1
    doc_server.redirects["/moved.txt"] = "/real.txt"
    assert sources.add(store, "r", doc_server.url("/moved.txt"))["lines"] == V1.count(b"\n")


def test_size_cap_and_missing_urls_fail_cleanly(store: Store, doc_server: DocServer) -> None:
    doc_server.files["/big.txt"] = b"# Big\n" + b"x" * 5000
    with pytest.raises(TooLarge) as err:
        sources.add(store, "big", doc_server.url("/big.txt"), max_bytes=1000)
    assert "over the 1000 bytes download cap" in err.value.message
    with pytest.raises(NotFound):
        sources.add(store, "gone", doc_server.url("/gone/llms.txt"))
    assert store.sources() == []


def test_failed_update_keeps_previous_version(store: Store, doc_server: DocServer) -> None:
    doc_server.files["/llms.txt"] = V1
    sources.add(store, "d", doc_server.url("/llms.txt"), exact=True)
    before = store.source("d")
    doc_server.files["/llms.txt"] = V2 * 100
    with pytest.raises(TooLarge):
        sources.update(store, "d", max_bytes=len(V2) * 10)
    assert store.source("d") == before
    assert searching.search(store, "first")["hits"][0]["alias"] == "d"
