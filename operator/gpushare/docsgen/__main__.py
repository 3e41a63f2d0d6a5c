"""``python -m gpushare.docsgen``: write docs/reference/; ``--check``: exit 1 when one is stale."""

from __future__ import annotations

import sys

from gpushare.docsgen import stale, write


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        paths = stale()
        for path in paths:
            print(f"{path} is stale: run 'make docs'", file=sys.stderr)
        return 1 if paths else 0
    if argv:
        print("usage: python -m gpushare.docsgen [--check]", file=sys.stderr)
        return 2
    write()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
