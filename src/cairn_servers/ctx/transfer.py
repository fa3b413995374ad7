"""``ctx export`` and ``ctx import``: the knowledge base as JSON Lines, and back.

One JSON object per line, each with a ``type``:

* ``header`` (the first line): ``format`` ``"ctx-export"``, ``version`` (of this format, 1),
  ``schema_version`` (of the database it came from), ``embedding`` (``{"model", "dims"}``, the
  configured embedding identity, or null), ``vectors`` (whether vector lines follow), ``exported_at``;
* ``document``: ``id``, ``source``, ``source_id``, ``title``, ``author``, ``source_url``, ``updated_at``
  (ISO 8601, UTC), ``fingerprint``, ``content_hash``, ``body``, ``metadata``, followed by its chunks;
* ``chunk``: ``document`` (the id of the document line it follows), ``ordinal``, ``heading``, ``text``,
  ``hash`` (sha256 of heading and text, as :func:`cairn_servers.ctx.chunk.chunk_hash` makes it);
* ``vector`` (with ``--vectors``): ``hash`` (of the chunk text it embeds) and ``vector`` (the header's
  ``dims`` numbers; float32 values written with the 9 significant digits that give them back exactly).
  Only vectors of chunks in the export are written, and import refuses a vector whose hash is no chunk's.

Export streams: chunks are read in rowid order in batches (a document's chunks are written together,
so they are contiguous), each document's line comes before its first chunk, and nothing grows with the
size of the knowledge base; one read transaction gives a consistent snapshot while syncs go on.
Chunks keep their relative order, so a knowledge base imported into an empty database answers every
search exactly as the exported one did.

Import runs in one transaction: a bad line (reported with its number) or a killed process leaves the
database as it was. It refuses a database that already has documents unless ``merge`` is set, in which
case a document replaces the one with the same source and source_id. Only one document's chunks are
held in memory at a time.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from array import array
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from cairn_servers.core.errors import Conflict, InvalidInput, NotFound

if TYPE_CHECKING:
    from cairn_servers.ctx.service import Service
    from cairn_servers.ctx.store import DocumentRecord

FORMAT = "ctx-export"
VERSION = 1
BATCH = 500  # chunks (and vectors) read per query while exporting, vectors written per statement on import
MAX_LINE = 256 << 20  # a longer line is refused rather than read into memory
MAX_ORDINAL = 2**31 - 1  # a chunk's position: a 32-bit INTEGER on PostgreSQL


@dataclass
class ExportReport:
    path: str  # "-" for stdout
    documents: int = 0
    chunks: int = 0
    vectors: int = 0
    embedding_model: str | None = None
    bytes: int = 0
    seconds: float = 0.0


@dataclass
class ImportReport:
    path: str
    documents: int = 0
    chunks: int = 0
    vectors: int = 0
    embedding_model: str | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def _embedding(svc: Service) -> tuple[str, int] | None:
    """(identity, dims) of the configured embedding model, or None when embeddings are disabled."""
    if svc.config.embedding.provider == "disabled":
        return None
    embedder = svc.embedder()  # builds no model: the providers load theirs on first use
    return embedder.identity, embedder.dims


def _line(obj: dict[str, Any]) -> bytes:
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    # Line separators JSON leaves raw would split the line for readers that split on them (JavaScript).
    if "\u2028" in text or "\u2029" in text or "\x85" in text:
        text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").replace("\x85", "\\u0085")
    return (text + "\n").encode("utf-8")


_FORMATS: dict[int, str] = {}


def _vector_json(blob: bytes) -> str:
    """A float32 vector as a JSON array: 9 significant digits, which read back as the same float32."""
    values = array("f")
    values.frombytes(blob)
    fmt = _FORMATS.get(len(values))
    if fmt is None:
        fmt = _FORMATS[len(values)] = "[" + ",".join(["%.9g"] * len(values)) + "]"
    text = fmt % tuple(values)  # one C-level formatting pass: about 3 times faster than a format() per value
    if "n" in text:  # nan or inf, which JSON cannot carry
        from cairn_servers.core.errors import StorageError

        raise StorageError("A stored vector is not finite; run `ctx embed rebuild`, then export again.")
    return text


def _known_hashes(store: Any, hashes: list[str]) -> set[str]:
    """Which of ``hashes`` (a batch, at most a few hundred) are the hash of a stored chunk: one query
    (``sql`` runs the same statement on SQLite and PostgreSQL)."""
    wanted = sorted(set(hashes))
    if not wanted:
        return set()
    marks = ",".join("?" * len(wanted))
    return {row[0] for row in store.sql(f"SELECT DISTINCT hash FROM chunks WHERE hash IN ({marks})", wanted)}


def export(svc: Service, out: IO[bytes], *, vectors: bool = False, path: str = "-") -> ExportReport:
    """Write the knowledge base to ``out`` as JSON Lines (see the module docstring)."""
    from cairn_servers.ctx.store import SCHEMA_VERSION
    from cairn_servers.ctx.times import iso

    started = time.perf_counter()
    embedding = _embedding(svc)
    if vectors and embedding is None:
        raise InvalidInput("--vectors exports the configured model's vectors, but [embedding] provider is "
                           '"disabled". Set the provider the vectors were made with, or export without --vectors.')
    report = ExportReport(path=path, embedding_model=embedding[0] if embedding else None)
    store = svc.store

    def write(data: bytes) -> None:
        out.write(data)
        report.bytes += len(data)

    def document(row: tuple[Any, ...]) -> None:
        _, doc_id, source, source_id, title, author, url, updated, fingerprint, content_hash, body, meta = row
        write(_line({"type": "document", "id": doc_id, "source": source, "source_id": source_id, "title": title,
                     "author": author, "source_url": url, "updated_at": iso(updated), "fingerprint": fingerprint,
                     "content_hash": content_hash, "body": body, "metadata": json.loads(meta or "{}")}))
        report.documents += 1

    with store.snapshot():
        write(_line({"type": "header", "format": FORMAT, "version": VERSION, "schema_version": SCHEMA_VERSION,
                     "embedding": {"model": embedding[0], "dims": embedding[1]} if embedding else None,
                     "vectors": vectors, "exported_at": iso(int(time.time()))}))
        last, current, current_id = 0, 0, ""
        while True:
            batch = store.chunks_after(last, BATCH)
            if not batch:
                break
            docs = store.documents_by_rowid(sorted({c[1] for c in batch if c[1] != current}))
            for rowid, doc, ordinal, hash_, heading, text in batch:
                if doc != current:
                    current = doc
                    document(docs[doc])
                    current_id = docs[doc][1]
                write(_line({"type": "chunk", "document": current_id, "ordinal": ordinal, "heading": heading,
                             "text": text, "hash": hash_}))
                report.chunks += 1
            last = batch[-1][0]
        last = 0
        while True:
            rows = store.chunkless_documents_after(last, BATCH)
            if not rows:
                break
            for row in rows:
                document(row)
            last = rows[-1][0]
        if vectors and embedding is not None:
            after = ""
            while True:
                vecs = store.vectors_after(embedding[0], after, BATCH)
                if not vecs:
                    break
                known = _known_hashes(store, [h for h, _ in vecs])
                for hash_, blob in vecs:
                    if hash_ not in known:  # a vector left by a deleted chunk: import would refuse it
                        continue
                    write(b'{"type":"vector","hash":' + json.dumps(hash_).encode() + b',"vector":'
                          + _vector_json(blob).encode() + b"}\n")
                    report.vectors += 1
                after = vecs[-1][0]
    out.flush()
    report.seconds = round(time.perf_counter() - started, 3)
    return report


def export_file(svc: Service, target: str | None, *, vectors: bool = False) -> ExportReport:
    """:func:`export` to stdout (``target`` None or ``-``) or to a file, replaced atomically when complete."""
    if target in (None, "-"):
        return export(svc, sys.stdout.buffer, vectors=vectors)
    from cairn_servers.core.files import atomic_file

    if os.path.isdir(target):
        raise InvalidInput(f"{target} is a directory; give a file name for the export.")
    folder = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(folder):
        raise NotFound(f"Cannot write {target}: the folder {folder} does not exist.")
    with atomic_file(target, mode=0o600) as fh:  # the knowledge base's text: readable by its owner only
        return export(svc, fh, vectors=vectors, path=target)


# ---- import ------------------------------------------------------------------------------------------


class _Lines:
    """The numbered lines of a binary stream, each at most ``MAX_LINE`` bytes, as JSON objects."""

    def __init__(self, stream: IO[bytes], name: str) -> None:
        self.stream = stream
        self.name = name
        self.number = 0

    def error(self, message: str) -> InvalidInput:
        return InvalidInput(f"{self.name}: line {self.number}: {message}", details={"line": self.number})

    def __iter__(self) -> Any:
        while True:
            raw = self.stream.readline(MAX_LINE + 1)
            if not raw:
                return
            self.number += 1
            if len(raw) > MAX_LINE and not raw.endswith(b"\n"):
                raise self.error(f"longer than {MAX_LINE >> 20} MiB; is this a ctx export?")
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except UnicodeDecodeError:
                raise self.error("not UTF-8 text") from None
            except json.JSONDecodeError as exc:
                raise self.error(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
            except ValueError as exc:  # an integer of more than 4,300 digits
                raise self.error(f"not valid JSON ({_short(str(exc))})") from None
            except RecursionError:
                raise self.error("nested too deeply") from None
            if not isinstance(obj, dict):
                raise self.error(f"expected a JSON object, got {type(obj).__name__}")
            # A "\ud800" escape decodes to a lone surrogate, which no database can store as text.
            if b"\\u" in raw and (b"\\ud" in raw or b"\\uD" in raw) and not _encodable(obj):
                raise self.error("a string holds a lone UTF-16 surrogate (such as \\ud800), which is not text")
            yield obj


def _short(text: str) -> str:
    return text if len(text) <= 120 else text[:117] + "..."


def _encodable(value: Any) -> bool:
    """Whether every string in ``value`` (keys included) is valid Unicode text (no lone surrogates)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def _finite(value: Any) -> bool:
    """Whether every number in ``value`` is finite (``NaN``, ``Infinity`` and ``1e400``, which parses as
    infinity, are numbers JSON cannot carry: an export would not be JSON)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return False
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def _get(lines: _Lines, obj: dict[str, Any], key: str, kind: type | tuple[type, ...], *,
         required: bool = True, default: Any = None, what: str | None = None) -> Any:
    """``obj[key]`` if it is a ``kind`` (absent or null: ``default``, or an error when ``required``)."""
    what = what or str(obj.get("type"))
    value = obj.get(key)
    if value is None:
        if required:
            raise lines.error(f"{what} has no {key!r}")
        return default
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join("a string" if k is str else "an integer" if k is int else f"a {k.__name__}"
                            for k in kinds)
        raise lines.error(f"{what} {key!r} must be {names}, not {type(value).__name__}")
    return value


def import_file(svc: Service, source: str, *, merge: bool = False) -> ImportReport:
    """Read an export (a file, or stdin for ``-``) into the knowledge base: see :func:`load`."""
    if source == "-":
        return load(svc, sys.stdin.buffer, "<stdin>", merge=merge)
    if os.path.isdir(source):
        raise InvalidInput(f"{source} is a directory; give the export file.")
    try:
        fh = open(source, "rb")
    except FileNotFoundError:
        raise NotFound(f"No such file: {source}.") from None
    except OSError as exc:
        raise InvalidInput(f"Cannot read {source}: {exc.strerror}.") from None
    with fh:
        return load(svc, fh, source, merge=merge)


def load(svc: Service, stream: IO[bytes], name: str, *, merge: bool = False) -> ImportReport:
    """Import the JSON Lines of ``stream`` in one transaction (``name`` names it in error messages)."""
    from cairn_servers.ctx.chunk import Chunk, chunk_hash
    from cairn_servers.ctx.store import SCHEMA_VERSION, DocumentRecord, document_id
    from cairn_servers.ctx.times import parse_time

    started = time.perf_counter()
    store = svc.store
    report = ImportReport(path=name)
    lines = _Lines(stream, name)
    it = iter(lines)
    with store.transaction():
        if not merge and store.has_documents():
            raise Conflict(f"The knowledge base {store.label} already has documents; `ctx import` loads into an "
                           "empty one. Point [db] path at a new file (or [db] url at an empty database), or pass "
                           "--merge to add to it (a document replaces the one with the same source and source_id).")
        header = next(it, None)
        if header is None:
            raise InvalidInput(f"{name} is empty; expected a ctx export (a header line first).")
        if header.get("type") != "header" or header.get("format") != FORMAT:
            raise lines.error(f'expected the header line ({{"type": "header", "format": "{FORMAT}", ...}}); '
                              "is this a ctx export?")
        version = header.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= VERSION:
            raise lines.error(f"export format version {_short(repr(version))} is not one this ctx reads "
                              f"(1 to {VERSION}); upgrade ctx to import it.")
        schema = header.get("schema_version")
        if schema is not None and (not isinstance(schema, int) or isinstance(schema, bool)
                                   or not 1 <= schema <= SCHEMA_VERSION):
            raise lines.error(f"the export comes from a knowledge base at schema version {_short(repr(schema))}; "
                              f"this ctx knows versions 1 to {SCHEMA_VERSION}. Upgrade ctx to import it.")
        model: str | None = None
        dims = 0
        emb = header.get("embedding")
        if emb is not None:
            if not isinstance(emb, dict):
                raise lines.error("header 'embedding' must be an object or null")
            model = _get(lines, emb, "model", str, what="the header's embedding")
            dims = _get(lines, emb, "dims", int, what="the header's embedding")
            if dims < 1:
                raise lines.error("header embedding 'dims' must be at least 1")
        report.embedding_model = model

        record: DocumentRecord | None = None
        chunks: list[Chunk] = []
        ordinals: set[int] = set()  # of the current document's chunks (one document's are held anyway)
        hashes: list[str] = []
        blobs: list[bytes] = []
        numbers: list[int] = []  # the line of each vector in ``hashes``
        vectors_seen = False

        def flush() -> None:
            if record is not None:
                store.upsert(record, chunks)
                report.documents += 1
                report.chunks += len(chunks)

        def put() -> None:
            assert model is not None
            # A vector must embed a chunk of the knowledge base (imported above, or already there
            # with --merge): one lookup per batch.
            known = _known_hashes(store, hashes)
            for hash_, number in zip(hashes, numbers):
                if hash_ not in known:
                    lines.number = number
                    raise lines.error(f"vector for {_short(repr(hash_))}, which is the hash of no chunk in the "
                                      "file or the knowledge base")
            store.put_vectors(model, hashes, blobs)
            report.vectors += len(hashes)
            hashes.clear()
            blobs.clear()
            numbers.clear()

        for obj in it:
            kind = obj.get("type")
            if kind == "document":
                flush()
                chunks = []
                ordinals.clear()
                source = _get(lines, obj, "source", str)
                source_id = _get(lines, obj, "source_id", str)
                if not source or not source_id:
                    raise lines.error("document 'source' and 'source_id' must not be empty")
                doc_id = _get(lines, obj, "id", str, required=False, default=document_id(source, source_id))
                if doc_id != document_id(source, source_id):
                    raise lines.error(f"document id {doc_id!r} is not the id of {source} {source_id!r}")
                metadata = _get(lines, obj, "metadata", dict, required=False, default={})
                if not _finite(metadata):
                    raise lines.error("document 'metadata' holds a number JSON cannot carry (NaN or infinity)")
                try:
                    updated = parse_time(_get(lines, obj, "updated_at", (str, int)), "updated_at")
                except InvalidInput as exc:
                    raise lines.error(exc.message) from None
                body = _get(lines, obj, "body", str, required=False, default="")
                content_hash = _get(lines, obj, "content_hash", str, required=False, default="")
                record = DocumentRecord(
                    source=source, source_id=source_id, title=_get(lines, obj, "title", str, required=False,
                                                                   default=source_id),
                    body=body, updated_at=int(updated or 0),
                    fingerprint=_get(lines, obj, "fingerprint", str, required=False, default=""),
                    content_hash=content_hash, author=_get(lines, obj, "author", str, required=False),
                    source_url=_get(lines, obj, "source_url", str, required=False), metadata=metadata)
                if not merge and store.has_document(doc_id):
                    raise lines.error(f"document {source} {source_id!r} appears a second time")
            elif kind == "chunk":
                if record is None:
                    raise lines.error("a chunk after vector lines: chunks follow their document's line, and "
                                      "vectors come last" if vectors_seen else "a chunk before any document line")
                owner = _get(lines, obj, "document", str)
                if owner != record.id:
                    raise lines.error(f"chunk of document {owner!r} does not follow that document's line "
                                      f"(the last document line was {record.id!r})")
                heading = _get(lines, obj, "heading", str, required=False, default="")
                text = _get(lines, obj, "text", str)
                ordinal = _get(lines, obj, "ordinal", int, required=False, default=len(chunks))
                if not 0 <= ordinal <= MAX_ORDINAL:
                    raise lines.error(f"chunk 'ordinal' {_short(str(ordinal))} is out of range (0 to {MAX_ORDINAL})")
                if ordinal in ordinals:
                    raise lines.error(f"chunk {ordinal} of document {record.id!r} appears a second time")
                ordinals.add(ordinal)
                expected = chunk_hash(heading, text)
                hash_ = _get(lines, obj, "hash", str, required=False, default=expected)
                if hash_ != expected:
                    raise lines.error(f"chunk hash {hash_!r} does not match its heading and text ({expected!r})")
                chunks.append(Chunk(ordinal, heading, text, hash_))
            elif kind == "vector":
                if model is None:
                    raise lines.error("a vector line, but the header names no embedding model")
                if record is not None:  # the last document's chunks: stored before its vectors are checked
                    flush()
                    record, chunks = None, []
                vectors_seen = True
                hash_ = _get(lines, obj, "hash", str)
                values = _get(lines, obj, "vector", list)
                try:
                    if len(values) != dims or any(type(v) is bool for v in values):
                        raise TypeError
                    blob = array("f", values)  # TypeError for anything but numbers
                except TypeError:
                    raise lines.error(f"vector must be {dims} numbers (the header's dims)") from None
                try:
                    finite = math.isfinite(math.fsum(blob))
                except ValueError:  # inf + -inf
                    finite = False
                if not finite:  # NaN, infinity, or a number past float32's range (it became infinity)
                    raise lines.error("vector has a value that is not a finite float32 number")
                hashes.append(hash_)
                blobs.append(blob.tobytes())
                numbers.append(lines.number)
                if len(hashes) >= BATCH:
                    put()
            elif kind == "header":
                raise lines.error("a second header line")
            else:
                raise lines.error(f"unknown line type {kind!r}; expected document, chunk or vector")
        flush()
        if hashes:
            put()
        store.bump()
    report.notes = _notes(svc, report)
    report.seconds = round(time.perf_counter() - started, 3)
    return report


def _notes(svc: Service, report: ImportReport) -> list[str]:
    """What the user may want to do next: embed the chunks the imported vectors do not cover."""
    try:
        configured = _embedding(svc)
    except Exception:
        return []
    if configured is None:
        if report.vectors:
            return [f"The vectors are for {report.embedding_model}; set [embedding] to that model for semantic "
                    "and hybrid search."]
        return []
    pending = svc.store.pending_count(configured[0])
    if pending:
        why = ("" if not report.vectors or report.embedding_model == configured[0]
               else f" (the file's vectors are for {report.embedding_model})")
        return [f"{pending} chunks have no vector for {configured[0]}{why}: run `ctx embed pending`."]
    return []
