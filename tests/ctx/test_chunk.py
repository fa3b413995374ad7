from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from cairn_servers.ctx.chunk import blocks, chunk_text, title_of


def test_headings_start_chunks_and_carry_their_path() -> None:
    text = "# Guide\n\n" + "intro words " * 60 + "\n\n## Install\n\n" + "pip install " * 60 + "\n\n## Use\n\nrun it\n"
    chunks = chunk_text(text, max_tokens=200, overlap_tokens=10)
    assert [c.heading for c in chunks] == ["# Guide", "# Guide > ## Install", "# Guide > ## Use"]
    assert chunks[1].text.startswith("## Install")


def test_small_sections_merge() -> None:
    text = "# A\n\none\n\n## B\n\ntwo\n\n## C\n\nthree\n"
    chunks = chunk_text(text, max_tokens=100, overlap_tokens=10)
    assert len(chunks) == 1 and "three" in chunks[0].text


def test_code_fences_stay_whole_and_hide_headings() -> None:
    code = "```python\n# not a heading\n" + "x = 1\n" * 20 + "```"
    text = "# Doc\n\n" + "word " * 50 + "\n\n" + code + "\n\nafter\n"
    kinds = [b.kind for b in blocks(text)]
    assert kinds == ["heading", "text", "code", "text"]
    chunks = chunk_text(text, max_tokens=80, overlap_tokens=5)
    assert any(code in c.text for c in chunks)
    assert all(c.heading == "# Doc" for c in chunks)


def test_oversized_code_block_is_split_and_reopened() -> None:
    code = "```sh\n" + "\n".join(f"echo line {i}" for i in range(100)) + "\n```"
    chunks = chunk_text(code, max_tokens=50, overlap_tokens=5)
    assert len(chunks) > 2
    for c in chunks:
        assert c.text.startswith("```sh\n") and c.text.endswith("```")
        assert len(c.text.split()) <= 50


def test_long_prose_windows_overlap() -> None:
    words = [f"w{i}" for i in range(1000)]
    chunks = chunk_text(" ".join(words), max_tokens=100, overlap_tokens=20)
    assert all(len(c.text.split()) <= 100 for c in chunks)
    first, second = chunks[0].text.split(), chunks[1].text.split()
    assert first[-20:] == second[:20]
    covered = {w for c in chunks for w in c.text.split()}
    assert covered == set(words)


def test_title() -> None:
    assert title_of("```\n# no\n```\n# Real Title\n", "f.md") == "Real Title"
    assert title_of("no heading", "f.md") == "f.md"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["# H1", "## H2", "```", "word", "two words here", "", "~~~", "### H3 ###"]),
                max_size=200), st.integers(16, 120))
def test_budget_stable_and_lossless(lines: list[str], budget: int) -> None:
    text = "\n".join(lines)
    overlap = budget // 8
    chunks = chunk_text(text, budget, overlap)
    assert chunks == chunk_text(text, budget, overlap)  # stable ids across runs
    assert all(len(c.text.split()) <= budget for c in chunks)
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    # Every word of the input survives somewhere (fence markers may be added, never dropped).
    assert {w for w in text.split()} <= {w for c in chunks for w in c.text.split()}


def test_real_corpus_is_chunked_within_budget(test_data: Path) -> None:
    text = (test_data / "llms" / "hono" / "llms-small.txt").read_text()
    chunks = chunk_text(text, 400, 40)
    assert len(chunks) > 50
    assert max(len(c.text.split()) for c in chunks) <= 400
    assert len({c.hash for c in chunks}) >= len(chunks) - 5
