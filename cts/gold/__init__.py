"""Gold: the static nuggets of each ``fused_query`` (paper section 4.2), built once, then read-only.

The gold file format (:mod:`cts.gold.archive`: write, validate, load; :mod:`cts.gold.file`:
read on demand) and the building of it (:mod:`cts.gold.build`, run by the task ``build_gold``).

Stage 1 runs the search backend once on each intent query ``q*`` and archives
its answer and evidence trace; stage 2 has an :class:`~cts.core.types.Extractor`
turn ``q*``, the answer and the evidence into weighted nuggets that cite
evidence ids. Gold that does not validate is reported as a failure and never
written; :func:`load_gold` refuses such a file instead of rebuilding it.

Archive layout written by :func:`build_gold_archive` (files are chmod 0444)::

    gold.jsonl        one validated Gold per line (what the dataset loader reads)
    gold_runs.jsonl   per instance: id, fused_query, answer, rule, end reason, all evidence, trace
    failures.jsonl    per failed instance: id, reason
    manifest.json     counts, provenance, sha256 of each file
"""

from cts.gold.archive import (
    FAILURES_FILE,
    GOLD_FILE,
    GoldError,
    GoldReport,
    failure_summary,
    gold_to_dict,
    load_gold,
    restore_nugget_ids,
    validate_gold,
    write_gold,
)
from cts.gold.build import GoldArchive, build_gold, build_gold_archive
from cts.gold.file import GoldFile, open_gold

__all__ = [
    "GOLD_FILE",
    "GoldArchive",
    "GoldError",
    "GoldFile",
    "FAILURES_FILE",
    "GoldReport",
    "failure_summary",
    "build_gold",
    "build_gold_archive",
    "gold_to_dict",
    "load_gold",
    "open_gold",
    "restore_nugget_ids",
    "validate_gold",
    "write_gold",
]
