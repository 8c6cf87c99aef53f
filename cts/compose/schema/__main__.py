"""``python -m cts.compose.schema [GUIDE]``: rewrite the key reference (default docs/reference.md)."""

from __future__ import annotations

import sys
from pathlib import Path

from cts.compose.schema._table import BEGIN, END, with_reference
from cts.core.errors import CtsError, run_cli


def main() -> int:
    """Rewrite the key reference of docs/reference.md from the schemas."""
    guide = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/reference.md")
    text = guide.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        raise CtsError(f"{guide}: no {BEGIN} ... {END} block to write the key reference into")
    guide.write_text(with_reference(text), encoding="utf-8")
    print(f"{guide}: key reference written")
    return 0


if __name__ == "__main__":
    run_cli(main)
