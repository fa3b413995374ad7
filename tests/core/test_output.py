from __future__ import annotations

import io
import json

import pytest

from cairn.core import output
from cairn.core.errors import InvalidInput

ROWS = [{"id": "a", "n": 1}, {"id": "b,c", "n": 2, "extra": True}]


def test_json_roundtrip() -> None:
    assert json.loads(output.render(ROWS, "json")) == ROWS


def test_jsonl_one_object_per_line() -> None:
    lines = output.render(ROWS, "jsonl").split("\n")
    assert [json.loads(line) for line in lines] == ROWS


def test_csv_quotes_and_union_header() -> None:
    assert output.render(ROWS, "csv") == 'id,n,extra\na,1,\n"b,c",2,true'


def test_tsv_and_md() -> None:
    assert output.render([["x", "y"], [1, "a\tb"]], "tsv") == "x\ty\n1\ta b"
    assert output.render([{"a": "p|q"}], "md") == "| a |\n|---|\n| p\\|q |"


def test_text_nested() -> None:
    assert output.render({"a": 1, "b": [1, 2]}, "text") == "a: 1\nb:\n  - 1\n  - 2"


def test_choose_format(monkeypatch: pytest.MonkeyPatch) -> None:
    piped = io.StringIO()
    assert output.choose_format(None, "X_FMT", piped) == "json"
    monkeypatch.setenv("X_FMT", "jsonl")
    assert output.choose_format(None, "X_FMT", piped) == "jsonl"
    assert output.choose_format("text", "X_FMT", piped) == "text"
    with pytest.raises(InvalidInput, match="Unknown output format 'yaml'"):
        output.choose_format("yaml")
