"""Document extraction (issue 17, item 1): PDF, DOCX, PPTX, XLSX, HTML and text through the filesystem,
git and Lua connectors; citable locations; bad files skipped with a warning; size caps; lazy imports.

Every fixture is written by the test: PDFs by a small hand-built writer (tests/ctx/_docs.py) and
pypdf's encryption, Office files by python-docx, python-pptx and XlsxWriter."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from cairn_servers.ctx import extract
from cairn_servers.ctx.service import Service

from ._docs import encrypted_pdf, pdf_bytes, write_docx, write_pptx, write_xlsx
from .conftest import config_file, git, write

PY = sys.executable
SRC = str(Path(__file__).resolve().parents[2] / "src")

PHRASES = {
    "report.pdf": "zebra migration",
    "handbook.docx": "purple sticker",
    "deck.pptx": "turquoise llamas",
    "budget.xlsx": "Compilers",
    "page.html": "lighthouse keeper",
    "notes.txt": "blue-green releases",
    "readme.md": "octopus gardening",
}
LOCATIONS = {
    "report.pdf": "Page 2",
    "handbook.docx": "Onboarding guide > Laptops",
    "deck.pptx": "Slide 2: Budget",
    "budget.xlsx": "Sheet: Staff",
    "page.html": "Harbour > Night shift",
    "notes.txt": "",
    "readme.md": "Readme",
}


FILLER = " ".join(f"filler{i}" for i in range(120))  # a first section big enough to be a chunk of its own


def one_of_each(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "report.pdf").write_bytes(pdf_bytes([
        ["Annual report", "An introduction to the year."],
        ["Wildlife", "The zebra migration crossed the river in March."],
        ["Outlook", "Next year looks calm."],
    ], title="Annual Report 2024"))
    write_docx(root / "handbook.docx", [
        ("h1", "Onboarding guide"), ("p", "Welcome aboard. " + FILLER),
        ("h2", "Laptops"), ("p", "Every engineer gets a laptop with a purple sticker."),
        ("li", "Bring your badge"), ("table", "Name|Role;Ada|Engineer"),
    ])
    write_pptx(root / "deck.pptx", [
        ("Kickoff", "Welcome everyone to the kickoff", "Say hello first"),
        ("Budget", "We spend the budget on turquoise llamas", "Mention the farm"),
    ])
    write_xlsx(root / "budget.xlsx", {
        "Inventory": [["Item", "Count", "Price"], ["widget", 3, 2.5], ["gizmo", 10, 1.0]],
        "Staff": [["Name", "Team"], ["Grace", "Compilers"], ["Linus", "Kernels"]],
    })
    (root / "page.html").write_text(
        "<html><head><title>Harbour</title><script>var lighthouse = 1;</script></head><body>"
        f"<h1>Harbour</h1><p>Boats come and go. {FILLER}</p><h2>Night shift</h2>"
        "<p>The lighthouse keeper trims the lamp.</p></body></html>", encoding="utf-8")
    write(root, {"notes.txt": "Meeting notes: the pipeline uses blue-green releases.\n",
                 "readme.md": "# Readme\n\nWe practise octopus gardening on Fridays.\n"})


def service(tmp_path: Path, root: Path, extra: str = "") -> Service:
    return Service.from_config(config_file(tmp_path, f"""
[db]
path = "kb.sqlite"
[connectors.filesystem.docs]
root = "{root}"
{extra}
"""))


@pytest.mark.usefixtures("ctx_backend")  # on SQLite and on PostgreSQL
def test_a_folder_of_every_format_syncs_and_each_phrase_is_found_with_its_location(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    one_of_each(root)
    svc = service(tmp_path, root)
    report = svc.sync("all").sources[0]
    assert (report.ok, report.added, report.skipped, report.warnings) == (True, 7, 0, [])
    for name, phrase in PHRASES.items():
        hits = svc.search(f'"{phrase}"')
        assert [h.source_id for h in hits] == [name], (name, hits)
        assert hits[0].location == LOCATIONS[name], (name, hits[0])
        assert phrase.split()[0] in hits[0].snippet

    # `ctx get` cites the same places: the page headings are in the body and on the chunks.
    pdf = svc.get(svc.search('"zebra migration"')[0].id)
    assert pdf.title == "Annual Report 2024"
    assert pdf.metadata == {"format": "pdf", "pages": 3}
    assert [c.heading for c in pdf.chunks] == ["# Page 1", "# Page 2", "# Page 3"]
    assert "zebra migration" in pdf.chunks[1].text and "zebra" not in pdf.chunks[0].text + pdf.chunks[2].text
    assert pdf.body.startswith("# Page 1\n\nAnnual report")
    deck = svc.get(svc.search('"turquoise llamas"')[0].id)
    assert deck.title == "Kickoff" and "Notes: Mention the farm" in deck.chunks[1].text
    sheet = svc.get(svc.search("Kernels")[0].id)
    assert [c.heading for c in sheet.chunks] == ["# Sheet: Inventory", "# Sheet: Staff"]
    assert sheet.chunks[1].text == "# Sheet: Staff\n\nName | Team\nGrace | Compilers\nLinus | Kernels"
    doc = svc.get(svc.search('"purple sticker"')[0].id)
    assert doc.title == "Onboarding guide" and "- Bring your badge" in doc.body and "Ada | Engineer" in doc.body
    assert svc.search("lighthouse")[0].title == "Harbour"
    assert "var lighthouse" not in svc.get(svc.search("lighthouse")[0].id).body  # scripts are dropped

    # Unchanged documents are not read again.
    again = svc.sync("all").sources[0]
    assert (again.unchanged, again.added, again.updated, again.warnings) == (7, 0, 0, [])
    svc.close()


@pytest.mark.usefixtures("ctx_backend")  # on SQLite and on PostgreSQL
def test_the_cli_prints_locations_and_warnings(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    one_of_each(root)
    (root / "broken.pdf").write_bytes(b"%PDF-1.4\nthis is not really a PDF")
    cfg = config_file(tmp_path, f'[db]\npath = "kb.sqlite"\n[connectors.filesystem.docs]\nroot = "{root}"\n')
    env = dict(os.environ, PYTHONPATH=SRC)
    sync = subprocess.run([PY, "-m", "cairn_servers.ctx.cli", "sync", "--config", str(cfg), "--text"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert sync.returncode == 0, sync.stderr
    assert "7 added" in sync.stdout and "1 skipped" in sync.stdout
    assert "  warning: broken.pdf: skipped: corrupt or not a PDF file" in sync.stdout
    # and on stderr, as a log line under the command's name
    assert " WARN ctx: filesystem:docs: broken.pdf: skipped: corrupt or not a PDF file" in sync.stderr, sync.stderr
    as_json = subprocess.run([PY, "-m", "cairn_servers.ctx.cli", "sync", "--config", str(cfg), "--json"],
                             capture_output=True, text=True, env=env, timeout=120)
    warnings = json.loads(as_json.stdout)["sources"][0]["warnings"]
    assert len(warnings) == 1 and warnings[0].startswith("broken.pdf: skipped: corrupt or not a PDF file")
    found = subprocess.run([PY, "-m", "cairn_servers.ctx.cli", "search", "zebra migration", "--config", str(cfg), "--json"],
                           capture_output=True, text=True, env=env, timeout=120)
    hit = json.loads(found.stdout)[0]
    assert (hit["source_id"], hit["location"]) == ("report.pdf", "Page 2")
    text = subprocess.run([PY, "-m", "cairn_servers.ctx.cli", "search", "zebra migration", "--config", str(cfg), "--text"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert "filesystem:docs report.pdf, Page 2" in text.stdout


@pytest.mark.usefixtures("ctx_backend")  # on SQLite and on PostgreSQL
def test_bad_files_are_skipped_with_a_warning_and_the_sync_succeeds(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    good = pdf_bytes([["A fine document about herons."]])
    (root / "good.pdf").write_bytes(good)
    (root / "locked.pdf").write_bytes(encrypted_pdf(pdf_bytes([["secret plans about herons"]])))
    (root / "truncated.pdf").write_bytes(good[: len(good) // 3])
    (root / "scan.pdf").write_bytes(pdf_bytes([["herons"], ["herons"]], image_only=True))
    (root / "empty.pdf").write_bytes(b"")
    (root / "huge.pdf").write_bytes(pdf_bytes([["herons " * 100] * 100]))  # over the cap set below
    (root / "huge.md").write_text("herons " * 400, encoding="utf-8")  # over max_file_bytes
    write_docx(root / "blank.docx", [])
    (root / "protected.docx").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 600)  # OLE: encrypted OOXML
    (root / "notazip.pptx").write_bytes(b"PK\x03\x04 definitely not a zip")
    with zipfile.ZipFile(root / "bomb.xlsx", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("xl/worksheets/sheet1.xml", b"\0" * (3 << 20))  # 3 MiB of zeros in a few KB
    monkeypatch.setattr(extract, "MAX_UNPACKED", 2 << 20)

    svc = service(tmp_path, root, "max_document_bytes = 50000\nmax_file_bytes = 2000")
    report = svc.sync("all").sources[0]
    assert report.ok and report.error is None
    assert (report.added, report.skipped) == (1, 10)
    reasons = {w.split(": skipped: ")[0]: w.split(": skipped: ")[1] for w in report.warnings}
    assert set(reasons) == {"locked.pdf", "truncated.pdf", "scan.pdf", "empty.pdf", "huge.pdf", "huge.md",
                            "blank.docx", "protected.docx", "notazip.pptx", "bomb.xlsx"}
    assert reasons["locked.pdf"] == "encrypted (needs a password)"
    assert reasons["truncated.pdf"].startswith("corrupt or not a PDF file")
    assert reasons["scan.pdf"] == "no text (image-only or scanned PDF; ctx does no OCR)"
    assert reasons["empty.pdf"] == "empty file"
    assert re.fullmatch(r"\d\d,\d{3} bytes is over the 50,000 bytes cap \(max_document_bytes\)", reasons["huge.pdf"])
    assert reasons["huge.md"] == "2,800 bytes is over the 2,000 bytes cap (max_file_bytes)"
    assert reasons["blank.docx"] == "no text"
    assert reasons["protected.docx"].startswith("encrypted (a password-protected DOCX)")
    assert reasons["notazip.pptx"] == "corrupt or not a PPTX file (not a zip archive)"
    assert reasons["bomb.xlsx"].startswith("expands to 3 MiB (over 2 MiB")
    assert [h.source_id for h in svc.search("herons")] == ["good.pdf"]

    # Fixed files are picked up on the next sync; a file that turns bad is dropped, with its warning.
    (root / "truncated.pdf").write_bytes(pdf_bytes([["herons again"]]))
    (root / "good.pdf").write_bytes(b"%PDF-1.4\n")
    again = svc.sync("all").sources[0]
    assert (again.ok, again.added, again.deleted) == (True, 1, 1)
    assert any(w.startswith("good.pdf: skipped: corrupt") for w in again.warnings)
    assert [h.source_id for h in svc.search("herons")] == ["truncated.pdf"]
    svc.close()


@pytest.mark.usefixtures("ctx_backend")  # on SQLite and on PostgreSQL
def test_time_and_text_caps_keep_what_was_read_with_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "long.pdf").write_bytes(pdf_bytes([["first page osprey"], ["second page"], ["third page"]]))
    monkeypatch.setattr(extract, "MAX_SECONDS", 0.0)
    svc = service(tmp_path, root)
    report = svc.sync("all").sources[0]
    assert (report.added, report.skipped) == (1, 0)
    assert report.warnings == ["long.pdf: extraction stopped after 0 s at page 1 of 3"]
    doc = svc.get(svc.search("osprey")[0].id)
    assert doc.body == "# Page 1\n\nfirst page osprey"
    svc.close()

    monkeypatch.setattr(extract, "MAX_SECONDS", 60.0)
    monkeypatch.setattr(extract, "MAX_TEXT", 20)
    out = extract.extract(pdf_bytes([["a" * 15], ["b" * 15]]), "x.pdf", "pdf")
    assert len(out.body) == 20 and out.warning and out.warning.startswith("text cut at 20 characters")


# A reader that crashes, hangs or runs out of CPU time: tests/ctx/test_extract_limits.py.


def test_pages_slides_and_sheets_never_share_a_chunk(tmp_path: Path) -> None:
    from cairn_servers.ctx.chunk import chunk_text

    # Ten tiny pages: Markdown rules would merge them; pages stay apart, so each chunk cites one page.
    pdf = extract.extract(pdf_bytes([[f"page {i} word{i}"] for i in range(1, 11)]), "p.pdf", "pdf")
    chunks = chunk_text(pdf.body, 400, 40, sections=pdf.sections)
    assert [c.heading for c in chunks] == [f"# Page {i}" for i in range(1, 11)]
    assert all(f"word{i + 1}" in c.text and c.text.count("word") == 1 for i, c in enumerate(chunks))
    merged = chunk_text(pdf.body, 400, 40)  # the same text as Markdown: one chunk
    assert len(merged) == 1
    # A long page is cut into several chunks, all citing that page; the overlap never crosses pages.
    long = extract.extract(pdf_bytes([["short"], [f"w{i} " * 10 for i in range(40)], ["tail end"]]), "l.pdf", "pdf")
    chunks = chunk_text(long.body, 100, 10, sections=long.sections)
    assert [c.heading for c in chunks][0] == "# Page 1" and chunks[-1].heading == "# Page 3"
    assert {c.heading for c in chunks[1:-1]} == {"# Page 2"} and len(chunks) > 3
    assert chunks[-1].text == "# Page 3\n\ntail end"


def test_extracted_text_cannot_pose_as_markdown_structure() -> None:
    pdf = extract.extract(pdf_bytes([["# include <stdio.h>", "```", "still page one"], ["page two"]]), "c.pdf", "pdf")
    from cairn_servers.ctx.chunk import chunk_text

    chunks = chunk_text(pdf.body, 400, 40, sections=1)
    assert [c.heading for c in chunks] == ["# Page 1", "# Page 2"]
    assert "\\# include <stdio.h>\n\\```\nstill page one" in chunks[0].text


def test_docx_and_pptx_text_matches_what_python_docx_and_python_pptx_read(tmp_path: Path) -> None:
    """Fidelity cross-check: the standard-library readers give the words the reference libraries give."""
    import docx
    from pptx import Presentation

    blocks = [("h1", "Title words"), ("p", "Tabs\tand (brackets) & ampersands"), ("h3", "Deep heading"),
              ("li", "listed item"), ("p", "Ünïcödé — dashes “quotes”"), ("table", "a1|b1;a2|b2")]
    write_docx(tmp_path / "x.docx", blocks)
    ours = extract.extract((tmp_path / "x.docx").read_bytes(), "x.docx", "docx").body
    ref = docx.Document(str(tmp_path / "x.docx"))
    theirs = [p.text for p in ref.paragraphs] + [c.text for t in ref.tables for r in t.rows for c in r.cells]
    assert sorted(re.findall(r"\w+", ours)) == sorted(re.findall(r"\w+", " ".join(theirs)))
    assert "# Title words" in ours and "### Deep heading" in ours

    write_pptx(tmp_path / "x.pptx", [("One", "alpha beta\ngamma", "note one"), ("Two", "delta", "")])
    ours = extract.extract((tmp_path / "x.pptx").read_bytes(), "x.pptx", "pptx").body
    deck = Presentation(str(tmp_path / "x.pptx"))
    theirs = [sh.text_frame.text for s in deck.slides for sh in s.shapes if sh.has_text_frame]
    theirs += [s.notes_slide.notes_text_frame.text for s in deck.slides if s.has_notes_slide]
    words = re.findall(r"\w+", ours)
    assert sorted(w for w in words if w not in ("Slide", "1", "2", "Notes")) == sorted(re.findall(r"\w+", " ".join(theirs)))


def test_docx_custom_and_localised_heading_styles_are_read_from_styles_xml(tmp_path: Path) -> None:
    import docx
    from docx.enum.style import WD_STYLE_TYPE
    from docx.oxml import OxmlElement
    from docx.oxml.ns import qn

    doc = docx.Document()
    custom = doc.styles.add_style("Chapter Head", WD_STYLE_TYPE.PARAGRAPH)
    custom.base_style = doc.styles["Heading 2"]  # a heading by inheritance, under its own id
    german = doc.styles.add_style("Überschrift 1", WD_STYLE_TYPE.PARAGRAPH)
    level = OxmlElement("w:outlineLvl")  # what a localised Word's heading style carries: an outline level
    level.set(qn("w:val"), "0")
    german.element.get_or_add_pPr().append(level)
    doc.add_paragraph("Kapitel eins", style=german)
    doc.add_paragraph("Chapter two", style=custom)
    doc.add_paragraph("Body text.")
    doc.save(str(tmp_path / "s.docx"))
    out = extract.extract((tmp_path / "s.docx").read_bytes(), "s.docx", "docx")
    assert out.body == "# Kapitel eins\n\n## Chapter two\n\nBody text."
    assert out.title == "Kapitel eins"


def test_xlsx_rows_come_in_groups_each_with_the_header_row() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "big.xlsx"
        write_xlsx(path, {"Orders": [["order", "customer", "total"]] + [[i, f"cust{i}", i * 1.5] for i in range(45)]})
        out = extract.extract(path.read_bytes(), "big.xlsx", "xlsx")
    groups = out.body.split("\n\n")[1:]
    assert [len(g.splitlines()) for g in groups] == [21, 21, 6]
    assert all(g.startswith("order | customer | total\n") for g in groups)
    assert "44 | cust44 | 66" in groups[-1]


def test_xlsx_with_a_chart_sheet_keeps_its_data_sheets(tmp_path: Path) -> None:
    import xlsxwriter

    book = xlsxwriter.Workbook(str(tmp_path / "c.xlsx"))
    data = book.add_worksheet("Data")
    rows: list[list[Any]] = [["key", "value"], ["a", 1], ["b", 2]]
    for r, row in enumerate(rows):
        for c, v in enumerate(row):
            data.write(r, c, v)
    chart = book.add_chart({"type": "column"})
    chart.add_series({"values": "=Data!$B$2:$B$3"})
    book.add_chartsheet("Chart").set_chart(chart)
    book.close()
    out = extract.extract((tmp_path / "c.xlsx").read_bytes(), "c.xlsx", "xlsx")
    assert out.body == "# Sheet: Data\n\nkey | value\na | 1\nb | 2" and out.metadata["sheets"] == 2


@pytest.mark.usefixtures("ctx_backend")  # on SQLite and on PostgreSQL
def test_git_connector_extracts_documents(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "specs").mkdir()
    (repo / "specs" / "design.pdf").write_bytes(pdf_bytes([["Intro"], ["The capybara protocol is stateless."]]))
    write_docx(repo / "specs" / "plan.docx", [("h1", "Plan"), ("p", "Ship the walrus feature.")])
    (repo / "specs" / "bad.pptx").write_bytes(b"not a deck")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "docs", when="2024-03-01T12:00:00Z")
    svc = Service.from_config(config_file(tmp_path, f"""
[db]
path = "kb.sqlite"
[connectors.git.specs]
url = "{repo}"
cache_dir = "{tmp_path / 'cache'}"
"""))
    report = svc.sync("all").sources[0]
    assert (report.ok, report.added, report.skipped) == (True, 2, 1)
    assert report.warnings == ["specs/bad.pptx: skipped: corrupt or not a PPTX file (not a zip archive)"]
    hit = svc.search("capybara")[0]
    assert (hit.source_id, hit.location) == ("specs/design.pdf", "Page 2")
    doc = svc.get(hit.id)
    assert doc.author == "Ada Lovelace" and doc.metadata["format"] == "pdf" and doc.metadata["path"] == "specs/design.pdf"
    assert svc.search("walrus")[0].location == "Plan"
    svc.close()


@pytest.mark.usefixtures("ctx_backend")  # on SQLite and on PostgreSQL
def test_lua_connector_items_can_carry_documents(tmp_path: Path) -> None:
    pdf = base64.b64encode(pdf_bytes([["cover"], ["The narwhal tusk is a tooth."]])).decode()
    (tmp_path / "feed.lua").write_text("""
connector = {}
function connector.scan(config)
  return {
    { source_id = "spec", title = "Spec", format = "pdf", body_base64 = config.pdf },
    { source_id = "wiki/harbour", format = "text/html",
      body = "<h1>Harbour</h1><h2>Tides</h2><p>The pelican census runs in June.</p>" },
    { source_id = "broken", format = "docx", body_base64 = "bm90IGEgZG9jeA==" },
    { source_id = "plain", body = "# Plain\\n\\nA markdown body about otters." },
  }
end
""", encoding="utf-8")
    svc = Service.from_config(config_file(tmp_path, f"""
[db]
path = "kb.sqlite"
[connectors.script.feed]
path = "feed.lua"
pdf = "{pdf}"
"""))
    report = svc.sync("all").sources[0]
    assert (report.ok, report.added, report.skipped) == (True, 3, 1), report
    assert report.warnings == ["broken: skipped: corrupt or not a DOCX file (not a zip archive)"]
    hit = svc.search("narwhal")[0]
    assert (hit.source_id, hit.title, hit.location) == ("spec", "Spec", "Page 2")
    assert svc.search("pelican")[0].location == "Harbour"  # a small page: one chunk, from its first heading
    assert svc.search("otters")[0].location == "Plain"
    svc.close()

    (tmp_path / "bad.lua").write_text(
        'connector = {}\nfunction connector.scan(c) return {{source_id = "x", body = "y", format = "odt"}} end\n',
        encoding="utf-8")
    svc = Service.from_config(config_file(tmp_path, '[db]\npath = "kb2.sqlite"\n[connectors.script.bad]\npath = "bad.lua"\n',
                                          name="bad.toml"))
    failed = svc.sync("all").sources[0]
    assert not failed.ok and "format 'odt' is not one of pdf, docx, pptx, xlsx, html" in (failed.error or "")
    svc.close()


@pytest.mark.usefixtures("ctx_backend")  # on SQLite and on PostgreSQL
def test_lua_connector_downloads_a_pdf_with_http_binary(tmp_path: Path) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    payload = pdf_bytes([["front"], ["The manatee census counts 412 animals."]], title="Census")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/pdf")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        (tmp_path / "dl.lua").write_text("""
connector = {}
function connector.scan(config)
  local r = http.get(config.url, { binary = true })
  assert(r.body == nil and r.ok)
  return { { source_id = "census.pdf", format = r.headers["content-type"], body_base64 = r.body_base64 } }
end
""", encoding="utf-8")
        svc = Service.from_config(config_file(tmp_path, f"""
[db]
path = "kb.sqlite"
[connectors.script.dl]
path = "dl.lua"
url = "http://127.0.0.1:{server.server_address[1]}/census.pdf"
allow_hosts = ["127.0.0.1"]
"""))
        report = svc.sync("all").sources[0]
        assert (report.ok, report.added, report.warnings) == (True, 1, []), report
        hit = svc.search("manatee")[0]
        assert (hit.title, hit.location) == ("Census", "Page 2")
        svc.close()
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.usefixtures("ctx_backend")  # on SQLite and on PostgreSQL
def test_search_start_up_does_not_load_the_extraction_libraries(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    one_of_each(root)
    cfg = config_file(tmp_path, f'[db]\npath = "kb.sqlite"\n[connectors.filesystem.docs]\nroot = "{root}"\n')
    env = dict(os.environ, PYTHONPATH=SRC)
    probe = ("import sys\nfrom cairn_servers.ctx.cli import main\nsys.argv[1:] = sys.argv[2:]\nrc = main()\n"
             "sys.stderr.write('MODULES ' + ' '.join(sorted(sys.modules)) + '\\n')\nsys.exit(rc)\n")
    sync = subprocess.run([PY, "-c", probe, "--", "sync", "--config", str(cfg), "--json"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert sync.returncode == 0, sync.stderr
    synced = set(sync.stderr.split("MODULES ")[1].split())
    assert {"cairn_servers.ctx.extract", "html.parser"} <= synced  # the probe does see them (PDFium: in the worker)
    search = subprocess.run([PY, "-c", probe, "--", "search", "zebra", "--config", str(cfg), "--json"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert search.returncode == 0, search.stderr
    assert json.loads(search.stdout)[0]["location"] == "Page 2"
    loaded = set(search.stderr.split("MODULES ")[1].split())
    heavy = {"pypdfium2", "pypdfium2_raw", "python_calamine", "cairn_servers.ctx.extract", "xml.etree.ElementTree",
             "html.parser", "zipfile", "cairn_servers.ctx.connectors"}
    if os.environ.get("CTX_DATABASE_URL"):  # psycopg-binary's version module reads importlib.metadata (zipfile)
        heavy.discard("zipfile")
    assert not heavy & loaded, heavy & loaded


def test_a_pdf_encrypted_without_a_user_password_is_read() -> None:
    # Restrictions only (printing, copying): every reader opens it, so ctx indexes it.
    out = extract.extract(encrypted_pdf(pdf_bytes([["open to all readers"]]), password=""), "r.pdf", "pdf")
    assert out.body == "# Page 1\n\nopen to all readers"


def test_html_charset_and_pdf_header_offset() -> None:
    latin = '<html><head><meta charset="iso-8859-1"><title>Caf\xe9</title></head><body><p>cr\xe8me br\xfbl\xe9e</p>'
    out = extract.extract(latin.encode("latin-1"), "m.html", "html")
    assert (out.title, out.body) == ("Café", "crème brûlée")
    assert extract.extract("<p>naïve</p>".encode("utf-8"), "u.html", "html").body == "naïve"
    # Junk before the header (allowed in the first KiB) still reads.
    assert "hello" in extract.extract(b"\n\n" + pdf_bytes([["hello"]]), "j.pdf", "pdf").body


def test_warnings_are_listed_up_to_a_limit_then_counted() -> None:
    from cairn_servers.ctx.connectors import MAX_WARNINGS, Skips

    skips = Skips()
    for i in range(MAX_WARNINGS + 50):
        skips.warn(f"f{i}.pdf", "empty file")
    assert skips.skipped == MAX_WARNINGS + 50 and len(skips.warnings) == MAX_WARNINGS + 1
    assert skips.warnings[0] == "f0.pdf: skipped: empty file"
    assert skips.warnings[-1] == f"... and 50 more files (warnings are listed for the first {MAX_WARNINGS})"
    skips.reset()
    assert (skips.skipped, skips.warnings) == (0, [])


def test_format_names() -> None:
    assert extract.format_of("a/B.PDF") == "pdf" and extract.format_of("x.htm") == "html"
    assert extract.format_of("README") is None and extract.format_of("notes.md") is None
    assert extract.normalize_format("application/pdf") == "pdf"
    assert extract.normalize_format(".XLSX") == "xlsx" and extract.normalize_format("markdown") is None
    with pytest.raises(ValueError):
        extract.normalize_format("odt")
    with pytest.raises(extract.Skipped, match="Git LFS pointer"):
        extract.extract(b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 12\n", "a.pdf", "pdf")
