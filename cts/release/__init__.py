"""The paper's released benchmark as downloaded: its outputs imported as runs, cts runs exported in its layout.

``python -m cts.release inspect|import|export`` (:mod:`cts.release.cli`); the dataset itself is
``dataset=hard518`` (:mod:`cts.data.release`), its gold read through :mod:`cts.gold.mapping`, and
any answers are scored against it by ``task=score_answers`` (:mod:`cts.tasks.score_answers`).
"""

from cts.release.describe import inspect_release
from cts.release.export import Exported, export_runs
from cts.release.importer import ImportedJob, ImportRefused, import_release
from cts.release.outputs import OUTPUT_NAMES, Output, OutputLayoutError, OutputScan, scan_outputs, system_and_k

__all__ = [
    "OUTPUT_NAMES",
    "Exported",
    "ImportRefused",
    "ImportedJob",
    "Output",
    "OutputLayoutError",
    "OutputScan",
    "export_runs",
    "import_release",
    "inspect_release",
    "scan_outputs",
    "system_and_k",
]
