"""Human nugget labels of a finished sweep's answers: one row per (instance, arm, nugget, annotator).

A labels file is JSONL (one object per line) or CSV (a header row), with the fields
``instance``, ``arm``, ``nugget``, ``label``, ``annotator`` (``instance_id`` and ``nugget_id``
are read as ``instance`` and ``nugget``). ``arm`` names the answer labelled: ``orig``, or a
clarified arm by its job's condition name (``rules_scope-k1``; :func:`cts.report.agreement.arm_names`
lists a sweep's). ``label`` is full, partial or none (any case). The file holds ids and labels
only, never answer or nugget text.

Every row is checked; all problems are reported at once as ``file:line: field: problem`` in one
:class:`LabelsError`: a missing or empty field, a label that is not full/partial/none, the same
annotator labelling one nugget twice with different labels, a file without any row. A
repeated identical row is kept once.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cts._util.io import write_jsonl
from cts.core.types import LABELS, Label

FIELDS = ("instance", "arm", "nugget", "label", "annotator")
ALIASES = {"instance_id": "instance", "nugget_id": "nugget"}

IMPORT_DIR = "agreement"
"""A sweep's dir of imported labels (``<sweep>/agreement/``): ``labels.jsonl`` and ``weights.json``."""
LABELS_FILE = "labels.jsonl"
WEIGHTS_FILE = "weights.json"

__all__ = [
    "FIELDS",
    "IMPORT_DIR",
    "HumanLabel",
    "LabelsError",
    "import_labels",
    "imported_labels",
    "read_labels",
    "write_labels",
]


class LabelsError(ValueError):
    """A labels file is unusable; ``problems`` lists every ``file:line: field: problem``."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class HumanLabel:
    """One annotator's label of one nugget in one arm's answer to one instance."""

    instance: str
    arm: str
    nugget: str
    label: Label
    annotator: str
    line: int = 0
    """The row's line in the file it was read from (0 when built in code)."""

    @property
    def unit(self) -> tuple[str, str, str]:
        """``(instance, arm, nugget)``: what was labelled."""
        return self.instance, self.arm, self.nugget


def _rows(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line, row)`` per row of a JSONL or CSV file (a row is a dict, or what the JSON line holds)."""
    text = path.read_text(encoding="utf-8-sig")
    if path.suffix.lower() == ".csv":
        reader = csv.DictReader(text.splitlines())
        for row in reader:
            yield reader.line_num, row
        return
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                yield n, json.loads(line)
            except json.JSONDecodeError as e:
                yield n, f"invalid JSON ({e.msg})"


def _parse(row: Any, where: str, line: int) -> tuple[HumanLabel | None, list[str]]:
    if not isinstance(row, Mapping):
        return None, [f"{where}: row: {row if isinstance(row, str) else 'not an object'}"]
    row = {ALIASES.get(str(k), str(k)): v for k, v in row.items()}
    values: dict[str, str] = {}
    problems = []
    for name in FIELDS:
        value = row.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str) or not value.strip():
            problems.append(f"{where}: {name}: missing or empty")
        else:
            values[name] = value.strip()
    label = values.get("label", "").lower()
    if "label" in values and label not in LABELS:
        problems.append(f"{where}: label: {values['label']!r} is not one of {', '.join(LABELS)}")
    if problems:
        return None, problems
    return HumanLabel(values["instance"], values["arm"], values["nugget"], label, values["annotator"], line), []  # type: ignore[arg-type]  # checked above


def read_labels(path: str | Path) -> tuple[HumanLabel, ...]:
    """Read and check a labels file (JSONL, or CSV by its ``.csv`` suffix).

    Raises:
        LabelsError: Every problem found, one ``file:line: field: problem`` each.
        FileNotFoundError: No such file.
    """
    p = Path(path)
    found: dict[tuple[str, str, str, str], HumanLabel] = {}
    problems: list[str] = []
    for line, row in _rows(p):
        where = f"{p}:{line}"
        label, bad = _parse(row, where, line)
        problems += bad
        if label is None:
            continue
        key = (*label.unit, label.annotator)
        if key in found and found[key].label != label.label:
            first = found[key]
            problems.append(
                f"{where}: label: {label.annotator} labelled {label.nugget} of {label.instance}/{label.arm} "
                f"{first.label} on line {first.line} and {label.label} here"
            )
        found.setdefault(key, label)
    if not found and not problems:
        problems.append(f"{p}: no label rows")
    if problems:
        raise LabelsError(problems)
    return tuple(found.values())


def write_labels(labels: Iterable[HumanLabel], path: str | Path) -> Path:
    """Write labels as JSONL (the fields of :data:`FIELDS`), atomically."""
    rows: Sequence[dict[str, Any]] = [{k: v for k, v in asdict(x).items() if k != "line"} for x in labels]
    write_jsonl(rows, path)
    return Path(path)


def import_labels(sweep: str | Path, labels: Sequence[HumanLabel], weights: Mapping[str, Mapping[str, int]]) -> Path:
    """Keep ``labels`` in the sweep, with the gold weights of the instances they label (ids and weights only)."""
    out = Path(sweep) / IMPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    write_labels(labels, out / LABELS_FILE)
    labelled = sorted({x.instance for x in labels})
    (out / WEIGHTS_FILE).write_text(json.dumps({i: dict(weights[i]) for i in labelled}, indent=1), encoding="utf-8")
    return out


def imported_labels(sweep: str | Path) -> tuple[tuple[HumanLabel, ...], dict[str, dict[str, int]]] | None:
    """The labels and weights :func:`import_labels` kept in a sweep (None when it holds none)."""
    out = Path(sweep) / IMPORT_DIR
    if not (out / LABELS_FILE).is_file() or not (out / WEIGHTS_FILE).is_file():
        return None
    weights = json.loads((out / WEIGHTS_FILE).read_text(encoding="utf-8"))
    return read_labels(out / LABELS_FILE), {i: {n: int(w) for n, w in ws.items()} for i, ws in weights.items()}
