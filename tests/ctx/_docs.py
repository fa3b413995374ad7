"""Document fixtures written on the spot: a small hand-built PDF writer, and DOCX/PPTX/XLSX through the
libraries that write those formats (python-docx, python-pptx, XlsxWriter). Used by tests/ctx/test_extract.py
and benchmarks/ctx.py."""

from __future__ import annotations

import io
from pathlib import Path


def _pdf_string(text: str) -> str:
    return "(" + text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ")"


def pdf_bytes(pages: list[list[str]], *, title: str | None = None, image_only: bool = False) -> bytes:
    """A valid PDF: one page per entry, each line drawn with Helvetica as a text object (``Tj``).

    ``image_only`` draws a filled rectangle and no text on every page (what a scan looks like to a
    text extractor). The cross-reference table holds the real byte offsets.
    """
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    catalog = add(b"")  # filled in below
    pages_obj = add(b"")
    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    kids = []
    for lines in pages:
        if image_only:
            ops = "0.5 g 72 72 400 600 re f"
        else:
            ops = "BT /F1 11 Tf 14 TL 72 760 Td " + " ".join(f"{_pdf_string(x)} Tj T*" for x in lines) + " ET"
        stream = ops.encode("latin-1")
        content = add(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
        kids.append(add(
            b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 %d 0 R >> >>"
            b" /Contents %d 0 R >>" % (pages_obj, font, content)))
    objects[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R >>" % pages_obj
    objects[pages_obj - 1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        " ".join(f"{k} 0 R" for k in kids).encode(), len(kids))
    info = add(b"<< /Title " + _pdf_string(title).encode("latin-1") + b" >>") if title else None
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for n, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % n + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for off in offsets:
        out.write(b"%010d 00000 n \n" % off)
    trailer = b"<< /Size %d /Root %d 0 R" % (len(objects) + 1, catalog)
    if info:
        trailer += b" /Info %d 0 R" % info
    out.write(b"trailer\n" + trailer + b" >>\nstartxref\n%d\n%%%%EOF\n" % xref)
    return out.getvalue()


def encrypted_pdf(plain: bytes, password: str = "s3cret") -> bytes:
    """``plain`` encrypted with a user password (pypdf, AES-128); ``""``: anyone may open it (owner password only)."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(plain)))
    writer.encrypt(user_password=password, owner_password=password + "owner", algorithm="AES-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def write_docx(path: Path, blocks: list[tuple[str, str]], *, title: str | None = None) -> None:
    """``blocks``: ("h1".."h3", text), ("p", text), ("li", text) or ("table", "a|b;c|d")."""
    import docx

    doc = docx.Document()
    if title:
        doc.core_properties.title = title
    for kind, text in blocks:
        if kind.startswith("h"):
            doc.add_heading(text, level=int(kind[1:]))
        elif kind == "li":
            doc.add_paragraph(text, style="List Bullet")
        elif kind == "table":
            rows = [r.split("|") for r in text.split(";")]
            table = doc.add_table(rows=len(rows), cols=len(rows[0]))
            for r, row in enumerate(rows):
                for c, cell in enumerate(row):
                    table.cell(r, c).text = cell
        else:
            doc.add_paragraph(text)
    doc.save(str(path))


def write_pptx(path: Path, slides: list[tuple[str, str, str]]) -> None:
    """``slides``: (title, body text, speaker notes) each."""
    from pptx import Presentation

    deck = Presentation()
    for title, body, notes in slides:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
        if notes:
            slide.notes_slide.notes_text_frame.text = notes
    deck.save(str(path))


def write_xlsx(path: Path, sheets: dict[str, list[list[object]]]) -> None:
    """``sheets``: name -> rows (the first row is the header)."""
    import xlsxwriter

    book = xlsxwriter.Workbook(str(path))
    for name, rows in sheets.items():
        sheet = book.add_worksheet(name)
        for r, row in enumerate(rows):
            for c, value in enumerate(row):
                sheet.write(r, c, value)
    book.close()
