"""blz retrieval quality: recall@5 and MRR@10 of keyword search over the test corpora.

    .venv/bin/python benchmarks/blz_quality.py [--questions benchmarks/blz_quality.json] [--misses]

Each question in the data file (beside this script) names a corpus and the heading, or the tail of
a heading path, whose section answers it. Every corpus is added through the service
(cairn_servers.blz.sources.add) into a fresh BLZ_DATA_DIR in a temporary directory; each question is then
searched (cairn_servers.blz.search.search, restricted to its corpus, 10 hits). A hit answers the question
when its headingPath ends with the expected path, compared without Markdown link targets, backticks,
case and extra spaces. Figures: recall@5 (share of questions answered in the top 5) and MRR@10
(mean of 1/rank of the first answering hit, 0 when none in the top 10), overall and per corpus.
Headings the parser no longer finds are listed under ``missingAnswers`` (a question whose answer is
not an indexed heading at all). Prints one JSON document; --misses adds the questions not answered
in the top 5 with the headings that were returned instead; --ranks every question's rank.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests._data import data_dir  # noqa: E402 (after the path set-up)

_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")


def norm(heading: str) -> str:
    """A heading as compared: link text without its target, no backticks, lower case, single spaces."""
    return " ".join(_LINK.sub(r"\1", heading).replace("`", "").lower().split())


def answers(path: list[str], expected: list[str]) -> bool:
    got, want = [norm(h) for h in path], [norm(h) for h in expected]
    return len(got) >= len(want) and got[len(got) - len(want):] == want


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=Path, default=Path(__file__).with_name("blz_quality.json"))
    ap.add_argument("--misses", action="store_true", help="list the questions missed in the top 5")
    ap.add_argument("--ranks", action="store_true", help="list every question with the rank of its answer")
    args = ap.parse_args()
    spec = json.loads(args.questions.read_text(encoding="utf-8"))
    llms = data_dir() / "llms"

    from cairn_servers.blz import sources
    from cairn_servers.blz.search import search
    from cairn_servers.blz.store import Store

    with tempfile.TemporaryDirectory(prefix="blz-quality-") as tmp:
        os.environ["BLZ_DATA_DIR"] = str(Path(tmp) / "blz-data")  # this run's data root, nothing else's
        store = Store(Path(os.environ["BLZ_DATA_DIR"]))
        t0 = time.perf_counter()
        headings: dict[str, set[str]] = {}
        for alias, rel in spec["corpora"].items():
            sources.add(store, alias, str(llms / rel), exact=True)
            headings[alias] = {norm(text) for _l, _lv, text, _e in store.headings(alias)}
        index_s = time.perf_counter() - t0
        per: dict[str, dict[str, float]] = {}
        misses, missing, ranks = [], [], []
        for item in spec["questions"]:
            alias, expected = item["corpus"], item["answer"]
            if norm(expected[-1]) not in headings[alias]:
                missing.append({"corpus": alias, "q": item["q"], "answer": expected})
            hits = search(store, item["q"], [alias], limit=10)["hits"]
            rank = next((i for i, h in enumerate(hits, 1) if answers(h["headingPath"], expected)), None)
            ranks.append({"corpus": alias, "q": item["q"], "rank": rank})
            row = per.setdefault(alias, {"questions": 0, "hit5": 0, "rr": 0.0})
            row["questions"] += 1
            row["hit5"] += 1 if rank is not None and rank <= 5 else 0
            row["rr"] += 1 / rank if rank else 0.0
            if rank is None or rank > 5:
                misses.append({"corpus": alias, "q": item["q"], "answer": expected, "rank": rank,
                               "top": [" > ".join(h["headingPath"][-2:]) for h in hits[:5]]})
        store.close()

    def figures(rows: list[dict[str, float]]) -> dict[str, Any]:
        n = sum(r["questions"] for r in rows)
        return {"questions": int(n), "recall@5": round(sum(r["hit5"] for r in rows) / n, 3),
                "mrr@10": round(sum(r["rr"] for r in rows) / n, 3)}

    out: dict[str, Any] = {"overall": figures(list(per.values())),
                           "perCorpus": {a: figures([r]) for a, r in sorted(per.items())},
                           "indexSeconds": round(index_s, 2), "missingAnswers": missing}
    if args.misses:
        out["misses"] = misses
    if args.ranks:
        out["ranks"] = ranks
    print(json.dumps(out, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
