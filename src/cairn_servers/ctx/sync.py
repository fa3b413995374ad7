"""Incremental sync of one connector into the store, and embedding of pending chunks.

Per source: list entries (cheap), skip those whose fingerprint is unchanged, load and re-chunk the
rest, and commit in batches. Documents no longer listed are deleted only after a *complete* scan,
so a source that fails halfway never loses documents. A sync killed at any point leaves the last
committed batch searchable; the next run skips whatever was already committed (same fingerprints)
and carries on. Embedding runs afterwards in its own batches; its failure leaves chunks pending.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cairn_servers.core.errors import CairnError, InvalidInput
from cairn_servers.core.sanitize import scrub
from cairn_servers.ctx.chunk import chunk_text
from cairn_servers.ctx.config import ChunkingConfig, ConnectorConfig
from cairn_servers.ctx.store import DocumentRecord
from cairn_servers.ctx.store import KnowledgeStore as Store

if TYPE_CHECKING:
    from cairn_servers.search.embed import Embedder

BATCH_DOCS = 500
BATCH_SECONDS = 1.0

# With a progress callback, texts are embedded PROGRESS_STEP at a time (not the configured batch_size),
# so the bar advances every few hundred milliseconds on a CPU model instead of once per 256 texts.
PROGRESS_STEP = 32
Progress = Callable[[str, int, int], None]  # (label, done, total); the CLI draws cairn_servers.core.output.ProgressBar


@dataclass
class SyncReport:
    """What one sync of one source did."""

    source: str
    ok: bool = True
    dry_run: bool = False
    scanned: int = 0
    unchanged: int = 0
    added: int = 0
    updated: int = 0
    deleted: int = 0
    skipped: int = 0
    warnings: list[str] = field(default_factory=list)  # "path: skipped: reason" (corrupt, encrypted, too big)
    chunks: int = 0
    embedded: int = 0
    pending: int = 0
    resumed: bool = False
    error: str | None = None
    error_code: str | None = None  # the error taxonomy's code when the source failed
    seconds: float = 0.0
    would_add: list[str] = field(default_factory=list)
    would_update: list[str] = field(default_factory=list)
    would_delete: list[str] = field(default_factory=list)
    held: int = 0  # new or changed documents left for a later sync by --since, --until or --limit


@dataclass(frozen=True)
class Window:
    """Which new or changed documents a sync writes (``ctx sync --since/--until/--limit``): those updated at or
    after ``since`` and at or before ``until`` (unix seconds), at most ``limit`` per source. The others
    keep their indexed version (or stay out) and are written by a later sync; a document gone from the
    source is still removed, since the scan itself is complete."""

    since: int | None = None
    until: int | None = None
    limit: int | None = None

    def admits(self, updated_at: int) -> bool:
        return ((self.since is None or updated_at >= self.since)
                and (self.until is None or updated_at <= self.until))


def window(since: str | int | None = None, until: str | int | None = None,
           limit: str | int | None = None) -> Window:
    """``--since``, ``--until`` (``YYYY-MM-DD``, ISO 8601 or unix seconds; a bare date ``--until`` takes the
    whole day, as Context Harness does) and ``--limit`` (documents written per source) checked, as a Window."""
    from cairn_servers.ctx.times import parse_time

    start = parse_time(since, "--since")
    end = parse_time(until, "--until")
    if end is not None and isinstance(until, str) and _bare_date(until):
        end += 86_399  # 23:59:59 of that day
    if start is not None and end is not None and start > end:
        raise InvalidInput(f"--since {since} is after --until {until}: no document could be synced. "
                           "Give a --since on or before the --until.")
    count: int | None = None
    if limit is not None:
        text = str(limit).strip()
        if isinstance(limit, bool) or not (text.isascii() and text.isdigit()) or int(text) < 1 or len(text) > 18:
            raise InvalidInput(f"--limit must be a whole number of documents, 1 or more, not {str(limit)[:40]!r}.")
        count = int(text)
    return Window(start, end, count)


def _bare_date(text: str) -> bool:
    t = text.strip()
    return len(t) == 10 and t[4] == "-" and t[7] == "-" and (t[:4] + t[5:7] + t[8:]).isdigit()


def sync_source(
    store: Store,
    config: ConnectorConfig,
    chunking: ChunkingConfig,
    *,
    full: bool = False,
    dry_run: bool = False,
    progress: Progress | None = None,
    only: Window | None = None,
) -> SyncReport:
    """Bring ``config``'s documents in the store up to date; never raises for source failures.

    Holds the store's lock on the source throughout (:meth:`KnowledgeStore.source_lock`): a second
    sync of the same source, from any process, waits and then finds the work done.
    """
    only = only or Window()
    if dry_run:
        return _sync_source(store, config, chunking, full=full, dry_run=dry_run, progress=progress, only=only)
    with store.source_lock(config.source):
        return _sync_source(store, config, chunking, full=full, dry_run=dry_run, progress=progress, only=only)


def _sync_source(store: Store, config: ConnectorConfig, chunking: ChunkingConfig, *, full: bool, dry_run: bool,
                 progress: Progress | None, only: Window) -> SyncReport:
    from cairn_servers.ctx import connectors

    started = time.monotonic()
    report = SyncReport(source=config.source, dry_run=dry_run)
    known = store.known(config.source)
    previous = store.checkpoints().get(config.source)
    report.resumed = bool(previous and previous["status"] == "running")
    try:
        from cairn_servers.ctx.extract import limits

        limits()  # a bad CTX_EXTRACT_* setting fails the sync here, with its reason, not each document
        connector = connectors.create(config)
        if not dry_run:
            with store.transaction():
                store.checkpoint(config.source, "running")
        entries = list(connector.scan())
    except CairnError as exc:
        report.error_code = exc.code
        return _failed(store, report, exc.message, dry_run, started)
    except OSError as exc:
        report.error_code = "storage"
        return _failed(store, report, f"{config.source}: {exc}", dry_run, started)

    report.scanned = len(entries)
    seen: set[str] = set()
    batch: list[tuple[DocumentRecord, list]] = []  # type: ignore[type-arg]
    touches: list[tuple[int, str, int]] = []
    last_commit = time.monotonic()

    def flush() -> None:
        nonlocal batch, touches, last_commit
        if (batch or touches) and not dry_run:
            with store.transaction():
                for doc, chunks in batch:
                    store.upsert(doc, chunks)
                for rowid, fp, ts in touches:
                    store.set_fingerprint(rowid, fp, ts)
                if batch:
                    store.bump()
        batch, touches, last_commit = [], [], time.monotonic()

    total = len(entries)
    for i, entry in enumerate(entries):
        if progress and (i % 64 == 0):
            progress(config.source, i, total)
        old = known.get(entry.source_id)
        if old is not None and old.fingerprint == entry.fingerprint and not full:
            seen.add(entry.source_id)
            report.unchanged += 1
            continue
        if only.limit is not None and report.added + report.updated >= only.limit:
            if old is not None:
                seen.add(entry.source_id)  # not read: kept as indexed until a later sync
            report.held += 1
            continue
        try:
            item = entry.load()
        except CairnError as exc:  # the source failed while reading this entry (an S3 endpoint went away)
            report.error = scrub(exc.message)
            item = None
            if old is not None:
                seen.add(entry.source_id)  # a failed read keeps the version already indexed
        if item is None:
            continue  # skipped by policy (binary, vanished): not seen, so removed if indexed before
        seen.add(entry.source_id)
        updated_at = int(item.updated_at or time.time())
        if not only.admits(updated_at):
            if old is None:
                seen.discard(entry.source_id)  # left out until a sync that admits it
            report.held += 1  # its fingerprint is not stored: a sync without the window writes it
            continue
        content_hash = hashlib.sha256(item.body.encode("utf-8")).hexdigest()
        if old is not None and old.content_hash == content_hash and not full:
            report.unchanged += 1
            touches.append((old.rowid, entry.fingerprint, updated_at))
            continue
        if dry_run:
            (report.would_update if old else report.would_add).append(entry.source_id)
        doc = DocumentRecord(
            source=config.source,
            source_id=item.source_id,
            title=item.title or item.source_id,
            body=item.body,
            updated_at=updated_at,
            fingerprint=entry.fingerprint,
            content_hash=content_hash,
            author=item.author,
            source_url=scrub(item.source_url) if item.source_url else None,
            metadata=item.metadata,
        )
        chunks = chunk_text(item.body, chunking.max_tokens, chunking.overlap_tokens, sections=item.sections)
        report.chunks += len(chunks)
        if old:
            report.updated += 1
        else:
            report.added += 1
        batch.append((doc, chunks))
        if len(batch) >= BATCH_DOCS or time.monotonic() - last_commit > BATCH_SECONDS:
            flush()
    flush()
    report.skipped = connector.skipped
    report.warnings = [scrub(w) for w in getattr(connector, "warnings", [])]
    if report.warnings:  # also on stderr, where a server's operator sees them (a file skipped past a limit)
        from cairn_servers.core import log

        for warning in report.warnings:
            log.warn(f"{config.source}: {warning}")

    gone = [(sid, k.rowid) for sid, k in known.items() if sid not in seen]
    report.deleted = len(gone)
    if dry_run:
        report.would_delete = sorted(sid for sid, _ in gone)
    else:
        with store.transaction():
            if gone:
                store.delete([rowid for _, rowid in gone])
                store.bump()
            store.checkpoint(config.source, "ok", documents=len(seen), error=report.error)
    if progress:
        progress(config.source, total, total)
    report.seconds = round(time.monotonic() - started, 3)
    return report


def _failed(store: Store, report: SyncReport, message: str, dry_run: bool, started: float) -> SyncReport:
    report.ok = False
    report.error = scrub(message)
    if not dry_run:
        with store.transaction():
            store.checkpoint(report.source, "running")
            store.checkpoint(report.source, "error", documents=len(store.known(report.source)), error=report.error)
    report.seconds = round(time.monotonic() - started, 3)
    return report


@dataclass
class EmbedReport:
    """What one embedding run did. ``pending``: chunk texts still without a vector afterwards (with
    ``dry_run``, before: nothing was embedded, and ``would_embed`` says how many a real run would)."""

    model: str
    embedded: int = 0
    pending: int = 0
    error: str | None = None
    error_code: str | None = None
    seconds: float = 0.0
    dry_run: bool = False
    would_embed: int = 0


def embed_pending(
    store: Store, embedder: "Embedder", batch_size: int, *, progress: Progress | None = None, limit: int | None = None,
    stop: Callable[[], bool] | None = None,
) -> EmbedReport:
    """Embed chunks that have no vector for ``embedder``, ``batch_size`` texts per call of the provider, at most
    ``limit`` of them; a failure stops early and leaves them pending. ``stop()`` true (a server shutting
    down) ends the run between two calls, the vectors already made committed.

    Under the store's embedding lock for the model (:meth:`KnowledgeStore.source_lock` on a name no source
    can have), as indexing is under its source's: a second sync or ``ctx embed`` (from any process) waits,
    then finds the chunks embedded, so overlapping runs never embed a chunk twice."""
    with store.source_lock(embedding_lock(embedder.identity)):
        return _embed_pending(store, embedder, batch_size, progress=progress, limit=limit, stop=stop)


def count_arg(value: str | int | None, flag: str, what: str, most: int = 10**12) -> int | None:
    """``--limit`` / ``--batch-size`` of ``ctx embed``: a whole number from 1 to ``most``, or None when not given."""
    if value is None:
        return None
    text = str(value).strip()
    if isinstance(value, bool) or not (text.isascii() and text.isdigit()) or len(text) > 18 \
            or not 1 <= int(text) <= most:
        raise InvalidInput(f"{flag} must be a whole number of {what} from 1 to {most}, not {str(value)[:40]!r}.")
    return int(text)


def embedding_lock(model: str) -> str:
    """The name of the store lock held while ``model``'s vectors are computed (no source can have it)."""
    return f"\x00embedding {model}"


def _embed_pending(
    store: Store, embedder: "Embedder", batch_size: int, *, progress: Progress | None = None, limit: int | None = None,
    stop: Callable[[], bool] | None = None, count_pending: bool = True,
) -> EmbedReport:
    started = time.monotonic()
    report = EmbedReport(model=embedder.identity)
    total = store.pending_count(embedder.identity) if progress else 0
    if limit is not None:
        total = min(total, limit)
    batch_size = max(1, batch_size)
    # Commit a few batches at a time: fewer fsyncs, and a kill loses at most one group's work.
    group = max(batch_size, 1024)
    while limit is None or report.embedded < limit:
        rows = store.pending(embedder.identity, group if limit is None else min(group, limit - report.embedded))
        if not rows:
            break
        try:
            vectors = []
            step = min(batch_size, PROGRESS_STEP) if progress else batch_size  # a bar that moves
            for s in range(0, len(rows), step):
                if stop is not None and stop():
                    break
                part = rows[s : s + step]
                vectors.append(embedder.embed([_embed_text(h, t) for _, h, t in part]))
                if progress:
                    progress("embedding", report.embedded + s + len(part), total)
        except CairnError as exc:
            report.error, report.error_code = scrub(exc.message), exc.code
            break
        except Exception as exc:  # a provider bug must not fail the sync
            report.error, report.error_code = scrub(f"{type(exc).__name__}: {exc}"), "internal"
            break
        if not vectors:
            break  # stopped before the group's first call
        import numpy as np

        matrix = np.concatenate(vectors).astype(np.float32, copy=False)
        done = rows[: len(matrix)]  # all of them, unless a stop came between two calls
        with store.transaction():
            store.put_vectors(embedder.identity, [h for h, _, _ in done], [row.tobytes() for row in matrix])
            store.bump()
        report.embedded += len(done)
        if progress:
            progress("embedding", report.embedded, total)
        if stop is not None and stop():
            break
    report.pending = store.pending_count(embedder.identity) if count_pending else -1
    report.seconds = round(time.monotonic() - started, 3)
    return report


def _embed_text(heading: str, text: str) -> str:
    # The heading path gives short chunks their topic.
    return f"{heading}\n{text}" if heading and not text.startswith(heading.rsplit(" > ", 1)[-1]) else text


# ---- background embedding (``ctx serve``) --------------------------------------------------------

# Chunk texts embedded and committed per step of the background embedder: each commit makes the next semantic
# query of a server apply the step's rows to the vector files (cairn_servers.ctx.vectorfile), so not too often.
BACKGROUND_STEP = 1024
BACKGROUND_BATCH = 32  # texts per provider call: the most a shutdown waits for
BACKGROUND_IDLE_S = 2.0  # between looks for new pending chunks (a look is one small read)
BACKGROUND_BACKOFF_S = 30.0  # after the provider failed; doubled after each failure in a row
BACKGROUND_BACKOFF_MAX_S = 600.0


class BackgroundEmbedder:
    """Embeds pending chunks in a thread of a server (``ctx serve``): one bounded step at a time
    (:data:`BACKGROUND_STEP` texts committed together, :data:`BACKGROUND_BATCH` per provider call), on its own
    connection (``open_store``), so requests never wait for it; keyword search already finds the chunks.

    A step runs only under the model's embedding lock, taken without waiting: while a ``ctx sync`` or
    ``ctx embed`` of another process embeds, the server leaves it the work. When nothing is pending it
    looks again every :data:`BACKGROUND_IDLE_S` seconds, and only queries the chunks once the store was
    written to (its generation moved). A failure (the provider, the database: a read-only replica) is logged
    once (stderr) and retried after :data:`BACKGROUND_BACKOFF_S`, twice as long after each failure in a row
    (at most :data:`BACKGROUND_BACKOFF_MAX_S`). :meth:`stop` ends it between two provider calls, committing the vectors
    the step has made."""

    def __init__(self, open_store: Callable[[], Store], embedder: "Embedder", *, step: int | None = None,
                 batch: int | None = None, idle: float = BACKGROUND_IDLE_S,
                 backoff: float = BACKGROUND_BACKOFF_S) -> None:
        import threading

        self._open = open_store
        self.embedder = embedder
        self.step_size = BACKGROUND_STEP if step is None else step
        self.batch = BACKGROUND_BATCH if batch is None else batch
        self.idle, self.backoff = idle, backoff
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._idle_generation: int | None = None
        self.embedded = 0  # chunk texts embedded since start
        self.error: str | None = None  # the last failure, None once a step succeeded

    def start(self) -> None:
        import threading

        self._thread = threading.Thread(target=self._run, name="ctx-embed", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 60.0) -> None:
        """Stop after the provider call under way; wait for that (at most ``timeout`` seconds)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        from cairn_servers.core import log

        store: Store | None = None
        failures = 0
        try:
            while not self._stop.is_set():
                try:
                    if store is None:
                        store = self._open()
                    done = self.run_step(store)
                    wait = 0.0 if done else self.idle
                    failures = 0
                except Exception as exc:  # the provider or the database failed: retry later
                    message = scrub(getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}")
                    wait = min(self.backoff * 2 ** failures, BACKGROUND_BACKOFF_MAX_S)
                    failures += 1
                    if message != self.error:
                        log.warn(f"background embedding stopped for {wait:g} s: {message}")
                    self.error = message
                    if store is not None:  # a broken connection is opened again
                        store.close()
                        store = None
                if wait:
                    self._stop.wait(wait)
        finally:
            if store is not None:
                store.close()

    def run_step(self, store: Store) -> int:
        """One step: embed up to ``step`` pending chunk texts; how many were embedded (0: none pending,
        another process is embedding, or a stop was asked)."""
        generation = store.generation()
        if generation == self._idle_generation:
            return 0  # nothing written since nothing was pending
        with store.try_source_lock(embedding_lock(self.embedder.identity)) as mine:
            if not mine:
                return 0
            report = _embed_pending(store, self.embedder, self.batch, limit=self.step_size,
                                    stop=self._stop.is_set, count_pending=False)
        if report.error:
            raise CairnError(report.error)
        self.error = None
        self.embedded += report.embedded
        if report.embedded == 0 and not self._stop.is_set():
            self._idle_generation = generation
        return report.embedded
