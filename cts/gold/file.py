"""The gold file, read on demand: every line validated at load, one ``Gold`` parsed per access.

A dataset of tens of thousands of instances would otherwise keep every
nugget and evidence snippet in memory for the whole job (about 9 KB per
instance of parsed objects), while a job needs one instance's gold at a time.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from cts.core.types import Gold
from cts.gold.archive import GoldError, parse_gold_line, scan_gold


class GoldFile(Mapping[str, Gold]):
    """Read-only gold by instance id, parsed from ``path`` on each access.

    Built by :func:`open_gold`, which validated every line; an access re-checks
    that the file is the one validated (size and mtime), so an edit during a job
    is an error, not silently other gold.
    """

    def __init__(self, path: Path, spans: Mapping[str, tuple[int, int]], stamp: tuple[int, int]) -> None:
        self._path = path
        self._spans = dict(spans)
        self._stamp = stamp

    def __getitem__(self, instance_id: str) -> Gold:
        start, size = self._spans[instance_id]
        if _stamp(self._path) != self._stamp:
            raise GoldError([f"{self._path}: changed after it was loaded; rerun the job"])
        with self._path.open("rb") as f:
            f.seek(start)
            gold, problems = parse_gold_line(f.read(size))
        assert gold is not None and not problems  # validated by open_gold
        return gold

    def __contains__(self, instance_id: object) -> bool:
        # Mapping's own __contains__ would parse the instance's gold line (``in`` is asked per instance at load).
        return instance_id in self._spans

    def __iter__(self) -> Iterator[str]:
        return iter(self._spans)

    def __len__(self) -> int:
        return len(self._spans)

    def restrict(self, ids: Iterable[str]) -> GoldFile:
        """The same file, with only ``ids`` (each must be present)."""
        return GoldFile(self._path, {i: self._spans[i] for i in ids}, self._stamp)


def _stamp(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def open_gold(path: str | Path) -> GoldFile:
    """Validate a gold JSONL file like :func:`cts.gold.load_gold`, keeping only line offsets.

    Raises:
        FileNotFoundError: If the file does not exist.
        GoldError: Listing every bad line as ``file:line: problem``.
    """
    p = Path(path)
    spans = {gold.instance_id: (start, length) for gold, start, length in scan_gold(p)}
    stamp = _stamp(p)
    return GoldFile(p, spans, stamp)
