"""Id search: every id has a definition; twenty plain-English phrasings (tests/brk/id_questions.json)
find their id in the top 3 over the catalogue of a real store with prices (mainnet 0..589); the
abbreviation table both ways; empty and garbage queries; the HTTP route, the MCP tool (official SDK client
over Streamable HTTP), `brk ids --search` and ``/llms.txt`` on a real server; the search's speed."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cairn_servers.brk import prices
from cairn_servers.brk.catalog import INDEXES, ids
from cairn_servers.brk.cli import main
from cairn_servers.brk.compute import compute
from cairn_servers.brk.definitions import definition, undefined
from cairn_servers.brk.families import FAMILIES
from cairn_servers.brk.http import create_app, openapi
from cairn_servers.brk.idsearch import EQUIVALENTS, IdIndex, concepts, stem, words
from cairn_servers.brk.interface import Interface
from cairn_servers.brk.ops import OPS

from ..mcp._http import serving
from .conftest import mainnet_store

pytestmark = pytest.mark.filterwarnings("ignore:.*(removed|deprecated) as of 2026")
QUESTIONS = Path(__file__).resolve().parent / "id_questions.json"
SEED_TOOLS = ["get_accepted_indexes", "get_index_count", "get_index_to_vecids", "get_indexes", "get_vec_count",
              "get_vecid_count", "get_vecid_to_indexes", "get_vecids", "get_vecs", "get_version"]
EXPLORER_TOOLS = ["get_block", "get_tx", "get_address", "get_address_utxos"]  # the block explorer's
# Mainnet 0..589 spans 2009-01-03 .. 2009-01-15: a price for each day, so the realized ids exist.
CSV = "date,price\n" + "".join(f"2009-01-{d:02d},{0.5 + d / 100:.2f}\n" for d in range(1, 21))


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("brk_idsearch")
    mainnet_store(base, addresses=True)
    (base / "prices.csv").write_text(CSV)
    prices.import_csv(base / "out", base / "prices.csv")
    compute(base / "out", blocks_dir=base / "blocks")
    return base / "out"


@pytest.fixture(scope="module")
def iface(out: Path) -> Interface:
    return Interface(out)


@pytest.fixture(scope="module")
def base_url(iface: Interface) -> Iterator[str]:
    with serving(create_app(iface)) as url:
        yield url.removesuffix("/mcp")


def search(iface: Interface, **args: Any) -> Any:
    return OPS["search_vecids"].call(iface, args, "http")


def _cli(out: Path, *argv: str) -> tuple[int, str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main([*argv, "--out", str(out)])
    return code, stdout.getvalue(), stderr.getvalue()


# -- definitions and words ----------------------------------------------------------------------------

def test_every_id_has_a_definition() -> None:
    """A new id in the catalog fails here until brk.definitions explains it."""
    for priced in (False, True):
        every = {vec_id for name in INDEXES for vec_id in ids(name, priced)}
        assert undefined(sorted(every)) == [], priced
    assert definition("fee_btc_sum") == "transaction fees paid to miners, in BTC (bitcoin); total per period"
    assert definition("supply_age_1y_2y") == ("supply by coin age, coins last moved 1 year to 2 years ago "
                                              "(HODL wave), in sats")
    assert definition("address_count_balance_0_01_0_1") == "number of addresses with a balance of 0.01 to 0.1 BTC"
    assert definition("address_count_balance_gt_10k") == "number of addresses with a balance of 10,000 BTC or more"
    assert definition("nope_avg") is None and definition("supply_age_9q") is None


def test_words_are_normalized_alike_on_both_sides() -> None:
    assert [stem(w) for w in ("addresses", "transactions", "mined", "mining", "mine", "realized", "emptied",
                              "empty", "fees", "loss", "hopping")] == [
        "address", "transaction", "mine", "mine", "mine", "realize", "empti", "empti", "fee", "loss", "hop"]
    assert words("The supply_age_gt_10y of coins") == ["suppli", "age", "gt", "10y", "10", "y", "coin"]
    # A phrase of the table gives its short form to each of its words; a synonym stands for the other.
    long_term = concepts("long term holder")
    assert all("lth" in group for group in long_term) and len(long_term) == 3
    assert {"avg", "average", "mean"} <= concepts("mean")[0] and {"avg", "average", "mean"} <= concepts("avg")[0]
    # A phrase's words are not given to its short form: "utxo" does not match every "output".
    assert concepts("utxo") == [{"utxo"}]
    for short, phrases in EQUIVALENTS.items():  # every phrase of the table leads to its short form
        name = " ".join(words(short))
        for phrase in phrases:
            assert all(name in group for group in concepts(phrase)), (short, phrase)


def test_the_abbreviations_of_cohort_ids() -> None:
    """"long term holder realized price" finds lth_realized_price: the catalogue's cohort ids
    (cairn_servers.brk.cohorts) with their definitions, the abbreviation table making the match; a cohort's
    name does not outrank the whole market's id ("profit ratio of spent outputs" is sopr, not
    empty_outputs_sopr)."""
    every = {vec_id for name in INDEXES for vec_id in ids(name, True)}
    assert {"lth_realized_price", "sth_realized_price", "lth_supply", "sth_supply", "lth_sopr"} <= every
    index = IdIndex({v: definition(v) or "" for v in every})
    assert index.search("long term holder realized price")[0] == "lth_realized_price"
    assert index.search("realized price of short-term holders")[0] == "sth_realized_price"
    assert index.search("spent output profit ratio of long term holders")[0] == "lth_sopr"
    assert index.search("profit ratio of spent outputs")[0] == "sopr"
    found = index.search("lth")
    assert found and all(v.startswith("lth_") for v in found)
    # A page needs only its first ids in order: the same order as the full ranking.
    full = index.search("realized price")
    assert index.search("realized price", want=25)[:25] == full[:25]


# -- the twenty phrasings -----------------------------------------------------------------------------

def test_twenty_phrasings_find_their_id_in_the_top_3(iface: Interface) -> None:
    questions = json.loads(QUESTIONS.read_text())
    assert len(questions) == 20 and len({q["id"] for q in questions}) == 20
    served = set(iface.id_indexes())
    missed = []
    for q in questions:
        assert q["id"] in served, q  # the intended id is one the store serves
        assert q["id"] not in q["question"].replace(" ", "_"), q  # a description, not the id
        top = [r["id"] for r in search(iface, q=q["question"], limit=3)]
        if q["id"] not in top:
            missed.append((q["question"], q["id"], top))
    assert missed == []


def test_results_carry_the_definition_and_indexes(iface: Interface) -> None:
    first = search(iface, q="realized price", limit=1)
    assert first == [{"id": "realized_price", "definition": definition("realized_price"),
                      "indexes": iface.get_vecid_to_indexes("realized_price")}]
    # pages of `limit`, in the same order as one longer page
    four = search(iface, q="fee rate", limit=4)
    assert search(iface, q="fee rate", limit=2, page=1) == four[2:] and len(four) == 4
    # index: only the ids on that index (an accepted name works), best first
    on_tx = search(iface, q="fee rate", index="tx")
    assert [r["id"] for r in on_tx][:1] == ["fee_rate"] and all("txindex" in r["indexes"] for r in on_tx)


# -- empty, garbage, limits: the same on every surface ------------------------------------------------

BAD: list[tuple[dict[str, Any], int, str | None]] = [({"q": ""}, 400, "Nothing to search for in '': give words describing the data, e.g. 'realized price' or "
                         "'fee rate median'."),
       ({"q": "  the of  "}, 400, "Nothing to search for in '  the of  ': give words describing the data, e.g. "
                                  "'realized price' or 'fee rate median'."),
       ({"q": "fee", "limit": 0}, 400, "limit must be 1 or more, got 0."),
       ({"q": "fee", "limit": 101}, 400, "limit must be 100 or less, got 101."),
       ({"q": "fee", "limit": "x"}, 400, "limit must be an integer, got 'x'."),
       ({"q": "fee", "page": -1}, 400, "page must be 0 or more, got -1."),
       ({"q": "x" * 501}, 400, "q is 501 characters long; the limit is 500. Use fewer words."),
       ({"q": "fee", "index": "nope"}, 404, None)]


def test_empty_and_garbage_queries_over_http_mcp_and_cli(out: Path, base_url: str) -> None:
    assert search(Interface(out), q="xyzzy qwerty ../../etc/passwd") == []  # no match: an empty list
    mcp_calls: list[dict[str, Any]] = []
    with httpx.Client(base_url=base_url) as client:
        r = client.get("/api/vecs/search", params={"q": "xyzzy qwerty"})
        assert r.status_code == 200 and r.json() == [] and r.headers["etag"]
        r = client.get("/api/vecs/search")
        assert r.status_code == 400 and r.json()["error"]["message"] == \
            "Invalid parameter for 'search_vecids': q: is required"
        for args, status, message in BAD:
            r = client.get("/api/vecs/search", params=args)
            assert r.status_code == status, (args, r.text)
            got = r.json()["error"]["message"]
            assert message is None or got == message, got
            code, stdout, stderr = _cli(out, "ids", "--search", str(args["q"]),
                                        *(x for k in ("limit", "page", "index") if k in args
                                          for x in (f"--{k}", str(args[k]))))
            assert (code, stdout, stderr) == (2 if status == 400 else 3, "", f"brk: error: {got}\n"), args
            mcp_calls.append({**args, "_message": got})
        code, stdout, stderr = _cli(out, "ids", "--search", "xyzzy qwerty", "--format", "json")
        assert (code, json.loads(stdout), stderr) == (0, [], "")

    async def over_mcp() -> None:
        from mcp import Client

        async with Client(f"{base_url}/mcp", cache=None) as client:
            res = await client.call_tool("search_vecids", {"q": "xyzzy qwerty"})
            assert not res.is_error and json.loads(res.content[0].text) == []  # type: ignore[union-attr]
            for call in mcp_calls:
                message = call.pop("_message")
                res = await client.call_tool("search_vecids", call)
                assert res.is_error and res.content[0].text == message, call  # type: ignore[union-attr]

    asyncio.run(asyncio.wait_for(over_mcp(), 60))


def test_any_text_is_an_answer_or_a_clear_refusal(iface: Interface) -> None:
    from hypothesis import example, given, settings
    from hypothesis import strategies as st

    from cairn_servers.core.errors import InvalidInput

    @settings(max_examples=200, deadline=None, derandomize=True, database=None)
    @given(st.text(max_size=80))
    @example("\ud800 fee")  # a lone surrogate
    @example("10y 1k p2tr_count ____ ---")
    def check(query: str) -> None:
        try:
            found = search(iface, q=query, limit=5)
        except InvalidInput as exc:
            if "lone UTF-16 surrogate" in exc.message:  # refused by the schema, as every text parameter is
                assert any("\ud800" <= c <= "\udfff" for c in query)
                return
            # no word left: nothing but small words, punctuation, spaces
            assert exc.message.startswith("Nothing to search for in "), exc.message
            assert concepts(query) == []
            return
        assert len(found) <= 5 and all(r["id"] in iface.id_indexes() for r in found)

    check()


# -- the surfaces ----------------------------------------------------------------------------------------

def test_http_route_and_openapi(base_url: str, iface: Interface) -> None:
    with httpx.Client(base_url=base_url) as client:
        r = client.get("/api/vecs/search", params={"q": "coins unmoved for more than 10 years", "limit": "2"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"
        assert [x["id"] for x in r.json()] == [x["id"] for x in search(iface, q="coins unmoved for more than 10 years",
                                                                      limit=2)]
        assert r.json()[0]["id"] == "supply_age_gt_10y"
        again = client.get("/api/vecs/search", params={"q": "coins unmoved for more than 10 years", "limit": "2"},
                           headers={"If-None-Match": r.headers["etag"]})
        assert again.status_code == 304
        r = client.get("/api/vecs/search", params={"q": "median fee rate", "i": "week", "limit": 1})
        assert r.json()[0]["id"] == "fee_rate_median"
    entry = openapi()["paths"]["/api/vecs/search"]["get"]
    assert [p["name"] for p in entry["parameters"]] == ["q", "index", "i", "limit", "page"]
    assert entry["parameters"][0]["required"] is True


def test_mcp_tool_beside_the_ten_seed_tools(base_url: str) -> None:
    async def run() -> None:
        from mcp import Client

        async with Client(f"{base_url}/mcp", cache=None) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert sorted(tools) == sorted([*SEED_TOOLS, "search_vecids", *EXPLORER_TOOLS, "get_urpd"])
            schema = tools["search_vecids"].input_schema
            assert schema["required"] == ["q"] and set(schema["properties"]) == {"q", "index", "i", "limit", "page"}
            assert client.instructions is not None and "search_vecids" in client.instructions
            res = await client.call_tool("search_vecids", {"q": "ratio of market value to realized value",
                                                           "limit": 3})
            assert not res.is_error
            assert json.loads(res.content[0].text)[0]["id"] == "mvrv"  # type: ignore[union-attr]

    asyncio.run(asyncio.wait_for(run(), 60))


def test_cli_ids_search(out: Path, iface: Interface) -> None:
    code, stdout, stderr = _cli(out, "ids", "--search", "newly issued coins in each block", "--limit", "3",
                                "--format", "json")
    assert code == 0 and stderr == ""
    assert json.loads(stdout) == search(iface, q="newly issued coins in each block", limit=3)
    assert json.loads(stdout)[0]["id"] == "subsidy"
    code, stdout, stderr = _cli(out, "ids", "--limit", "3")
    assert (code, stdout, stderr) == (2, "", "brk: error: --limit goes with --search; list every id with --page.\n")
    help_text = io.StringIO()
    with contextlib.redirect_stdout(help_text), pytest.raises(SystemExit):
        main(["ids", "--help"])
    assert "--search WORDS" in help_text.getvalue() and "--limit N" in help_text.getvalue()


def test_llms_txt(base_url: str, iface: Interface) -> None:
    with httpx.Client(base_url=base_url) as client:
        r = client.get("/llms.txt")
        assert r.status_code == 200 and r.headers["content-type"] == "text/markdown; charset=utf-8"
        assert client.get("/llms.txt", headers={"If-None-Match": r.headers["etag"]}).status_code == 304
    text = r.text
    assert text.startswith("# brk\n\n> ")
    lines = text.splitlines()
    for path, methods in openapi()["paths"].items():  # every route, from the declarations
        for method in methods:
            assert any(line.startswith(f"- [{method.upper()} {path}](") for line in lines), (method, path)
    for op in OPS.on("mcp"):
        assert any(line.startswith(f"- `{op.mcp}(") for line in lines), op.mcp
    for name, examples, _ in FAMILIES:
        assert any(line.startswith(f"- {name}: `{examples[0]}`") for line in lines), name
    catalogue = iface.id_indexes()
    listed = [line.split("`")[1] for line in lines[lines.index(next(x for x in lines if x.startswith("## Ids"))):]
              if line.startswith("- `")]
    assert f"## Ids ({len(catalogue):,} in this store" in text
    assert "realized_price" in listed and "realized_price_avg" not in listed and "fee_btc_cumulative" not in listed
    assert set(listed) <= set(catalogue) and len(listed) > 150
    assert catalogue["mvrv"][0] == "height" and len(catalogue["mvrv"]) == 8
    assert f"- `mvrv` (height, every date index): {definition('mvrv')}" in lines
    assert f"- `fee_rate` (height, every period, txindex): {definition('fee_rate')}" in lines
    assert f"- `txid` (txindex): {definition('txid')}" in lines


def test_search_speed(iface: Interface) -> None:
    """p50 of a search over the whole catalogue (1,602 ids), the index already built: well under 10 ms."""
    questions = [q["question"] for q in json.loads(QUESTIONS.read_text())]
    search(iface, q="warm up")
    times = []
    for question in questions * 3:
        start = time.perf_counter()
        search(iface, q=question)
        times.append(time.perf_counter() - start)
    p50 = statistics.median(times) * 1000
    print(f"search_vecids p50 {p50:.2f} ms over {len(iface.id_indexes())} ids")
    assert p50 < 10, p50
