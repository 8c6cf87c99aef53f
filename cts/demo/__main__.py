"""``python -m cts.demo``."""

from cts.demo.cli import main

main()
