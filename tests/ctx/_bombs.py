"""Hostile documents, written on the spot: small files that expand to gigabytes or loop in a reader.

Each generator writes one file (at most about 1 MB on disk) and returns its path. The sizes are
parameters so that ``make test`` can run a smaller version of each and ``make stress`` the full one.
Used by tests/ctx/test_extract_limits.py.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from pathlib import Path

W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
S_NS = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
R_NS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
MIB = 1 << 20

_CONTENT_TYPES = (
    '<?xml version="1.0" encoding="UTF-8"?>'
    '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    '<Default Extension="xml" ContentType="application/xml"/>{}</Types>'
)


def _stream_member(z: zipfile.ZipFile, name: str, head: bytes, unit: bytes, size: int, tail: bytes) -> None:
    """Write ``head`` + ``unit`` repeated to ``size`` bytes + ``tail`` as a member, 1 MiB at a time."""
    block = unit * (MIB // len(unit))
    info = zipfile.ZipInfo(name)
    info.compress_type = zipfile.ZIP_DEFLATED
    with z.open(info, "w", force_zip64=size > (1 << 31)) as out:
        out.write(head)
        left = size
        while left > 0:
            piece = block[: min(left, len(block)) // len(unit) * len(unit)] or unit
            out.write(piece)
            left -= len(piece)
        out.write(tail)


def _zip() -> tuple[io.BytesIO, zipfile.ZipFile]:
    buf = io.BytesIO()
    return buf, zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9)


def empty_paragraphs_docx(path: Path, size: int) -> Path:
    """A DOCX whose word/document.xml is ``size`` bytes of ``<w:p/>`` (empty paragraphs: no text at all)."""
    buf, z = _zip()
    with z:
        z.writestr("[Content_Types].xml", _CONTENT_TYPES.format(
            '<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.'
            'wordprocessingml.document.main+xml"/>'))
        z.writestr("_rels/.rels", '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.'
                   'openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.'
                   f'openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/>'
                   '</Relationships>')
        _stream_member(z, "word/document.xml", f'<w:document xmlns:w="{W_NS}"><w:body>'.encode(), b"<w:p/>", size,
                       b"<w:p><w:r><w:t>last words</w:t></w:r></w:p></w:body></w:document>")
    path.write_bytes(buf.getvalue())
    return path


def _xlsx(path: Path, sheet_xml: bytes) -> Path:
    buf, z = _zip()
    with z:
        z.writestr("[Content_Types].xml", _CONTENT_TYPES.format(
            '<Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.'
            'spreadsheetml.sheet.main+xml"/><Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/'
            'vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>'))
        z.writestr("_rels/.rels", '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.'
                   'openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.'
                   'openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="xl/workbook.xml"/>'
                   '</Relationships>')
        z.writestr("xl/workbook.xml", f'<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="{S_NS}" '
                   f'xmlns:r="{R_NS}"><sheets><sheet name="Sheet1" sheetId="1" r:id="rId1"/></sheets></workbook>')
        z.writestr("xl/_rels/workbook.xml.rels", '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http:'
                   '//schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://'
                   'schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" '
                   'Target="worksheets/sheet1.xml"/></Relationships>')
        z.writestr("xl/worksheets/sheet1.xml", sheet_xml)
    path.write_bytes(buf.getvalue())
    return path


def far_cell_xlsx(path: Path, far: str = "AN1048576") -> Path:
    """An XLSX with two cells, A1 and ``far``: a reader that fills the rectangle between them allocates
    every cell of it (40 x 1,048,576 for AN1048576)."""
    return _xlsx(path, (f'<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="{S_NS}"><sheetData>'
                        '<row r="1"><c r="A1" t="inlineStr"><is><t>top left</t></is></c></row>'
                        f'<row r="{far.lstrip("ABCDEFGHIJKLMNOPQRSTUVWXYZ")}"><c r="{far}"><v>7</v></c></row>'
                        '</sheetData></worksheet>').encode())


def declared_dimension_xlsx(path: Path, dimension: str = "A1:GR1048576") -> Path:
    """An XLSX whose sheet declares ``dimension`` (200 x 1,048,576 cells for GR1048576) and holds one cell."""
    return _xlsx(path, (f'<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="{S_NS}">'
                        f'<dimension ref="{dimension}"/>'
                        '<sheetData><row r="1"><c r="A1" t="inlineStr"><is><t>declared far</t></is></c></row>'
                        '</sheetData></worksheet>').encode())


def _pdf(objects: list[bytes], root: int = 1) -> bytes:
    out = io.BytesIO()
    out.write(b"%PDF-1.5\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for n, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % n + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for off in offsets:
        out.write(b"%010d 00000 n \n" % off)
    out.write(b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, root, xref))
    return out.getvalue()


def _deflated(head: bytes, unit: bytes, size: int, tail: bytes) -> bytes:
    comp = zlib.compressobj(9)
    parts = [comp.compress(head)]
    block = unit * (MIB // len(unit))
    left = size
    while left > 0:
        piece = block[: min(left, len(block)) // len(unit) * len(unit)] or unit
        parts.append(comp.compress(piece))
        left -= len(piece)
    parts.append(comp.compress(tail))
    parts.append(comp.flush())
    return b"".join(parts)


def _one_page(content: bytes, extra: bytes = b"", resources: bytes = b"") -> list[bytes]:
    return [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 5 0 R >> " + resources
        + b">> /Contents 4 0 R >>",
        b"<< /Length %d /Filter /FlateDecode %s>>\nstream\n" % (len(content), extra) + content + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    ]


def huge_content_pdf(path: Path, size: int) -> Path:
    """A one-page PDF whose Flate content stream inflates to ``size`` bytes (spaces around a line of text)."""
    content = _deflated(b"BT /F1 11 Tf 72 720 Td (inflated page) Tj ET\n", b" " * 64, size, b"\n")
    path.write_bytes(_pdf(_one_page(content)))
    return path


def many_operators_pdf(path: Path, count: int) -> Path:
    """A one-page PDF whose content stream shows a character ``count`` times (one ``Tj`` operator each)."""
    content = _deflated(b"BT /F1 1 Tf 10 10 Td\n", b"(x)Tj\n", count * 6, b"ET\n")
    path.write_bytes(_pdf(_one_page(content)))
    return path


def recursive_forms_pdf(path: Path, fan_out: int = 4) -> Path:
    """A one-page PDF whose page draws form A, and forms A and B each draw the other ``fan_out`` times:
    a reader that expands forms without spotting the cycle does fan_out ** depth work."""
    def draws(other: bytes) -> bytes:
        return b" ".join([b"q /%s Do Q" % other] * fan_out) + b" BT /F1 9 Tf (loop) Tj ET"

    def form(other: bytes, me: int) -> bytes:
        body = draws(other)
        return (b"<< /Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources << /Font << /F1 5 0 R >> "
                b"/XObject << /%s %d 0 R >> >> /Length %d >>\nstream\n" % (other, 7 if me == 6 else 6, len(body))
                + body + b"\nendstream")

    objects = _one_page(b"", resources=b"/XObject << /FA 6 0 R >> ")
    page_content = b"BT /F1 11 Tf 72 720 Td (cover text) Tj ET q /FA Do Q"
    objects[3] = b"<< /Length %d >>\nstream\n" % len(page_content) + page_content + b"\nendstream"
    objects += [form(b"FB", 6), form(b"FA", 7)]
    path.write_bytes(_pdf(objects))
    return path


def busy_pdf(path: Path, count: int, pages: int = 1) -> Path:
    """A PDF of ``pages`` pages that share one content stream saving and restoring the graphics state
    ``count`` times (``q Q``): CPU time for a reader, page after page, and little memory."""
    content = _deflated(b"BT /F1 11 Tf 72 720 Td (busy page) Tj ET\n", b"q Q\n", count * 4, b"\n")
    objects = _one_page(content)
    kids = [3] + list(range(6, 6 + pages - 1))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % k for k in kids), pages)
    objects += [objects[2]] * (pages - 1)
    path.write_bytes(_pdf(objects))
    return path


def _pdf_packed(top: dict[int, bytes], packed: dict[int, bytes]) -> bytes:
    """A PDF 1.5 file: the ``packed`` objects (dictionaries) inside one Flate object stream, the ``top``
    ones (streams) in the body, and a cross-reference stream (what most PDF writers make today)."""
    objstm, xref_num = max([*top, *packed]) + 1, max([*top, *packed]) + 2
    bodies, header, offset = [], [], 0
    for num, body in packed.items():
        header.append(b"%d %d" % (num, offset))
        bodies.append(body + b"\n")
        offset += len(body) + 1
    head = b" ".join(header) + b"\n"
    raw = head + b"".join(bodies)
    data = zlib.compress(raw)
    out = io.BytesIO()
    out.write(b"%PDF-1.5\n%\xe2\xe3\xcf\xd3\n")
    where: dict[int, int] = {}
    for num, body in [*top.items(), (objstm, b"<< /Type /ObjStm /N %d /First %d /Filter /FlateDecode /Length %d >>"
                                      b"\nstream\n" % (len(packed), len(head), len(data)) + data + b"\nendstream")]:
        where[num] = out.tell()
        out.write(b"%d 0 obj\n" % num + body + b"\nendobj\n")
    where[xref_num] = out.tell()
    rows = [b"\x00\x00\x00\x00\x00\xff\xff"]
    index = {num: i for i, num in enumerate(packed)}
    for num in range(1, xref_num + 1):
        if num in where:
            rows.append(b"\x01" + where[num].to_bytes(4, "big") + b"\x00\x00")
        elif num in index:
            rows.append(b"\x02" + objstm.to_bytes(4, "big") + index[num].to_bytes(2, "big"))
        else:
            rows.append(b"\x00\x00\x00\x00\x00\x00\x00")
    table = b"".join(rows)
    out.write(b"%d 0 obj\n<< /Type /XRef /Size %d /W [1 4 2] /Root 1 0 R /Length %d >>\nstream\n"
              % (xref_num, xref_num + 1, len(table)) + table + b"\nendstream\nendobj\n")
    out.write(b"startxref\n%d\n%%%%EOF\n" % where[xref_num])
    return out.getvalue()


def packed_forms_pdf(path: Path, loop: bool) -> Path:
    """Forms A and B as in :func:`recursive_forms_pdf` (B draws A back only when ``loop``), with the
    catalog, pages, font and the forms' resources inside an object stream."""
    page = b"BT /F1 11 Tf 72 720 Td (cover text) Tj ET q /FA Do Q"
    a = b"q /FB Do Q q /FB Do Q BT /F1 9 Tf 72 700 Td (form a) Tj ET"
    b = (b"q /FA Do Q " if loop else b"") + b"BT /F1 9 Tf 72 680 Td (form b) Tj ET"

    def form(body: bytes, res: int) -> bytes:
        return (b"<< /Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources %d 0 R /Length %d >>\nstream\n"
                % (res, len(body)) + body + b"\nendstream")

    path.write_bytes(_pdf_packed(
        {4: b"<< /Length %d >>\nstream\n" % len(page) + page + b"\nendstream", 6: form(a, 9), 7: form(b, 10)},
        {1: b"<< /Type /Catalog /Pages 2 0 R >>", 2: b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
         3: b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 5 0 R >> "
            b"/XObject << /FA 6 0 R >> >> /Contents 4 0 R >>",
         5: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
         9: b"<< /Font << /F1 5 0 R >> /XObject << /FB 7 0 R >> >>",
         10: b"<< /Font << /F1 5 0 R >> /XObject << /FA 6 0 R >> >>"}))
    return path
