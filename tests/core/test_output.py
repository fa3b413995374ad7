from __future__ import annotations

import io
import json

import pytest

from cairn_servers.core import output
from cairn_servers.core.errors import InvalidInput

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


def test_one_format_variable_pattern_and_the_older_name(monkeypatch: pytest.MonkeyPatch) -> None:
    assert [output.format_env(c) for c in ("blz", "ctx", "brk")] == [
        "BLZ_OUTPUT_FORMAT", "CTX_OUTPUT_FORMAT", "BRK_OUTPUT_FORMAT"]
    piped = io.StringIO()
    for name in ("BRK_OUTPUT_FORMAT", "BRK_FORMAT"):
        monkeypatch.delenv(name, raising=False)
    assert output.choose_format(None, "BRK_OUTPUT_FORMAT", piped) == "json"
    monkeypatch.setenv("BRK_FORMAT", "csv")  # the older name still works
    assert output.choose_format(None, "BRK_OUTPUT_FORMAT", piped) == "csv"
    monkeypatch.setenv("BRK_OUTPUT_FORMAT", "")  # empty is unset: the older name is read
    assert output.env_format("BRK_OUTPUT_FORMAT") == "csv"
    monkeypatch.setenv("BRK_OUTPUT_FORMAT", "md")  # the new name wins
    assert output.choose_format(None, "BRK_OUTPUT_FORMAT", piped) == "md"
    assert output.choose_format("tsv", "BRK_OUTPUT_FORMAT", piped) == "tsv"  # the flag wins over both
    monkeypatch.setenv("BRK_OUTPUT_FORMAT", "yaml")
    with pytest.raises(InvalidInput, match="Unknown output format 'yaml'"):
        output.choose_format(None, "BRK_OUTPUT_FORMAT", piped)


def test_render_columns_is_the_column_major_table() -> None:
    cols: list[list[object]] = [[1, 2, None], ["2009-01-03", "2009-01-09", "2009-01-10"]]
    assert output.render_columns(["n", "date"], cols, "csv") == "n,date\n1,2009-01-03\n2,2009-01-09\n,2009-01-10"
    assert output.render_columns(["n", "date"], cols, "tsv").split("\n")[1] == "1\t2009-01-03"
    assert output.render_columns(["n"], [[5]], "md") == "| n |\n|---|\n| 5 |"
    assert output.render_columns(["n"], [[]], "csv") == "n\n"
    with pytest.raises(ValueError):
        output.render_columns(["n"], [[1]], "json")


def test_render_takes_dataclasses_without_importing_dataclasses_for_plain_data() -> None:
    import subprocess
    import sys

    code = ("import sys; from cairn_servers.core import output; "
            "print(output.render({'a': [1, {'b': None}]}, 'json')); "
            "assert 'dataclasses' not in sys.modules and 'typing' not in sys.modules, sorted(sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"a": [1, {"b": None}]}

    from dataclasses import dataclass

    @dataclass
    class Row:
        id: str
        n: int

    assert json.loads(output.render([Row("a", 1)], "json")) == [{"id": "a", "n": 1}]
    assert output.render(Row("a", 1), "csv") == "id,n\na,1"


def test_a_cell_holding_a_list_of_names_reads_as_a_list_in_tables() -> None:
    """`brk ids --search x --format csv` showed an id's indexes as a JSON array in one cell."""
    rows = [{"id": "close", "indexes": ["dateindex", "height"], "nested": [{"a": 1}], "flags": [True]}]
    assert output.render(rows, "csv").splitlines()[1] == 'close,"dateindex, height","[{""a"": 1}]",[true]'
    assert "| close | dateindex, height |" in output.render(rows, "md")
    assert json.loads(output.render(rows, "json"))[0]["indexes"] == ["dateindex", "height"]  # JSON keeps the array
