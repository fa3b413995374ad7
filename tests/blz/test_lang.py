"""Multilingual llms-full files: non-English page copies are stored but not indexed by default."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import mcp_types as t
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from cairn_servers.blz import service, sources
from cairn_servers.blz.cli import run
from cairn_servers.blz.lang import foreign_pages, page_language
from cairn_servers.blz.llmstxt import parse, split_lines
from cairn_servers.blz.search import search
from cairn_servers.blz.store import Store

from .conftest import blz

TEXT = {
    "en": ("This guide shows how to install the library and create your first project. You can use the "
           "command line or the web interface, and the steps are the same on every platform. When the "
           "installation is complete, run the server and open the dashboard in your browser."),
    "fr": ("Ce guide explique comment installer la bibliothèque et créer votre premier projet. Vous pouvez "
           "utiliser la ligne de commande ou l'interface web, et les étapes sont les mêmes sur toutes les "
           "plateformes. Lorsque l'installation est terminée, lancez le serveur et ouvrez le tableau de bord."),
    "de": ("Diese Anleitung zeigt, wie Sie die Bibliothek installieren und Ihr erstes Projekt erstellen. Sie "
           "können die Kommandozeile oder die Weboberfläche verwenden, und die Schritte sind auf jeder "
           "Plattform gleich. Wenn die Installation abgeschlossen ist, starten Sie den Server."),
    "es": ("Esta guía muestra cómo instalar la biblioteca y crear su primer proyecto. Puede usar la línea de "
           "comandos o la interfaz web, y los pasos son los mismos en todas las plataformas. Cuando la "
           "instalación esté completa, ejecute el servidor y abra el panel en su navegador."),
    "ja": ("このガイドでは、ライブラリをインストールして最初のプロジェクトを作成する方法を説明します。"
           "コマンドラインまたはウェブインターフェースを使用できます。インストールが完了したら、"
           "サーバーを起動してブラウザでダッシュボードを開きます。"),
    "zh": "本指南介绍如何安装该库并创建您的第一个项目。您可以使用命令行或网页界面，所有平台上的步骤都相同。安装完成后，启动服务器并在浏览器中打开仪表板。",
    "ko": "이 가이드는 라이브러리를 설치하고 첫 번째 프로젝트를 만드는 방법을 보여줍니다. 명령줄 또는 웹 인터페이스를 사용할 수 있으며 모든 플랫폼에서 단계는 동일합니다.",
    "ru": ("Это руководство показывает, как установить библиотеку и создать ваш первый проект. Вы можете "
           "использовать командную строку или веб-интерфейс, и шаги одинаковы на всех платформах."),
}
HEADING = {"en": "Installing zebrafish", "fr": "Installer zèbre", "ja": "インストール方法", "de": "Installieren"}


def page(lang: str, n: int) -> str:
    heading = HEADING.get(lang, "Install")
    return (f"---\ntitle: \"Guide {n}\"\nurl: \"https://docs.example.dev/{lang}/guide-{n}\"\n---\n\n"
            f"## {heading} {n}\n\n{TEXT[lang]}\n\n```bash\n# install\nnpm install example\n```\n\n{TEXT[lang]}\n\n")


def multilingual(langs: tuple[str, ...] = ("en", "fr", "ja"), pages: int = 2) -> str:
    return "# Example docs\n\n" + "".join(page(lang, n) for lang in langs for n in range(1, pages + 1))


@pytest.mark.parametrize("lang", sorted(TEXT))
def test_page_language_reads_scripts_and_function_words(lang: str) -> None:
    lines = split_lines(f"## Title\n\n{TEXT[lang]}\n\n```js\nconst the = 1\n```\n")
    assert page_language(lines, 1, len(lines)) == lang


def test_code_only_or_tiny_pages_get_no_verdict() -> None:
    lines = split_lines("```python\nfrom la import de\nprint('les')\n```\n\nOK.\n")
    assert page_language(lines, 1, len(lines)) is None


def test_only_copies_beside_english_pages_are_left_out() -> None:
    doc = parse(multilingual(), all_languages=False)
    assert [h.text for h in doc.headings] == ["Example docs", "Installing zebrafish 1", "Installing zebrafish 2"]
    assert [lang for _s, _e, lang in doc.skipped] == ["fr", "fr", "ja", "ja"]
    whole = parse(multilingual())
    assert len(whole.headings) == 7 and not whole.skipped
    # Line numbers are the file's: a skipped range starts at its page's front matter.
    lines = doc.lines
    assert all(lines[s - 1] == "---" for s, _e, _lang in doc.skipped)
    assert doc.skipped_lines == sum(e - s + 1 for s, e, _ in doc.skipped) and doc.skipped[-1][1] == len(lines)
    # No section covers a skipped line.
    skipped = {n for s, e, _ in doc.skipped for n in range(s, e + 1)}
    assert not any(n in skipped for sec in doc.sections for n in range(sec.start, sec.end + 1))
    # A Japanese-only file, or English pages outnumbered more than two to one, keeps everything.
    assert not parse(multilingual(("ja",)), all_languages=False).skipped
    assert not parse(multilingual(("en", "ja", "ja", "ja"), 1), all_languages=False).skipped
    lines = split_lines(multilingual(("en", "de", "es", "zh", "ko", "ru"), 1))
    pages = parse("\n".join(lines)).pages
    assert [lang for _s, _e, lang in foreign_pages(lines, pages)] == ["de", "es", "zh", "ko", "ru"]


def test_a_code_only_page_goes_by_the_language_folder_of_its_url() -> None:
    code_only = ("---\ntitle: API\nurl: https://docs.example.dev/{lang}/api\n---\n\n## createClient\n\n"
                 "```ts\nconst client = createClient({{ url }})\n```\n\n")
    text = multilingual(("en", "ja"), 2) + code_only.format(lang="en") + code_only.format(lang="ja")
    doc = parse(text, all_languages=False)
    assert [lang for _s, _e, lang in doc.skipped] == ["ja", "ja", "ja"]
    assert [h.text for h in doc.headings].count("createClient") == 1
    assert [p.url for p in parse(text).pages][-2:] == ["https://docs.example.dev/en/api",
                                                      "https://docs.example.dev/ja/api"]


def test_add_stores_the_whole_file_and_indexes_english(tmp_path: Path, store: Store) -> None:
    text = multilingual()
    path = tmp_path / "llms-full.txt"
    path.write_text(text, encoding="utf-8")
    info = sources.add(store, "ex", str(path))
    total = text.count("\n")
    assert info["lines"] == total and info["skippedLines"] > total / 2
    assert info["skippedLanguages"] == {"fr": 2, "ja": 2}
    assert "lines in other languages (fr, ja) stored but not indexed (--all-languages indexes them)" in info["message"]
    assert not search(store, "bibliothèque", ["ex"])["hits"] and search(store, "zebrafish", ["ex"])["hits"]
    # A citation into a skipped page still returns the stored file's lines.
    lines = text.split("\n")
    ja = next(n for n, line in enumerate(lines, 1) if line.startswith("## インストール方法 1"))
    got = service.get(store, [f"ex:{ja}-{ja + 2}"], "none", 0, 100)["snippets"][0]
    assert got["content"].split("\n") == lines[ja - 1:ja + 2]
    meta = service.list_sources(store)["sources"][0]["metadata"]
    assert meta["skippedLines"] == info["skippedLines"] and meta["allLanguages"] is False
    assert service.inspect(store, "ex")["metadata"]["skippedLanguages"] == {"fr": 2, "ja": 2}
    assert service.validate(store, "ex")["ok"]
    # Unchanged content keeps the choice; asking for all languages indexes them again.
    assert sources.update(store, "ex")["status"] == "unchanged"
    again = sources.update(store, "ex", all_languages=True)
    assert again["status"] == "updated" and again["skippedLines"] == 0 and search(store, "bibliothèque", ["ex"])["hits"]
    assert store.options("ex") == {"allLanguages": True}
    assert sources.update(store, "ex")["status"] == "unchanged"  # the new choice is kept
    sources.remove(store, "ex")
    assert store.options("ex") == {}


def test_cli_all_languages_and_list(tmp_path: Path, data_root: Path) -> None:
    path = tmp_path / "llms-full.txt"
    path.write_text(multilingual(), encoding="utf-8")
    code, out, err = blz("add", "ex", str(path), "--text")
    assert code == 0, err
    skipped = int(out.split("; ")[1].split(" lines")[0].replace(",", ""))
    code, out, _ = blz("list", "--text")
    assert out.strip().endswith(f"({skipped:,} lines in other languages not indexed)")
    code, out, _ = blz("add", "ex2", str(path), "--all-languages", "--json")
    assert code == 0 and json.loads(out)["skippedLines"] == 0
    code, out, _ = blz("search", "bibliothèque", "--json")
    assert {h["alias"] for h in json.loads(out)["hits"]} == {"ex2"}
    code, out, _ = blz("update", "ex", "--all-languages", "--json")
    assert code == 0 and json.loads(out)["results"][0]["status"] == "updated"
    code, out, _ = blz("search", "bibliothèque", "--json")
    assert {h["alias"] for h in json.loads(out)["hits"]} == {"ex", "ex2"}
    code, out, _ = blz("list", "--text")
    assert "other languages" not in out


def _data(res: t.CallToolResult) -> Any:
    assert not res.is_error, res.content
    return json.loads(res.content[0].text)  # type: ignore[union-attr]


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("ignore:.*(removed|deprecated) as of 2026")
def test_mcp_source_add_all_languages(tmp_path: Path, data_root: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "llms-full.txt").write_text(multilingual(), encoding="utf-8")
    params = StdioServerParameters(command=sys.executable, args=["-m", "cairn_servers.blz.cli", "mcp"],
                                   env={"BLZ_DATA_DIR": str(data_root), "BLZ_MCP_FILE_ROOTS": str(docs)})

    async def go() -> tuple[Any, Any, Any]:
        async with Client(params, cache=None) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert tools["source-add"].input_schema["properties"]["allLanguages"]["type"] == "boolean"
            url = str(docs / "llms-full.txt")
            english = _data(await client.call_tool("source-add", {"alias": "en", "url": url, "exact": True}))
            every = _data(await client.call_tool("source-add", {"alias": "all", "url": url, "exact": True,
                                                                "allLanguages": True}))
            listed = _data(await client.call_tool("list-sources", {}))
            return english, every, listed

    english, every, listed = asyncio.run(asyncio.wait_for(go(), 90))
    assert english["skippedLines"] > 0 and "other languages" in english["message"]
    assert every["skippedLines"] == 0 and every["headings"] > english["headings"]
    meta = {s["alias"]: s["metadata"] for s in listed["sources"] if s["kind"] == "installed"}
    assert meta["en"]["skippedLines"] == english["skippedLines"] and meta["all"]["allLanguages"] is True
