"""Calendar indexes anchored at the genesis day, and the height -> period mappings built on them.

* dateindex 0 = 2009-01-03 (the genesis block's day), 1 = 2009-01-09 (the next block's day), then +1
  per day; any day before 2009-01-09 maps to 0.
* weekindex: weeks starting on Monday, 0 = the week of 2008-12-29 (which holds 2009-01-03).
* monthindex, quarterindex, semesterindex, yearindex: counted from January 2009.
* decadeindex: 0 = 2000-2009, 1 = 2010-2019, ...
* difficultyepoch = height // 2016, halvingepoch = height // 210000.

A height's date comes from the running maximum of block timestamps (block times may go backwards
by up to two hours), so every mapping from height is monotonic and each period is one contiguous
run of heights. This holds on every network: the indexes are absolute calendar positions.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

GENESIS_DAY = dt.date(2009, 1, 3)
DAY_ONE = dt.date(2009, 1, 9)
WEEK_ZERO = dt.date(2008, 12, 29)
_EPOCH = dt.date(1970, 1, 1)
_DAY_ONE_NUM = (DAY_ONE - _EPOCH).days  # days since 1970 of dateindex 1
_WEEK_ZERO_NUM = (WEEK_ZERO - _EPOCH).days

DATE_INDEXES = ("dateindex", "weekindex", "monthindex", "quarterindex", "semesterindex", "yearindex",
                "decadeindex")
HEIGHT_INDEXES = (*DATE_INDEXES, "difficultyepoch", "halvingepoch")  # every period of heights


def dateindex_of_day(day_num: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 -> dateindex (0 for anything before 2009-01-09)."""
    import numpy as np

    return np.maximum(day_num.astype(np.int64) - _DAY_ONE_NUM + 1, 0)


def date_of_dateindex(i: int) -> dt.date:
    return GENESIS_DAY if i <= 0 else DAY_ONE + dt.timedelta(days=i - 1)


def dateindex_of_date(day: dt.date) -> int:
    return 0 if day < DAY_ONE else (day - DAY_ONE).days + 1


def day_nums(dateindex: np.ndarray) -> np.ndarray:
    """dateindex -> days since 1970 (dateindex 0 -> 2009-01-03)."""
    import numpy as np

    di = dateindex.astype(np.int64)
    return np.where(di == 0, (GENESIS_DAY - _EPOCH).days, di - 1 + _DAY_ONE_NUM)


def period_of_dateindex(index: str, dateindex: np.ndarray) -> np.ndarray:
    """dateindex -> the period number of a date-based index."""
    import numpy as np

    if index == "dateindex":
        return dateindex.astype(np.int64)
    days = day_nums(dateindex)
    if index == "weekindex":
        return (days - _WEEK_ZERO_NUM) // 7
    d64 = days.astype("datetime64[D]")
    years = d64.astype("datetime64[Y]").astype(np.int64) + 1970
    months = d64.astype("datetime64[M]").astype(np.int64) % 12  # 0-based
    y = years - 2009
    if index == "monthindex":
        return y * 12 + months
    if index == "quarterindex":
        return y * 4 + months // 3
    if index == "semesterindex":
        return y * 2 + months // 6
    if index == "yearindex":
        return y
    if index == "decadeindex":
        return (years - 2000) // 10
    raise ValueError(f"not a date index: {index}")


def first_day_of_period(index: str, period: np.ndarray) -> np.ndarray:
    """The first calendar day (days since 1970) of each period of a date-based index."""
    import numpy as np

    p = period.astype(np.int64)
    if index == "dateindex":
        return day_nums(p)
    if index == "weekindex":
        return _WEEK_ZERO_NUM + 7 * p
    if index == "decadeindex":
        months = ((2000 + 10 * p) - 1970) * 12
    else:
        per_year = {"monthindex": 12, "quarterindex": 4, "semesterindex": 2, "yearindex": 1}[index]
        months = (2009 - 1970) * 12 + (p // per_year) * 12 + (p % per_year) * (12 // per_year)
    return months.astype("datetime64[M]").astype("datetime64[D]").astype(np.int64)


def format_days(days: np.ndarray) -> list[str]:
    """Days since 1970 as ``YYYY-MM-DD`` strings."""
    return [str(d) for d in days.astype("datetime64[D]")]


def period_of_height(index: str, heights: np.ndarray, dateindex: np.ndarray) -> np.ndarray:
    """Height -> period for any height-based index (``dateindex`` = the heights' dateindexes)."""
    import numpy as np

    if index == "difficultyepoch":
        return heights.astype(np.int64) // 2016
    if index == "halvingepoch":
        return heights.astype(np.int64) // 210_000
    return period_of_dateindex(index, dateindex)
