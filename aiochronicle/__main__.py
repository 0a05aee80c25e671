"""``python -m aiochronicle``: the command line (see :mod:`aiochronicle._cli`)."""

from ._cli import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
