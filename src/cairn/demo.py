"""`make demo`: show each server answering real requests on data the project ships."""

from __future__ import annotations

import sys


def main() -> int:
    print("cairn demo: servers are not built yet", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
