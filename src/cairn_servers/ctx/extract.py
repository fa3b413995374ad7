"""Text out of documents: PDF, DOCX, PPTX, XLSX and HTML, with their structure as Markdown headings.

Each format becomes Markdown-ish text the chunker already understands:

* **PDF** (pypdfium2): one ``# Page N`` section per page (N counts from 1, as a viewer's "go to page").
* **DOCX** (standard library: ``zipfile`` + ``ElementTree``): the document's headings (``Heading 1``..
  ``Heading 9``, ``Title``, outline levels) as ``#``..``######``, paragraphs, list items as ``- ``,
  table rows as ``a | b | c``.
* **PPTX** (standard library): one ``# Slide N: title`` section per slide, then its text frames and
  tables in order, then the speaker notes.
* **XLSX** (python-calamine): one ``# Sheet: name`` section per sheet; rows as ``a | b | c`` in groups,
  each group starting with the sheet's header row, so every chunk carries the column names.
* **HTML** (standard library ``html.parser``): ``<h1>``..``<h6>`` as headings, block elements as
  paragraphs, ``<pre>`` as fenced code, ``<script>``/``<style>`` dropped.

PDF pages, slides and sheets are *sections* (:attr:`Extracted.sections` = 1): the chunker never lets
two share a chunk, so a chunk's heading path ("Page 12") is a citation. Extracted lines that would
read as Markdown structure (a PDF line starting with ``#`` or a fence) are escaped with a backslash.

A file that cannot give text raises :class:`Skipped` with the reason (encrypted, corrupt, empty,
image-only, a zip that would expand past :data:`MAX_UNPACKED`, a document past one of the limits
below, named by :func:`over`); nothing here raises anything else but MemoryError.
``cairn_servers.ctx.reader.Reader`` reads the binary formats in a worker process under memory, CPU,
time and output limits, so a native parser (PDFium, calamine) that crashes, balloons or never returns
costs that one file, not the sync. Office XML is read as a stream within byte and element budgets
(:func:`_chunks`), XLSX sheets are measured before calamine (:func:`_xlsx_extent`), and PDFs are
checked by ``cairn_servers.ctx.pdfscan`` before PDFium opens them.
Extraction stops (keeping what it has, with a warning) after :data:`MAX_TEXT` characters or
:data:`MAX_SECONDS` seconds. The parsing libraries are imported inside the functions that use them,
so importing this module costs only the standard library.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

MAX_TEXT = 16_000_000  # characters of text kept from one document
MAX_SECONDS = 60.0  # extraction time for one document, checked between pages, slides, sheets and rows
KILL_AFTER = 30.0  # a worker still busy MAX_SECONDS + KILL_AFTER after it started is killed
MAX_UNPACKED = 512 << 20  # bytes a DOCX/PPTX/XLSX zip may expand to (a zip bomb is refused, not read)
ROW_GROUP = 20  # XLSX rows per paragraph (each paragraph starts with the header row)

# File name suffix -> format. Everything else is read as text (Markdown or plain).
FORMATS = {
    ".pdf": "pdf",
    ".docx": "docx", ".docm": "docx",
    ".pptx": "pptx", ".pptm": "pptx",
    ".xlsx": "xlsx", ".xlsm": "xlsx",
    ".html": "html", ".htm": "html", ".xhtml": "html",
}
BINARY_FORMATS = ("pdf", "docx", "pptx", "xlsx")  # capped by max_document_bytes, not max_file_bytes
_OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # a compound file: a password-protected OOXML file (or .doc/.xls)


class Skipped(Exception):
    """The document gives no text; ``reason`` says why, for the sync report."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Extracted:
    body: str
    title: str | None = None
    sections: int = 0  # headings at this level or above always start a chunk (0: Markdown rules)
    metadata: dict[str, Any] = field(default_factory=dict)
    warning: str | None = None  # kept, but incomplete (time or text cap)


def format_of(name: str) -> str | None:
    """The document format for a file name, or None for text (Markdown, plain text, code)."""
    dot = name.rfind(".")
    return FORMATS.get(name[dot:].lower()) if dot >= 0 else None


def normalize_format(value: str) -> str | None:
    """A Lua connector's ``format``: ``pdf``, ``.pdf``, ``application/pdf``, ``text/html``... -> format name.

    ``markdown``/``text`` (and ``text/plain``, ``text/markdown``) are None: the body is used as is.
    Raises ValueError for anything else.
    """
    v = value.strip().lower()
    mime = {
        "application/pdf": "pdf", "text/html": "html", "application/xhtml+xml": "html",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
        "application/vnd.openxmlformats-officedocument.presentationml.presentation": "pptx",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    }
    if v in ("", "markdown", "md", "text", "txt", "plain", "text/plain", "text/markdown"):
        return None
    if v in mime:
        return mime[v]
    found = FORMATS.get(v if v.startswith(".") else "." + v)
    if found is None:
        raise ValueError(value)
    return found


# ---- limits ----------------------------------------------------------------------------------
# Each limit below can be set with the environment variable CTX_EXTRACT_<NAME> (a positive integer),
# read when a sync starts its reader. A document past one is skipped with a warning naming the limit.
MEMORY_MB = 256  # the reader process's address space (RLIMIT_AS): the backstop for every parser
CPU_SECONDS = 60  # CPU time the reader may spend on one document (RLIMIT_CPU)
OUTPUT_MB = 64  # the reader's answer for one document (its text, as JSON)
XML_MB = 256  # decompressed XML read from one Office file, all parts together
XML_ELEMENTS = 5_000_000  # XML elements in one Office file, all parts together
XML_TREE = 500_000  # XML elements held at once: one part (a slide, styles), one DOCX paragraph or table
XLSX_CELLS = 4_000_000  # cells one sheet spans (its declared dimension, and the cells it really holds)
PDF_PAGES = 10_000
PDF_OPERATORS = 1_000_000  # content operators on one PDF page, form XObjects expanded
PDF_STREAM_MB = 64  # one PDF stream (content, form, font, object stream) once decompressed
PDF_FORM_DEPTH = 12  # form XObjects drawn inside form XObjects

LIMITS = ("MEMORY_MB", "CPU_SECONDS", "OUTPUT_MB", "XML_MB", "XML_ELEMENTS", "XML_TREE", "XLSX_CELLS", "PDF_PAGES",
          "PDF_OPERATORS", "PDF_STREAM_MB", "PDF_FORM_DEPTH")
_LIMIT_TEXT = {"MEMORY_MB": "{:,} MiB of memory", "CPU_SECONDS": "{:,} s of CPU time", "OUTPUT_MB": "{:,} MiB of text",
               "XML_MB": "{:,} MiB of decompressed XML", "XML_ELEMENTS": "{:,} XML elements",
               "XML_TREE": "{:,} XML elements in one part, paragraph or table", "XLSX_CELLS": "{:,} cells in a sheet",
               "PDF_PAGES": "{:,} pages", "PDF_OPERATORS": "{:,} operators on a page",
               "PDF_STREAM_MB": "{:,} MiB in one decompressed stream", "PDF_FORM_DEPTH": "{:,} levels of nested forms"}


def limit_text(key: str, value: int | None = None) -> str:
    """``over the limit of 256 MiB of memory (CTX_EXTRACT_MEMORY_MB)``: how a warning names a limit."""
    amount = _LIMIT_TEXT[key].format(globals()[key] if value is None else value)
    return f"over the limit of {amount} (CTX_EXTRACT_{key})"


def limits() -> dict[str, Any]:
    """Every limit the reader applies: the module's values (and the time and text caps), each
    overridden by ``CTX_EXTRACT_<NAME>``. Raises InvalidInput for a value that is not a positive integer."""
    import os

    out: dict[str, Any] = {k: globals()[k] for k in (*LIMITS, "MAX_TEXT", "MAX_SECONDS", "KILL_AFTER", "MAX_UNPACKED")}
    for key in LIMITS:
        raw = os.environ.get(f"CTX_EXTRACT_{key}")
        if raw is None or raw == "":
            continue
        if not raw.strip().isdigit() or int(raw) < 1:
            from cairn_servers.core.errors import InvalidInput

            raise InvalidInput(f"CTX_EXTRACT_{key} must be a positive integer, not {raw!r}.")
        out[key] = int(raw)
    return out


def apply_limits(values: dict[str, Any]) -> None:
    """Make ``values`` (from :func:`limits`) this process's limits: the reader worker calls it per document."""
    for key, value in values.items():
        if key in globals() and key.isupper():
            globals()[key] = value


def over(key: str, found: str = "") -> Skipped:
    """The :class:`Skipped` for a document past limit ``key``; ``found`` says what was past it."""
    return Skipped((f"{found}: " if found else "") + limit_text(key))


def extract(data: bytes, name: str, fmt: str) -> Extracted:
    """The text of ``data`` (a ``fmt`` file called ``name``); :class:`Skipped` when there is none."""
    if not data or data.isspace():
        raise Skipped("empty file")
    if data.startswith(b"version https://git-lfs"):
        raise Skipped("a Git LFS pointer: the file itself is not in the checkout (git lfs pull)")
    deadline = time.monotonic() + MAX_SECONDS
    try:
        if fmt == "pdf":
            out = _pdf(data, deadline)
        elif fmt == "html":
            out = _html(data)
        else:
            if data.startswith(_OLE):
                raise Skipped(f"encrypted (a password-protected {fmt.upper()}) or an old binary Office file")
            _check_zip(data, fmt)
            out = {"docx": _docx, "pptx": _pptx, "xlsx": _xlsx}[fmt](data, deadline)
    except (Skipped, MemoryError):  # MemoryError: the reader worker names its memory limit
        raise
    except Exception as exc:  # a parser's own error on a damaged file: skip the file, never the sync
        detail = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise Skipped(f"corrupt or not a {fmt.upper()} file ({detail})") from None
    if not out.body.strip():
        raise Skipped("no text" + (" (image-only or scanned PDF; ctx does no OCR)" if fmt == "pdf" else ""))
    if len(out.body) > MAX_TEXT:
        out.body = out.body[:MAX_TEXT]
        out.warning = out.warning or f"text cut at {MAX_TEXT:,} characters"
    out.metadata["format"] = fmt
    return out


# ---- helpers ---------------------------------------------------------------------------------

_MD_LIKE = re.compile(r"^( {0,3})(#{1,6}(?=\s|$)|`{3}|~{3})")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffe\uffff]")


def _line(text: str) -> str:
    """One extracted line as literal text: a leading ``#`` or fence is escaped, controls dropped."""
    text = _CONTROL.sub("", text)
    return _MD_LIKE.sub(lambda m: m.group(1) + "\\" + m.group(2), text)


def _lines(text: str) -> str:
    return "\n".join(_line(x).rstrip() for x in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"))


def _heading(level: int, text: str) -> str:
    return "#" * max(1, min(level, 6)) + " " + " ".join(_CONTROL.sub("", text).split())


class _Clock:
    def __init__(self, deadline: float, unit: str, total: int | None = None) -> None:
        self.deadline, self.unit, self.total = deadline, unit, total
        self.warning: str | None = None
        self.chars = 0

    def stop(self, done: int, added: int = 0) -> bool:
        """True (with a warning) when time or the text cap is up, after ``done`` units."""
        self.chars += added
        if self.chars > MAX_TEXT:
            self.warning = f"text cut at {MAX_TEXT:,} characters ({self.unit} {done})"
            return True
        if time.monotonic() > self.deadline:
            of = f" of {self.total}" if self.total else ""
            self.warning = f"extraction stopped after {MAX_SECONDS:.0f} s at {self.unit} {done}{of}"
            return True
        return False


def _check_zip(data: bytes, fmt: str) -> None:
    import io
    import zipfile

    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise Skipped(f"corrupt or not a {fmt.upper()} file (not a zip archive)") from None
    unpacked = sum(i.file_size for i in zf.infolist())
    if unpacked > MAX_UNPACKED:
        raise Skipped(f"expands to {unpacked / (1 << 20):,.0f} MiB (over {MAX_UNPACKED >> 20} MiB; a zip bomb?)")


class _Budget:
    """What one Office file's XML parts have cost so far: decompressed bytes and elements (XML_MB, XML_ELEMENTS)."""

    def __init__(self) -> None:
        self.bytes = 0
        self.elements = 0


def _chunks(zf: Any, name: str, budget: _Budget) -> Any:
    """The decompressed bytes of part ``name`` (None if absent), 1 MiB at a time, each counted against
    the budget before it is handed on. Elements are counted as ``<`` not followed by ``/``, ``?`` or
    ``!`` (C speed; comments and CDATA only make the count larger). A DTD is refused: the Open
    Packaging Conventions forbid one, and entities could expand past the count."""
    try:
        member = zf.open(name)
    except KeyError:
        return None

    def gen() -> Any:
        carry = tail = b""
        with member:
            while True:
                chunk = member.read(1 << 20)
                if not chunk:
                    break
                budget.bytes += len(chunk)
                if budget.bytes > XML_MB << 20:
                    raise over("XML_MB", f"{name} and the parts before it")
                text = carry + chunk
                carry = b"<" if text.endswith(b"<") else b""
                body = text[:-1] if carry else text
                budget.elements += body.count(b"<") - body.count(b"</") - body.count(b"<?") - body.count(b"<!")
                if budget.elements > XML_ELEMENTS:
                    raise over("XML_ELEMENTS", f"{name} and the parts before it")
                if b"<!DOCTYPE" in tail + chunk or b"<!ENTITY" in tail + chunk:
                    raise Skipped(f"{name} has a DTD (not allowed in an Office file)")
                tail = chunk[-16:]
                yield chunk

    return gen()


def _xml(zf: Any, name: str, budget: _Budget) -> Any:
    """Part ``name`` as an element tree (None if absent), read within the budget and XML_TREE."""
    import xml.etree.ElementTree as ET  # expat >= 2.4 refuses entity-expansion bombs; no external entities

    chunks = _chunks(zf, name, budget)
    if chunks is None:
        return None
    start = budget.elements
    parser = ET.XMLParser()
    for chunk in chunks:
        if budget.elements - start > XML_TREE:
            raise over("XML_TREE", name)
        parser.feed(chunk)
    if budget.elements - start > XML_TREE:
        raise over("XML_TREE", name)
    return parser.close()


def _count_only(zf: Any, name: str, budget: _Budget) -> bool:
    """Read part ``name`` through the budget without parsing it; False when there is no such part."""
    chunks = _chunks(zf, name, budget)
    if chunks is None:
        return False
    for _ in chunks:
        pass
    return True


# ---- PDF -------------------------------------------------------------------------------------


def _pdf(data: bytes, deadline: float) -> Extracted:
    import pypdfium2 as pdfium  # lazily: ~0.1-0.5 s to import

    if b"%PDF-" not in data[:1024]:  # readers accept the header anywhere in the first 1 KiB
        raise Skipped("corrupt or not a PDF file (no %PDF header)")
    from cairn_servers.ctx import pdfscan

    pdfscan.check(data)  # pages, streams, operators and forms within the limits, before PDFium sees them
    try:
        doc = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        if "password" in str(exc).lower():
            raise Skipped("encrypted (needs a password)") from None
        raise Skipped(f"corrupt or not a PDF file ({exc})") from None
    try:
        n = len(doc)
        if n == 0:
            raise Skipped("empty PDF (no pages)")
        if n > PDF_PAGES:
            raise over("PDF_PAGES", f"{n:,} pages")
        clock = _Clock(deadline, "page", n)
        parts: list[str] = []
        for i in range(n):
            page = doc[i]
            try:
                textpage = page.get_textpage()
                try:
                    text = textpage.get_text_range()
                finally:
                    textpage.close()
            finally:
                page.close()
            text = _lines(text).strip()
            if text:
                parts.append(f"{_heading(1, f'Page {i + 1}')}\n\n{text}")
            if clock.stop(i + 1, len(text)):
                break
        meta = doc.get_metadata_dict(skip_empty=True)
    finally:
        doc.close()
    title = " ".join(str(meta.get("Title", "")).split()) or None
    extra: dict[str, Any] = {"pages": n}
    if meta.get("Author"):
        extra["author"] = " ".join(str(meta["Author"]).split())
    return Extracted("\n\n".join(parts), title, sections=1, metadata=extra, warning=clock.warning)


# ---- DOCX ------------------------------------------------------------------------------------

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_MC_FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"
_DC_TITLE = "{http://purl.org/dc/elements/1.1/}title"
_HEADING_NAME = re.compile(r"^heading\s*([1-9])$")


def _core_title(zf: Any, budget: _Budget) -> str | None:
    core = _xml(zf, "docProps/core.xml", budget)
    node = core.find(_DC_TITLE) if core is not None else None
    return " ".join((node.text or "").split()) or None if node is not None else None


def _docx_styles(zf: Any, budget: _Budget) -> dict[str, int]:
    """styleId -> heading level (1-9; Title counts as 1) for heading styles, 0 for list styles."""
    root = _xml(zf, "word/styles.xml", budget)
    if root is None:
        return {}
    own: dict[str, int] = {}
    based: dict[str, str] = {}
    for style in root.iter(_W + "style"):
        sid = style.get(_W + "styleId") or ""
        name_el = style.find(_W + "name")
        name = (name_el.get(_W + "val") or "").lower() if name_el is not None else ""
        m = _HEADING_NAME.match(name)
        lvl_el = style.find(f"{_W}pPr/{_W}outlineLvl")
        if m:
            own[sid] = int(m.group(1))
        elif name == "title":
            own[sid] = 1
        elif lvl_el is not None and (lvl_el.get(_W + "val") or "").isdigit() and int(lvl_el.get(_W + "val") or 9) < 9:
            own[sid] = int(lvl_el.get(_W + "val") or 0) + 1
        elif style.find(f"{_W}pPr/{_W}numPr") is not None:
            own[sid] = 0  # a list style ("List Bullet")
        parent = style.find(_W + "basedOn")
        if parent is not None:
            based[sid] = parent.get(_W + "val") or ""
    levels = dict(own)
    for sid in based:  # a style based on a heading style is a heading of that level
        cur, hops = sid, 0
        while cur not in own and cur in based and hops < 10:
            cur, hops = based[cur], hops + 1
        if cur in own:
            levels[sid] = own[cur]
    return levels


_BUILTIN_STYLES = {"Title": 1, "Normal": -1, "ListParagraph": -1, "ListBullet": 0, "ListNumber": 0,
                   **{f"Heading{n}": n for n in range(1, 10)}, **{f"ListBullet{n}": 0 for n in range(2, 6)},
                   **{f"ListNumber{n}": 0 for n in range(2, 6)}}


def _run_text(p: Any) -> str:
    out: list[str] = []

    def walk(el: Any) -> None:
        for child in el:
            tag = child.tag
            if tag == _MC_FALLBACK:  # the old-format copy of a text box: already read in mc:Choice
                continue
            if tag == _W + "t":
                out.append(child.text or "")
            elif tag == _W + "tab":
                out.append("\t")
            elif tag in (_W + "br", _W + "cr"):
                out.append("\n")
            elif tag == _W + "p":  # a paragraph nested in a text box
                out.append("\n")
                walk(child)
            else:
                walk(child)

    walk(p)
    return "".join(out)


class _OtherStyles(Exception):
    """The document uses a style id that is not one of Word's own: read it again with styles.xml."""


def _docx(data: bytes, deadline: float) -> Extracted:
    import io
    import zipfile

    zf = zipfile.ZipFile(io.BytesIO(data))
    budget = _Budget()
    if not _count_only(zf, "word/document.xml", budget):  # refuses a bomb at C speed, before any parsing
        raise Skipped("corrupt or not a DOCX file (no word/document.xml)")
    # Up to XML_TREE elements the document is parsed whole (faster); past that, as a stream.
    blocks = _docx_tree if budget.elements <= XML_TREE else _docx_stream
    try:
        # Word's own style ids need no styles.xml (often hundreds of KB); any other id (a localised
        # "berschrift1", a custom style based on a heading) is looked up there, for the whole document.
        return _docx_body(zf, _BUILTIN_STYLES, budget, deadline, blocks)
    except _OtherStyles:
        return _docx_body(zf, _docx_styles(zf, budget), budget, deadline, blocks)


def _docx_tree(zf: Any, builtin: bool) -> Any:
    """The children of ``<w:body>``, from word/document.xml parsed whole (it has at most XML_TREE elements)."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(b"".join(_chunks(zf, "word/document.xml", _Budget())))
    if builtin and any((el.get(_W + "val") or "") not in _BUILTIN_STYLES for el in root.iter(_W + "pStyle")):
        raise _OtherStyles
    body = root.find(_W + "body")
    if body is not None:
        yield from body


def _docx_stream(zf: Any, builtin: bool) -> Any:
    """The children of ``<w:body>``, from word/document.xml read as a stream: each is handed on when it
    ends, then freed, so memory holds one paragraph or table at a time (at most XML_TREE elements)."""
    import xml.etree.ElementTree as ET

    chunks = _chunks(zf, "word/document.xml", _Budget())  # counted once already, by _count_only
    parser: Any = ET.XMLPullParser(events=("start", "end"))
    depth = 0
    held = 0  # elements of the body child being read
    body: Any = None  # <w:body> while inside it
    pstyle = _W + "pStyle"
    for chunk in chunks:
        parser.feed(chunk)
        for event, el in parser.read_events():
            if event == "start":
                depth += 1
                if depth == 2:
                    body = el if el.tag == _W + "body" else None
                elif depth > 2:
                    held += 1
                    if held > XML_TREE:
                        raise over("XML_TREE", "a paragraph or table in word/document.xml")
                    if builtin and el.tag == pstyle and (el.get(_W + "val") or "") not in _BUILTIN_STYLES:
                        raise _OtherStyles
                continue
            if depth == 3 and body is not None:
                yield el
                body.clear()  # done with it: free the paragraph or table
                held = 0
            elif depth == 2:
                body = None
            depth -= 1
    parser.close()


def _docx_body(zf: Any, levels: dict[str, int], budget: _Budget, deadline: float, blocks: Any) -> Extracted:
    """The text of word/document.xml's body, block by block (``blocks``: :func:`_docx_tree` or :func:`_docx_stream`)."""
    builtin = levels is _BUILTIN_STYLES
    clock = _Clock(deadline, "paragraph")
    parts: list[str] = []
    first_heading: str | None = None
    count = 0

    def paragraph(p: Any) -> None:
        nonlocal first_heading
        text = _run_text(p).strip()
        if not text:
            return
        ppr = p.find(_W + "pPr")
        level = 0
        listed = False
        if ppr is not None:
            style = ppr.find(_W + "pStyle")
            if style is not None:
                level = levels.get(style.get(_W + "val") or "", -1)
                listed = level == 0
                level = max(level, 0)
            outline = ppr.find(_W + "outlineLvl")
            if outline is not None and (outline.get(_W + "val") or "").isdigit() and int(outline.get(_W + "val") or 9) < 9:
                level = int(outline.get(_W + "val") or 0) + 1
        if level:
            parts.append(_heading(level, text))
            if first_heading is None:
                first_heading = " ".join(text.split())
        elif listed or (ppr is not None and ppr.find(_W + "numPr") is not None):
            parts.append("- " + _lines(text))
        else:
            parts.append(_lines(text))

    def table(tbl: Any) -> None:
        rows = []
        for tr in tbl.iter(_W + "tr"):
            cells = [" ".join(_run_text(tc).split()) for tc in tr.findall(_W + "tc")]
            if any(cells):
                rows.append(_line(" | ".join(cells)))
        if rows:
            parts.append("\n".join(rows))

    def block(el: Any) -> bool:
        """One child of the body (or of a content control in it); False when time or text is up."""
        nonlocal count
        if el.tag == _W + "p":
            paragraph(el)
        elif el.tag == _W + "tbl":
            table(el)
        elif el.tag in (_W + "sdt", _W + "sdtContent", _W + "customXml"):
            for child in el:
                if not block(child):
                    return False
        count += 1
        return not (count % 200 == 0 and clock.stop(count, sum(len(x) for x in parts[-200:])))

    for el in blocks(zf, builtin):
        if not block(el):
            break
    return Extracted("\n\n".join(parts), _core_title(zf, budget) or first_heading, warning=clock.warning)


# ---- PPTX ------------------------------------------------------------------------------------

_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
_P = "{http://schemas.openxmlformats.org/presentationml/2006/main}"
_R_ID = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"
_REL = "{http://schemas.openxmlformats.org/package/2006/relationships}Relationship"


def _rels(zf: Any, part: str, budget: _Budget) -> dict[str, tuple[str, str]]:
    """rId -> (type suffix, absolute part name) for ``part``'s relationships."""
    import posixpath

    folder, base = posixpath.split(part)
    root = _xml(zf, f"{folder}/_rels/{base}.rels", budget)
    out: dict[str, tuple[str, str]] = {}
    if root is None:
        return out
    for rel in root.iter(_REL):
        target = rel.get("Target") or ""
        if rel.get("TargetMode") == "External":
            continue
        path = target.lstrip("/") if target.startswith("/") else posixpath.normpath(posixpath.join(folder, target))
        out[rel.get("Id") or ""] = ((rel.get("Type") or "").rsplit("/", 1)[-1], path)
    return out


def _shape_texts(tree: Any, skip_types: tuple[str, ...]) -> tuple[str | None, list[str]]:
    """(title, other texts) of a slide's shape tree, in document order."""
    title: str | None = None
    texts: list[str] = []
    for el in tree.iter():
        if el.tag == _P + "sp":
            ph = el.find(f"{_P}nvSpPr/{_P}nvPr/{_P}ph")
            kind = ph.get("type", "body") if ph is not None else ""
            body = el.find(_P + "txBody")
            if body is None or kind in skip_types:
                continue
            paras = ["".join(("\n" if r.tag == _A + "br" else (r.text or "")) for r in p.iter()
                             if r.tag in (_A + "t", _A + "br")) for p in body.iter(_A + "p")]
            text = "\n".join(x for x in paras if x.strip())
            if not text.strip():
                continue
            if kind in ("title", "ctrTitle") and title is None:
                title = " ".join(text.split())
            else:
                texts.append(_lines(text))
        elif el.tag == _A + "tbl":
            rows = []
            for tr in el.iter(_A + "tr"):
                cells = [" ".join("".join(t.text or "" for t in tc.iter(_A + "t")).split()) for tc in tr.findall(_A + "tc")]
                if any(cells):
                    rows.append(_line(" | ".join(cells)))
            if rows:
                texts.append("\n".join(rows))
    return title, texts


def _pptx(data: bytes, deadline: float) -> Extracted:
    import io
    import zipfile

    zf = zipfile.ZipFile(io.BytesIO(data))
    budget = _Budget()
    pres = _xml(zf, "ppt/presentation.xml", budget)
    if pres is None:
        raise Skipped("corrupt or not a PPTX file (no ppt/presentation.xml)")
    rels = _rels(zf, "ppt/presentation.xml", budget)
    slides = [rels[s.get(_R_ID) or ""][1] for s in pres.iter(_P + "sldId") if (s.get(_R_ID) or "") in rels]
    clock = _Clock(deadline, "slide", len(slides))
    parts: list[str] = []
    deck_title: str | None = None
    for number, part in enumerate(slides, 1):
        root = _xml(zf, part, budget)
        if root is None:
            continue
        title, texts = _shape_texts(root, ("sldNum", "dt", "ftr", "hdr"))
        for kind, target in _rels(zf, part, budget).values():
            if kind == "notesSlide":
                notes = _xml(zf, target, budget)
                if notes is not None:
                    _, note_texts = _shape_texts(notes, ("sldImg", "sldNum", "dt", "ftr", "hdr", "title"))
                    if note_texts:
                        texts.append("Notes: " + "\n".join(note_texts))
        if deck_title is None and title:
            deck_title = title
        heading = _heading(1, f"Slide {number}: {title}" if title else f"Slide {number}")
        if title or texts:
            parts.append("\n\n".join([heading, *texts]))
        if clock.stop(number, sum(map(len, texts))):
            break
    return Extracted("\n\n".join(parts), _core_title(zf, budget) or deck_title, sections=1,
                     metadata={"slides": len(slides)}, warning=clock.warning)


# ---- XLSX ------------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if hasattr(value, "isoformat"):
        return str(value.isoformat())
    return " ".join(str(value).split())


_NS_PREFIX = rb"<(?:[A-Za-z_][\w.-]*:)?"
_ANY_REF = re.compile(rb' r="([A-Z]{1,3})([0-9]{1,7})"')  # a cell's reference (a row's has no letters)
# The reference of a cell with a value: a <c ...> start tag that is not self-closing (<c .../> is empty).
_VALUE_REF = re.compile(_NS_PREFIX + rb'c\s[^>]*?\br="([A-Z]{1,3})([0-9]{1,7})"[^>]*?(?<!/)>')
_PREFIXED_ROW = re.compile(rb"<[A-Za-z_][\w.-]*:row[\s/>]")
_PREFIXED_CELL_END = re.compile(rb"</[A-Za-z_][\w.-]*:c>")


def _column(letters: bytes) -> int:
    n = 0
    for c in letters:
        n = n * 26 + c - 64
    return n


def _xlsx_extent(data: bytes) -> None:
    """Refuse a workbook whose sheets hold, or span, more than XLSX_CELLS cells, before calamine reads it.

    calamine fills the rectangle between a sheet's first and last cells that hold a value (two cells,
    A1 and AN1048576, are 42 million cells to it), so every worksheet part is read first, as a stream
    within the XML budget, counting its cells and the rectangle they span. The declared
    ``<dimension>`` is not trusted (nor used by calamine: measured, it allocates nothing for it).
    A first pass counts every cell reference (fast: a literal search); only a sheet that seems past
    the limit is read again counting just the cells with a value (calamine skips empty ``<c .../>``).
    """
    import io
    import zipfile

    zf = zipfile.ZipFile(io.BytesIO(data))
    budget = _Budget()
    for info in zf.infolist():
        name = info.filename
        if not (name.startswith("xl/") and name.endswith(".xml")) or "sharedStrings" in name or "styles" in name:
            continue
        cells, area = _extent(zf, name, budget, _ANY_REF)
        if area > XLSX_CELLS:
            cells, area = _extent(zf, name, _Budget(), _VALUE_REF)
            if area > XLSX_CELLS:
                raise over("XLSX_CELLS", f"{name} spans {area:,} cells ({cells:,} of them with a value)")


def _extent(zf: Any, name: str, budget: _Budget, refs_of: re.Pattern[bytes]) -> tuple[int, int]:
    """(cells with a value, cells of the rectangle spanned by the references ``refs_of`` finds) of a sheet."""
    cells = rows = 0
    top = left = 1 << 30
    bottom = right = 0
    carry = b""
    for chunk in _chunks(zf, name, budget) or ():
        text = carry + chunk
        cut = text.rfind(b"<")
        if cut >= 0 and text.find(b">", cut) < 0 and len(text) - cut < (1 << 20):
            text, carry = text[:cut], text[cut:]  # a tag split between chunks: read it whole next time
        else:
            carry = b""
        rows += text.count(b"<row") + (len(_PREFIXED_ROW.findall(text)) if b":row" in text else 0)
        found = text.count(b"</c>") + (len(_PREFIXED_CELL_END.findall(text)) if b":c>" in text else 0)
        cells += found
        if cells > XLSX_CELLS:
            raise over("XLSX_CELLS", f"{name} holds more than {XLSX_CELLS:,} cells")
        refs = refs_of.findall(text)
        if len(refs) < found:  # cells without a reference: each the one after the previous (a bound)
            right += found - len(refs)
            top, left = min(top, 1), min(left, 1)
        if refs:
            letters, numbers = zip(*refs)
            numbers_int = list(map(int, numbers))
            columns = [_column(c) for c in set(letters)]
            top, bottom = min(top, min(numbers_int)), max(bottom, max(numbers_int))
            left, right = min(left, min(columns)), max(right, max(columns))
    if not cells:
        return 0, 0
    bottom = max(bottom, rows)
    top, left = min(top, bottom), min(left, right)
    return cells, (bottom - top + 1) * (right - left + 1)


def _xlsx(data: bytes, deadline: float) -> Extracted:
    import io

    from python_calamine import CalamineWorkbook  # lazily (a Rust extension)

    _xlsx_extent(data)
    wb = CalamineWorkbook.from_filelike(io.BytesIO(data))
    names = list(wb.sheet_names)
    clock = _Clock(deadline, "row")
    parts: list[str] = []
    rows_seen = 0
    stopped = False
    for name in names:
        header: str | None = None
        section = [_heading(1, f"Sheet: {name}")]
        group: list[str] = []
        try:
            rows = wb.get_sheet_by_name(name).iter_rows()
        except Exception:  # a chart sheet or a sheet calamine cannot read: the others still count
            continue
        for row in rows:
            cells = [_cell(v) for v in row]
            while cells and not cells[-1]:
                cells.pop()
            if not cells:
                continue
            line = _line(" | ".join(cells))
            rows_seen += 1
            if header is None:
                header = line
                continue
            group.append(line)
            if len(group) >= ROW_GROUP:
                section.append("\n".join([header, *group]))
                group = []
            if rows_seen % 1000 == 0 and clock.stop(rows_seen, sum(map(len, section[-60:]))):
                stopped = True
                break
        if header is not None:
            section.append("\n".join([header, *group]))
            parts.append("\n\n".join(section))
        if stopped:
            break
    return Extracted("\n\n".join(parts), None, sections=1, metadata={"sheets": len(names)}, warning=clock.warning)


# ---- HTML ------------------------------------------------------------------------------------

_BLOCKS = frozenset(
    "address article aside blockquote body caption dd details dialog div dl dt fieldset figcaption figure footer form "
    "header hr main nav ol p section summary table ul".split()
)
_DROP = frozenset("script style noscript template svg math head iframe object canvas".split())


_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)


def _charset(data: bytes) -> str:
    """UTF-8 (also with a BOM) unless the page declares another charset in a ``<meta>`` near its top."""
    import codecs

    if data.startswith(b"\xef\xbb\xbf"):
        return "utf-8-sig"
    m = _CHARSET.search(data[:4096])
    if m:
        try:
            return codecs.lookup(m.group(1).decode("ascii")).name
        except LookupError:
            pass
    return "utf-8"


def _html(data: bytes) -> Extracted:
    from html.parser import HTMLParser

    text = data.decode(_charset(data), errors="replace")

    class Parser(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=True)
            self.blocks: list[str] = []
            self.buf: list[str] = []
            self.drop = 0
            self.pre = 0
            self.heading = 0
            self.title: list[str] = []
            self.in_title = False
            self.first_h1: str | None = None

        def flush(self) -> None:
            raw = "".join(self.buf)
            self.buf = []
            if self.heading:
                line = " ".join(raw.split())
                if line:
                    self.blocks.append(_heading(self.heading, line))
                    if self.heading == 1 and self.first_h1 is None:
                        self.first_h1 = line
                return
            lines = [" ".join(x.split()) for x in raw.split("\n")]
            para = "\n".join(_line(x) for x in lines if x)
            if para:
                self.blocks.append(para)

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag == "title":
                self.in_title = True
            if tag in _DROP:
                self.drop += 1
                return
            if self.drop:
                return
            if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
                self.flush()
                self.heading = int(tag[1])
            elif tag == "pre":
                self.flush()
                self.pre += 1
            elif tag in _BLOCKS:
                if not self.pre:
                    self.flush()
            elif tag == "li":
                self.buf.append("\n- ")
            elif tag in ("br", "tr"):
                self.buf.append("\n")
            elif tag in ("td", "th") and "".join(self.buf[-8:]).rsplit("\n", 1)[-1].strip():
                self.buf.append(" | ")

        def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag == "br" and not self.drop:
                self.buf.append("\n")

        def handle_endtag(self, tag: str) -> None:
            if tag == "title":
                self.in_title = False
            if tag in _DROP:
                self.drop = max(0, self.drop - 1)
                return
            if self.drop:
                return
            if tag in ("h1", "h2", "h3", "h4", "h5", "h6") and self.heading:
                self.flush()
                self.heading = 0
            elif tag == "pre" and self.pre:
                self.pre -= 1
                code = "".join(self.buf).strip("\n").replace("```", "'''")
                self.buf = []
                if code.strip():
                    self.blocks.append(f"```\n{_CONTROL.sub('', code)}\n```")
            elif tag in _BLOCKS and not self.pre:
                self.flush()

        def handle_data(self, data: str) -> None:
            if self.in_title:
                self.title.append(data)
            if self.drop:
                return
            self.buf.append(data if self.pre or self.heading else data.replace("\n", " "))

    parser = Parser()
    parser.feed(text)
    parser.close()
    parser.heading = 0
    parser.flush()
    title = " ".join("".join(parser.title).split()) or parser.first_h1
    return Extracted("\n\n".join(parser.blocks), title)
