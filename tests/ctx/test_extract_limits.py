"""Document extraction under limits: hostile files cost a warning naming the limit, never the sync or the
machine's memory.

Every hostile file is generated here (tests/ctx/_bombs.py; each at most about 1 MB on disk). The syncs
run as a real ``ctx sync`` in a child process whose peak memory, with its reader worker's, is
measured by the kernel (the sync's own high-water mark, VmHWM, plus the largest worker's, ``getrusage``; one worker runs at
a time, so their sum bounds what was resident at once). ``make test`` runs smaller versions of the two
largest files (``make stress``, CAIRN_STRESS=1: the full sizes, every limit at its default)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from cairn_servers.ctx import extract
from cairn_servers.core.errors import InvalidInput
from cairn_servers.ctx.service import Service

from . import _bombs
from ._docs import pdf_bytes, write_docx
from .conftest import config_file

PY = sys.executable
SRC = str(Path(__file__).resolve().parents[2] / "src")
STRESS = os.environ.get("CAIRN_STRESS", "") not in ("", "0")
MIB = 1 << 20
PEAK_MB = 300

# Runs `ctx sync` in this process, then writes its peak RSS and its children's (reaped workers) to argv[1].
_MEASURED_SYNC = """
import gc, json, resource, sys
from cairn_servers.ctx.cli import main
code = main(sys.argv[2:])
gc.collect()  # the connector's reader stops (and its worker is reaped) when the connector is collected
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
# This process's own peak is its memory's high-water mark (VmHWM). RUSAGE_SELF's ru_maxrss would also
# count the memory of the process that spawned it (the test runner, hundreds of MB after a model test).
with open("/proc/self/status") as status:
    hwm = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
with open(sys.argv[1], "w") as out:
    json.dump({"code": code, "self_kb": hwm, "children_kb": kids.ru_maxrss}, out)
"""


def measured_sync(tmp_path: Path, root: Path, env: dict[str, str] | None = None) -> tuple[dict[str, Any], str, int]:
    """``ctx sync --json`` over ``root``: (the report of its one source, stderr, peak RSS in MB of the sync
    plus its largest worker)."""
    cfg = config_file(tmp_path, f'[db]\npath = "kb.sqlite"\n[connectors.filesystem.docs]\nroot = "{root}"\n')
    usage = tmp_path / "usage.json"
    proc = subprocess.run([PY, "-c", _MEASURED_SYNC, str(usage), "sync", "--config", str(cfg), "--json"],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": SRC, **(env or {})})
    assert proc.returncode == 0, proc.stderr
    measured = json.loads(usage.read_text())
    assert measured["code"] == 0
    report = json.loads(proc.stdout)["sources"][0]
    print(f"sync peak RSS {measured['self_kb'] // 1024} MB + largest worker {measured['children_kb'] // 1024} MB, "
          f"{report['seconds']} s")
    return report, proc.stderr, (measured["self_kb"] + measured["children_kb"]) // 1024


def warnings_of(report: dict[str, Any]) -> dict[str, str]:
    return {w.split(": ", 1)[0]: w.split(": ", 1)[1] for w in report["warnings"]}


def search(tmp_path: Path, text: str) -> list[str]:
    svc = Service.from_config(tmp_path / "ctx.toml")
    try:
        return [h.source_id for h in svc.search(text)]
    finally:
        svc.close()


def hostile_folder(root: Path) -> None:
    """The audit's seven files (two of them smaller outside stress runs) and two good documents."""
    root.mkdir()
    docx_small, docx_large = (100 * MIB, 500 * MIB) if STRESS else (8 * MIB, 16 * MIB)
    _bombs.empty_paragraphs_docx(root / "paragraphs-100.docx", docx_small)
    _bombs.empty_paragraphs_docx(root / "paragraphs-500.docx", docx_large)
    _bombs.far_cell_xlsx(root / "far-cell.xlsx")
    _bombs.declared_dimension_xlsx(root / "declared.xlsx")
    _bombs.huge_content_pdf(root / "inflates.pdf", 1_000_000_000 if STRESS else 96 * MIB)
    _bombs.many_operators_pdf(root / "operators.pdf", 5_000_000)
    _bombs.recursive_forms_pdf(root / "forms.pdf")
    (root / "good.pdf").write_bytes(pdf_bytes([["A fine page about herons."]]))
    write_docx(root / "good.docx", [("h1", "Herons"), ("p", "Grey herons nest in colonies.")])
    for f in root.iterdir():
        assert f.stat().st_size <= 1_000_000, f


def test_each_hostile_document_is_skipped_naming_its_limit_and_the_sync_stays_small(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    hostile_folder(root)
    # Outside stress runs the two DOCX files are 8 and 16 MiB of <w:p/>: the element limit is lowered to
    # match (the defaults are what the stress run uses).
    env = {} if STRESS else {"CTX_EXTRACT_XML_ELEMENTS": "1000000"}
    elements = "5,000,000" if STRESS else "1,000,000"
    report, stderr, peak = measured_sync(tmp_path, root, env)
    assert (report["ok"], report["added"], report["skipped"]) == (True, 3, 6)
    too_many = (f"skipped: word/document.xml and the parts before it: over the limit of {elements} XML elements "
                "(CTX_EXTRACT_XML_ELEMENTS)")
    assert warnings_of(report) == {
        "paragraphs-100.docx": too_many,
        "paragraphs-500.docx": too_many,
        "far-cell.xlsx": "skipped: xl/worksheets/sheet1.xml spans 41,943,040 cells (2 of them with a value): over "
                         "the limit of 4,000,000 cells in a sheet (CTX_EXTRACT_XLSX_CELLS)",
        "inflates.pdf": "skipped: object 4: over the limit of 64 MiB in one decompressed stream "
                        "(CTX_EXTRACT_PDF_STREAM_MB)",
        "operators.pdf": "skipped: page 1: over the limit of 1,000,000 operators on a page (CTX_EXTRACT_PDF_OPERATORS)",
        "forms.pdf": "skipped: page 1: form XObjects draw each other (objects 6 → 7 → 6), a loop PDFium would "
                     "expand until memory runs out",
    }
    for warning in report["warnings"]:  # and on stderr, for whoever runs the sync
        assert re.search(rf"WARN \w+: filesystem:docs: {re.escape(warning)}\n", stderr), stderr
    assert peak <= PEAK_MB, f"peak RSS {peak} MB"
    # A declared dimension is not trusted, and costs nothing: the sheet's one cell is read.
    assert search(tmp_path, "declared far") == ["declared.xlsx"]
    assert sorted(search(tmp_path, "herons")) == ["good.docx", "good.pdf"]


def test_the_worker_memory_limit_is_the_backstop_when_the_parsers_caps_are_raised(tmp_path: Path) -> None:
    """With the parsers' own caps out of the way, PDFium and calamine meet the worker's address-space
    limit and abort; the file is skipped with that limit named, the sync goes on, memory stays bounded.
    The DOCX reader streams, so a DOCX past no cap is read whole in bounded memory (its last words found)."""
    root = tmp_path / "docs"
    root.mkdir()
    _bombs.huge_content_pdf(root / "inflates.pdf", 1_000_000_000 if STRESS else 128 * MIB)
    _bombs.many_operators_pdf(root / "operators.pdf", 5_000_000)
    _bombs.far_cell_xlsx(root / "far-cell.xlsx")
    _bombs.empty_paragraphs_docx(root / "paragraphs.docx", 8 * MIB)  # bigger ones meet the 60 s time cap
    (root / "good.pdf").write_bytes(pdf_bytes([["A fine page about herons."]]))
    raised = {f"CTX_EXTRACT_{k}": "1000000000" for k in ("PDF_STREAM_MB", "PDF_OPERATORS", "XLSX_CELLS", "XML_MB",
                                                          "XML_ELEMENTS")}
    report, stderr, peak = measured_sync(tmp_path, root, {**raised, "CTX_EXTRACT_MEMORY_MB": "128",
                                                          "CTX_EXTRACT_CPU_SECONDS": "120"})
    memory = "most likely over the limit of 128 MiB of memory (CTX_EXTRACT_MEMORY_MB)"
    assert warnings_of(report) == {
        "inflates.pdf": f"skipped: the PDF reader stopped (SIGABRT), {memory}",
        "operators.pdf": f"skipped: the PDF reader stopped (SIGABRT), {memory}",
        "far-cell.xlsx": f"skipped: the XLSX reader stopped (SIGABRT), {memory}",
    }
    assert (report["added"], report["skipped"]) == (2, 3)
    assert search(tmp_path, "last words") == ["paragraphs.docx"]
    assert search(tmp_path, "herons") == ["good.pdf"]
    assert peak <= PEAK_MB, f"peak RSS {peak} MB"


def _service(tmp_path: Path, root: Path) -> Service:
    return Service.from_config(config_file(tmp_path, f'[db]\npath = "kb.sqlite"\n[connectors.filesystem.docs]\n'
                                                     f'root = "{root}"\n'))


def _workers() -> list[int]:
    """This process's reader workers (children running cairn_servers.ctx.reader)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid() and b"cairn_servers.ctx.reader" in cmd:
            found.append(int(pid))
    return found


@pytest.mark.parametrize("how", ["cpu", "wall-clock", "crash"])
def test_a_worker_past_its_cpu_or_time_limit_or_that_dies_costs_one_file(tmp_path: Path, how: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A PDF that keeps PDFium busy (millions of ``q Q``: seconds of CPU, little memory): stopped by
    RLIMIT_CPU, or killed by the parent's wall clock, or killed from outside with SIGSEGV (what a crash
    in a native parser looks like). The next file gets a fresh worker and is read."""
    root = tmp_path / "docs"
    root.mkdir()
    if how == "cpu":  # 60 pages of about 0.1 s of CPU each; the 1 s limit stops it, whatever the load
        _bombs.busy_pdf(root / "a-busy.pdf", 2_000_000, pages=60)
    else:  # one page of about 2 s inside PDFium, where no time check between pages can stop it
        _bombs.busy_pdf(root / "a-busy.pdf", 10_000_000)
    (root / "b-good.pdf").write_bytes(pdf_bytes([["A fine page about kestrels."]]))
    for key in ("PDF_STREAM_MB", "PDF_OPERATORS"):
        monkeypatch.setenv(f"CTX_EXTRACT_{key}", "1000000000")
    if how == "cpu":
        monkeypatch.setenv("CTX_EXTRACT_CPU_SECONDS", "1")
    elif how == "wall-clock":
        monkeypatch.setattr(extract, "MAX_SECONDS", 0.5)
        monkeypatch.setattr(extract, "KILL_AFTER", 0.5)
    svc = _service(tmp_path, root)
    killed: list[int] = []
    if how == "crash":
        def kill_the_worker() -> None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not killed:
                for pid in _workers():
                    time.sleep(0.3)  # it is reading a-busy.pdf (seconds of work)
                    os.kill(pid, signal.SIGSEGV)
                    killed.append(pid)
                    return
                time.sleep(0.02)

        threading.Thread(target=kill_the_worker, daemon=True).start()
    try:
        started = time.monotonic()
        report = svc.sync("all").sources[0]
        assert time.monotonic() - started < 30
        expected = {
            "cpu": "the PDF reader was stopped: over the limit of 1 s of CPU time (CTX_EXTRACT_CPU_SECONDS)",
            "wall-clock": "extraction did not finish within 1 s; its worker was killed",
            "crash": "the PDF reader crashed on this file (signal 11)",
        }[how]
        assert report.warnings == [f"a-busy.pdf: skipped: {expected}"]
        assert (report.ok, report.added, report.skipped) == (True, 1, 1)
        assert [h.source_id for h in svc.search("kestrels")] == ["b-good.pdf"]
        assert not killed or killed[0] not in _workers()
    finally:
        svc.close()


# ---- each parser cap, on its own -------------------------------------------------------------------


def _docx_with(path: Path, document_xml: bytes) -> bytes:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("word/document.xml", document_xml)
    return path.read_bytes()


def _skip_reason(data: bytes, name: str) -> str:
    with pytest.raises(extract.Skipped) as caught:
        extract.extract(data, name, name.rsplit(".", 1)[1])
    return caught.value.reason


W = f'<w:document xmlns:w="{_bombs.W_NS}"><w:body>'


def test_office_xml_caps_bytes_elements_held_and_dtds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _docx_with(tmp_path / "t.docx", (W + "<w:p><w:r><w:t>" + "word " * (3 * MIB // 5)
                                            + "</w:t></w:r></w:p></w:body></w:document>").encode())
    monkeypatch.setattr(extract, "XML_MB", 2)
    assert _skip_reason(text, "t.docx") == ("word/document.xml and the parts before it: over the limit of 2 MiB of "
                                            "decompressed XML (CTX_EXTRACT_XML_MB)")
    monkeypatch.setattr(extract, "XML_MB", 256)
    assert extract.extract(text, "t.docx", "docx").body.startswith("word word")

    runs = _docx_with(tmp_path / "r.docx", (W + "<w:p>" + "<w:r><w:t>x</w:t></w:r>" * 1000
                                            + "</w:p><w:p><w:r><w:t>after</w:t></w:r></w:p></w:body></w:document>")
                      .encode())
    monkeypatch.setattr(extract, "XML_TREE", 1500)  # one paragraph of 2,000 elements is held whole to be read
    assert _skip_reason(runs, "r.docx") == ("a paragraph or table in word/document.xml: over the limit of 1,500 XML "
                                            "elements in one part, paragraph or table (CTX_EXTRACT_XML_TREE)")
    monkeypatch.setattr(extract, "XML_TREE", 2500)
    assert extract.extract(runs, "r.docx", "docx").body == "x" * 1000 + "\n\nafter"

    from ._docs import write_pptx

    write_pptx(tmp_path / "d.pptx", [("Wide", "\n".join(f"line {i}" for i in range(400)), "")])
    deck = (tmp_path / "d.pptx").read_bytes()
    monkeypatch.setattr(extract, "XML_TREE", 1000)  # the slide has about 2,000 elements (a:p, a:r, a:t ...)
    assert _skip_reason(deck, "d.pptx") == ("ppt/slides/slide1.xml: over the limit of 1,000 XML elements in one "
                                            "part, paragraph or table (CTX_EXTRACT_XML_TREE)")
    monkeypatch.setattr(extract, "XML_TREE", 500_000)
    assert "line 399" in extract.extract(deck, "d.pptx", "pptx").body

    laughs = _docx_with(tmp_path / "l.docx", b'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY a "aaaa">]>'
                        + (W + "<w:p><w:r><w:t>&a;</w:t></w:r></w:p></w:body></w:document>").encode())
    assert _skip_reason(laughs, "l.docx") == "word/document.xml has a DTD (not allowed in an Office file)"


def test_xlsx_cells_held_are_counted_not_only_their_extent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ._docs import write_xlsx

    write_xlsx(tmp_path / "s.xlsx", {"Data": [["k", "v"]] + [[f"r{i}", i] for i in range(600)]})
    data = (tmp_path / "s.xlsx").read_bytes()
    monkeypatch.setattr(extract, "XLSX_CELLS", 1000)
    assert _skip_reason(data, "s.xlsx") == ("xl/worksheets/sheet1.xml holds more than 1,000 cells: over the limit "
                                            "of 1,000 cells in a sheet (CTX_EXTRACT_XLSX_CELLS)")
    monkeypatch.setattr(extract, "XLSX_CELLS", 1202)  # 601 rows x 2 columns: exactly the limit
    assert "r599 | 599" in extract.extract(data, "s.xlsx", "xlsx").body


def _form_chain_pdf(depth: int, fan_out: int) -> bytes:
    """A page that draws form 1, which draws form 2 ``fan_out`` times, ... down to form ``depth``:
    no loop, but ``fan_out ** depth`` drawings of the last."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /XObject << /X 5 0 R >> "
               b"/Font << /F1 %d 0 R >> >> /Contents 4 0 R >>" % (5 + depth)]
    page = b"BT /F1 11 Tf 72 720 Td (chain) Tj ET /X Do"
    objects.append(b"<< /Length %d >>\nstream\n" % len(page) + page + b"\nendstream")
    for level in range(depth):
        last = level == depth - 1
        body = b"0 0 m 1 1 l S" if last else b" ".join([b"/X Do"] * fan_out)
        res = b"" if last else b"/Resources << /XObject << /X %d 0 R >> >> " % (6 + level)
        objects.append(b"<< /Type /XObject /Subtype /Form /BBox [0 0 9 9] %s/Length %d >>\nstream\n"
                       % (res, len(body)) + body + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    return _bombs._pdf(objects)


def test_pdf_caps_pages_nesting_and_forms_drawn_many_times(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "chain" in extract.extract(_form_chain_pdf(5, 3), "c.pdf", "pdf").body
    assert _skip_reason(_form_chain_pdf(14, 1), "deep.pdf") == (
        "page 1, object 17: over the limit of 12 levels of nested forms (CTX_EXTRACT_PDF_FORM_DEPTH)")
    # 10 forms deep, each drawing the next 6 times: 6**9 drawings of the last form, no loop.
    assert _skip_reason(_form_chain_pdf(10, 6), "fan.pdf") == (
        "page 1 (each form counted every time it is drawn): over the limit of 1,000,000 operators on a page "
        "(CTX_EXTRACT_PDF_OPERATORS)")
    # The same loop with the pages, resources and font packed in an object stream (a cross-reference stream
    # file, as most writers make today); without the loop PDFium reads it, through both forms.
    packed = tmp_path / "packed.pdf"
    assert extract.extract(_bombs.packed_forms_pdf(packed, loop=False).read_bytes(), "p.pdf", "pdf").body == (
        "# Page 1\n\ncover text\nform b\nform a")
    assert _skip_reason(_bombs.packed_forms_pdf(packed, loop=True).read_bytes(), "p.pdf") == (
        "page 1: form XObjects draw each other (objects 6 → 7 → 6), a loop PDFium would expand until memory runs "
        "out")
    monkeypatch.setattr(extract, "PDF_PAGES", 3)
    assert _skip_reason(pdf_bytes([["p"]] * 4), "p.pdf") == (
        "the page tree: over the limit of 3 pages (CTX_EXTRACT_PDF_PAGES)")
    assert extract.extract(pdf_bytes([["p"]] * 3), "p.pdf", "pdf").metadata["pages"] == 3


@pytest.mark.usefixtures("ctx_backend")  # on SQLite and on PostgreSQL
def test_the_output_limit_and_bad_limit_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "long.pdf").write_bytes(pdf_bytes([[f"line {i} " + "lorem ipsum " * 8 for i in range(60)]] * 200))
    (root / "short.pdf").write_bytes(pdf_bytes([["A fine page about plovers."]]))
    monkeypatch.setenv("CTX_EXTRACT_OUTPUT_MB", "1")
    svc = _service(tmp_path, root)
    report = svc.sync("all").sources[0]
    assert len(report.warnings) == 1
    assert re.fullmatch(r"long\.pdf: skipped: the text is 1\.\d MiB: over the limit of 1 MiB of text "
                        r"\(CTX_EXTRACT_OUTPUT_MB\)", report.warnings[0]), report.warnings
    assert [h.source_id for h in svc.search("plovers")] == ["short.pdf"]
    svc.close()
    for bad in ("0", "-3", "lots", "1.5"):
        monkeypatch.setenv("CTX_EXTRACT_MEMORY_MB", bad)
        with pytest.raises(InvalidInput, match=f"^CTX_EXTRACT_MEMORY_MB must be a positive integer, not '{bad}'.$"):
            extract.limits()
    monkeypatch.delenv("CTX_EXTRACT_MEMORY_MB")
    # A sync with a bad setting fails with that reason and exit 2, before reading any document.
    proc = subprocess.run([PY, "-m", "cairn_servers.ctx.cli", "sync", "--config", str(tmp_path / "ctx.toml"), "--text"],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": SRC, "CTX_EXTRACT_PDF_PAGES": "many"})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == ("ctx: warning: filesystem:docs was not synced: CTX_EXTRACT_PDF_PAGES must be a positive "
                           "integer, not 'many'.\n")


def test_a_docx_read_as_a_stream_gives_the_text_it_gives_parsed_whole(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Past XML_TREE elements word/document.xml is streamed a block at a time: same headings, lists,
    tables and styles (Word's own, and a custom heading style found in styles.xml) as the whole parse."""
    import copy

    import docx
    from docx.enum.style import WD_STYLE_TYPE
    from docx.oxml.ns import qn

    for custom in (False, True):
        doc = docx.Document()
        doc.add_heading("Onboarding guide", level=1)
        template = [doc.add_heading("Part 0", level=2), doc.add_paragraph("Paragraph 0 about laptops and badges."),
                    doc.add_paragraph("item 0", style="List Bullet")]
        for i in range(1, 1000):  # copies (python-docx is slow to add styled paragraphs one by one)
            for p in template:
                element = copy.deepcopy(p._p)
                for t in element.iter(qn("w:t")):
                    t.text = (t.text or "").replace("0", str(i))
                doc.element.body.append(element)
        table = doc.add_table(rows=3, cols=2)
        for r in range(3):
            for c in range(2):
                table.cell(r, c).text = f"r{r}c{c}"
        if custom:
            style = doc.styles.add_style("Chapter Head", WD_STYLE_TYPE.PARAGRAPH)
            style.base_style = doc.styles["Heading 2"]
            doc.add_paragraph("A custom heading", style=style)
        doc.add_paragraph("The end.")
        doc.save(str(tmp_path / "g.docx"))
        data = (tmp_path / "g.docx").read_bytes()
        whole = extract.extract(data, "g.docx", "docx")
        monkeypatch.setattr(extract, "XML_TREE", 10_000)  # every block and styles.xml fit; the document does not
        streamed = extract.extract(data, "g.docx", "docx")
        monkeypatch.setattr(extract, "XML_TREE", 500_000)
        assert (streamed.body, streamed.title) == (whole.body, whole.title)
        assert "## Part 999\n\nParagraph 999 about laptops and badges.\n\n- item 999" in whole.body
        assert "r2c0 | r2c1" in whole.body and "The end." in whole.body
        assert ("## A custom heading\n\nThe end." in whole.body) == custom


def test_memory_error_in_the_worker_names_the_memory_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A parse in Python past the worker's address space (a 360,000-element document parsed whole, in
    a 60 MiB worker) ends in MemoryError, reported as the memory limit; the reader goes on."""
    from cairn_servers.ctx.reader import Reader

    big = _docx_with(tmp_path / "m.docx", (W + "<w:p><w:r><w:t>x</w:t></w:r></w:p>" * 120_000
                                           + "</w:body></w:document>").encode())
    monkeypatch.setenv("CTX_EXTRACT_MEMORY_MB", "60")
    reader = Reader()
    try:
        with pytest.raises(extract.Skipped, match=r"^over the limit of 60 MiB of memory \(CTX_EXTRACT_MEMORY_MB\)$"):
            reader.extract(big, "m.docx", "docx")
        assert reader.extract(pdf_bytes([["still reading"]]), "s.pdf", "pdf").body == "# Page 1\n\nstill reading"
    finally:
        reader.stop()
