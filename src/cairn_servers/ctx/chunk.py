"""Markdown-aware chunking: headings start chunks, code fences stay whole, a token budget with overlap.

A *token* here is a whitespace-separated word: cheap, deterministic and close enough to model
tokens for budgeting. The same text and settings always give the same chunks, so chunk ids
(content hashes) are stable across runs and unchanged chunks are never re-embedded.

Algorithm: the text is split into blocks (a heading line, a fenced code block, a paragraph).
Blocks are packed greedily into chunks of at most ``max_tokens``. A heading closes the current
chunk unless that chunk is still small (under a quarter of the budget), so tiny sections merge
with their neighbours. When a chunk closes because the budget is full (inside a section), the next
one starts with the last ``overlap_tokens`` words of prose from it. A block larger than the budget
is cut into windows: prose by words, code by lines (each piece re-opened with its fence).

Extracted documents (``cairn_servers.ctx.extract``) may pass ``sections``: a heading at that level or above
(a PDF page, a slide, a sheet) always closes the chunk, so no chunk spans two sections and a
chunk's heading path cites its page.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


@dataclass(frozen=True)
class Chunk:
    """One chunk: its position in the document, its heading path and text, and its content hash."""

    ordinal: int
    heading: str
    text: str
    hash: str


@dataclass
class _Block:
    kind: str  # "heading" | "code" | "text"
    text: str
    level: int = 0
    fence: str = ""

    @property
    def tokens(self) -> int:
        return len(self.text.split())


def chunk_hash(heading: str, text: str) -> str:
    """The chunk id: sha256 of heading path and text (first 32 hex digits)."""
    return hashlib.sha256(f"{heading}\x00{text}".encode("utf-8")).hexdigest()[:32]


def blocks(text: str) -> list[_Block]:
    """Headings (ATX, outside fences), fenced code blocks and blank-line separated paragraphs."""
    out: list[_Block] = []
    para: list[str] = []
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    i = 0

    def flush() -> None:
        if para:
            body = "\n".join(para).strip("\n")
            if body.strip():
                out.append(_Block("text", body))
            para.clear()

    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            flush()
            marker = fence.group(1)
            code = [line]
            i += 1
            while i < len(lines):
                code.append(lines[i])
                stripped = lines[i].strip()
                i += 1
                if stripped.startswith(marker[0] * len(marker)) and not stripped.strip(marker[0]):
                    break
            out.append(_Block("code", "\n".join(code), fence=marker))
            continue
        heading = _ATX.match(line)
        if heading:
            flush()
            out.append(_Block("heading", line.strip(), level=len(heading.group(1))))
        elif not line.strip():
            flush()
        else:
            para.append(line)
        i += 1
    flush()
    return out


def _split_block(block: _Block, budget: int, overlap: int) -> list[_Block]:
    if block.tokens <= budget:
        return [block]
    if block.kind == "code":
        lines = block.text.split("\n")
        opener, body = lines[0], lines[1:]
        closer = body.pop() if body and body[-1].strip().startswith(block.fence[0] * 3) else block.fence
        pieces: list[_Block] = []
        current: list[str] = []
        size = len(opener.split()) + 1
        for line in body:
            n = len(line.split())
            if current and size + n > budget:
                pieces.append(_Block("code", "\n".join([opener, *current, closer]), fence=block.fence))
                current, size = [], len(opener.split()) + 1
            current.append(line)
            size += n
        if current:
            pieces.append(_Block("code", "\n".join([opener, *current, closer]), fence=block.fence))
        # A single line longer than the budget still needs cutting: fall back to words.
        out: list[_Block] = []
        for p in pieces:
            out.extend([p] if p.tokens <= budget else _split_block(_Block("text", p.text), budget, overlap))
        return out
    words = block.text.split()
    step = max(1, budget - overlap)
    return [_Block("text", " ".join(words[s : s + budget])) for s in range(0, max(1, len(words) - overlap), step)]


def chunk_text(text: str, max_tokens: int = 400, overlap_tokens: int = 40, *, sections: int = 0) -> list[Chunk]:
    """``text`` cut into chunks; see the module docstring for the rules (``sections``: 0 = Markdown's)."""
    if overlap_tokens >= max_tokens:
        raise ValueError("overlap_tokens must be smaller than max_tokens")
    chunks: list[tuple[str, str]] = []
    path: list[tuple[int, str]] = []  # enclosing headings (level, line)
    current: list[_Block] = []
    fresh = True  # current holds nothing but the overlap carried from the previous chunk
    heading = ""
    size = 0
    min_tokens = max(1, max_tokens // 4)

    def emit(carry: bool) -> None:
        nonlocal current, size, fresh
        if not current or fresh:
            current, size, fresh = [], 0, True
            return
        chunks.append((heading, "\n\n".join(b.text for b in current)))
        tail: list[_Block] = []
        if carry and overlap_tokens:
            prose = [w for b in current if b.kind == "text" for w in b.text.split()]
            if prose:
                tail = [_Block("text", " ".join(prose[-overlap_tokens:]))]
        current, size, fresh = tail, sum(b.tokens for b in tail), True

    for block in blocks(text):
        if block.kind == "heading":
            if size >= min_tokens or block.level <= sections:
                emit(carry=False)
            while path and path[-1][0] >= block.level:
                path.pop()
            path.append((block.level, block.text))
        for piece in _split_block(block, max_tokens, overlap_tokens):
            if current and size + piece.tokens > max_tokens:
                emit(carry=True)
                if size + piece.tokens > max_tokens:  # the overlap tail would not fit either
                    current, size = [], 0
            if fresh:
                heading = " > ".join(h for _, h in path)
                fresh = False
            current.append(piece)
            size += piece.tokens
    emit(carry=False)
    return [Chunk(i, h, t, chunk_hash(h, t)) for i, (h, t) in enumerate(chunks)]


def location(heading: str) -> str:
    """A heading path as a citation: ``# Guide > ## Install`` -> ``Guide > Install``; ``# Page 12`` -> ``Page 12``."""
    return " > ".join(part.strip().lstrip("#").strip() for part in heading.split(" > ")) if heading else ""


def title_of(text: str, fallback: str) -> str:
    """The first level-1 heading (outside code fences), else ``fallback``."""
    for block in blocks(text[:20_000]):
        if block.kind == "heading" and block.level == 1:
            m = _ATX.match(block.text)
            if m and m.group(2):
                return m.group(2).strip()
    return fallback
