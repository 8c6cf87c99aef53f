"""``python -m cts.compose.schema [PAGE]``: write what is derived from the schemas into the repo.

The key reference (default docs/reference.md) and, in the yaml under ``conf/`` beside it, the
default of every key a file lacks.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cts.compose.schema._table import BEGIN, END, with_reference
from cts.compose.schema._yaml import write_missing
from cts.core.errors import CtsError, run_cli


def main() -> int:
    """Rewrite the key reference of docs/reference.md and write the yaml defaults the conf files lack."""
    guide = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/reference.md")
    text = guide.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        raise CtsError(f"{guide}: no {BEGIN} ... {END} block to write the key reference into")
    guide.write_text(with_reference(text), encoding="utf-8")
    print(f"{guide}: key reference written")
    for line in write_missing(guide.resolve().parent.parent / "conf"):
        print(f"{line}: default written")
    return 0


if __name__ == "__main__":
    run_cli(main)
