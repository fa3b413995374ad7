"""The families of vec ids, described once for discovery: the MCP instructions (``cairn_servers.brk.tools``),
``brk ids --help`` and the web page's list (tested to agree with the catalog and with each other).

Standard library only and no imports: ``brk mcp`` builds its instructions from this on start-up.
"""

from __future__ import annotations

# (family, example ids, what it holds). Every example id exists on height and on every date index
# (the dollar ones once prices are stored).
FAMILIES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("blocks", ("block_count", "block_size", "tx_count", "fee_rate", "hash_rate", "difficulty"),
     "block statistics and their _sum/_avg/_min/_max/_median/_p10.._p90/_cumulative per period"),
    ("supply and the UTXO set", ("supply_btc", "utxo_count", "supply_p2tr", "utxo_count_p2wpkh",
                                 "unspendable_supply"),
     "supply and UTXO count in all and by output type: supply_<type>, utxo_count_<type>"),
    ("coin age", ("coindays_destroyed", "coinblocks_destroyed", "liveliness", "vaultedness"),
     "coin-days and coin-blocks destroyed and created, with _cumulative sums"),
    ("HODL waves", ("supply_age_lt_1d", "supply_age_1y_2y", "supply_age_gt_10y"),
     "spendable supply by age band, lt_1d .. gt_10y, summing to supply"),
    ("addresses", ("address_count", "address_count_p2tr", "new_address_count", "empty_address_count",
                   "address_count_balance_1_10"),
     "addresses holding coins, by type and by balance band in BTC, new and emptied addresses"),
    ("prices", ("close", "market_cap", "supply_usd"),
     "daily BTC/USD open/high/low/close and dollar values, after `brk price import` or `brk price fetch` "
     "(`brk run` and `brk index --watch` fetch them by themselves when online)"),
    ("realized value", ("realized_cap", "realized_price", "mvrv", "nupl", "sopr", "supply_in_profit",
                        "supply_in_loss", "supply_breakeven"),
     "coins valued at the close of their creation day, supply in profit, in loss and at breakeven; needs prices"),
    ("market", ("price_ath", "drawdown", "days_since_ath", "price_1w_sma", "price_1w_ema", "price_1d_return",
                "volatility_1w"),
     "from the daily close: all-time high, drawdown, moving averages price_<1w..200d..4y>_sma and _ema, "
     "mayer_multiple, price_<1d..1y..10y>_return, price_<2y|4y|10y>_cagr, volatility_<1w|1m|1y>, "
     "dca_cost_basis_<1w..10y>, dca_return_<1w..10y>; needs prices"),
    ("UTXO cohorts", ("sth_supply_btc", "lth_supply_btc", "sth_realized_price", "sth_mvrv",
                      "utxos_1d_to_1w_old_supply_btc", "utxos_1btc_to_10btc_supply_btc", "p2pkh_supply_btc",
                      "epoch_0_realized_price", "class_2009_supply_in_profit"),
     "<cohort>_<metric>: cohorts sth, lth (150 days), age bands utxos_under_1h_old .. utxos_<1d>_to_<1w>_old .. "
     "utxos_over_15y_old and utxos_over_<age>_old / utxos_under_<age>_old, amount bands utxos_0sats .. "
     "utxos_<1btc>_to_<10btc> .. utxos_over_100k_btc and utxos_over_<amount> / utxos_under_<amount>, output types "
     "p2pkh .. p2tr, empty_outputs, unknown_outputs, halving epochs epoch_0 .. epoch_4, creation years class_2009 .. "
     "class_2028; metrics supply (_btc, _usd), utxo_count, realized_cap, realized_price, realized_profit, "
     "realized_loss, net_realized_pnl, value_created, value_destroyed, sopr, unrealized_profit, unrealized_loss, "
     "supply_in_profit, supply_in_loss, mvrv, nupl, and BRK's ratios (sell_side_risk_ratio, realized_price_ratio, "
     "supply_rel_to_circulating_supply, ..._rel_to_market_cap, ..._rel_to_realized_cap); all but supply, utxo_count and "
     "supply_rel_to_circulating_supply need prices"),
    ("address cohorts", ("addrs_1btc_to_10btc_supply_btc", "addrs_1btc_to_10btc_addr_count", "p2pkh_addrs_supply_btc",
                         "p2pk65_addrs_realized_price", "addrs_over_1btc_nupl", "p2pk65_addrs_mvrv"),
     "<addr_cohort>_<metric>: funded addresses by balance band addrs_0sats .. addrs_<1btc>_to_<10btc> .. "
     "addrs_over_100k_btc and addrs_over_<amount> / addrs_under_<amount>, by type p2pk65_addrs .. p2tr_addrs, "
     "p2a_addrs; metrics supply (_btc, _usd), addr_count, realized_cap, realized_price, "
     "realized_profit, realized_loss, net_realized_pnl, value_created, value_destroyed, sopr, unrealized_profit, "
     "unrealized_loss, supply_in_profit, supply_in_loss, mvrv, nupl; all but supply and addr_count need prices"),
    ("mining", ("subsidy_btc", "fees_btc", "coinbase_btc", "pool_block_count_foundryusa", "foundryusa_dominance_1m",
                "hash_value_ths", "annualized_issuance_btc"),
     "miner revenue and pools: subsidy, fees, coinbase (sats, _btc, _usd), pool_block_count_<pool> "
     "(= <pool>_blocks_mined) and _cumulative, <pool>_dominance and _1w/_1m/_1y for every pool of the mempool.space "
     "list "
     "(unknown when none matches), hash_price_ths/_phs, hash_value_ths/_phs, inflation_rate, annualized_issuance, "
     "puell_multiple; the dollar ones need prices"),
)


def sentence() -> str:
    """One sentence per family, for the MCP instructions."""
    return " ".join(f"{name[0].upper()}{name[1:]}: {', '.join(ids)}; {what}." for name, ids, what in FAMILIES)


def help_text() -> str:
    """The families as an indented list, for ``brk ids --help``."""
    lines = ["families of ids (examples; every one is on height and on every date index):"]
    for name, ids, what in FAMILIES:
        lines.append(f"  {name}: {', '.join(ids)}")
        lines.append(f"      {what}")
    return "\n".join(lines)
