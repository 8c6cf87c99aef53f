"""Old module paths stay importable after the package restructure.

Component ``_target_`` paths are part of a job's protocol fingerprint, and job dirs written
before the move name modules at the root of ``cts`` (e.g. ``cts.callbacks.PrepareTrackingStore``
in ``.hydra/hydra.yaml``). An old name imports the module at its new path: one module object
under two names, never a copy, so state and monkeypatching stay shared.

``python -m <old name>`` runs the new module too: runpy asks the finder for the old name's
spec, then runs a module's code as ``__main__`` (:meth:`MovedModules.get_code`) or, for a
package, its ``__main__`` submodule, which the import system finds on the new package's path
(the spec carries it).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import CodeType, ModuleType

MOVED: dict[str, str] = {
    "cts.aio": "cts._util.aio",
    "cts.app": "cts.compose.app",
    "cts.budget": "cts.protocol.spend",
    "cts.callbacks": "cts.compose.callbacks",
    "cts.checks": "cts.compose.checks",
    "cts.confdiff": "cts._util.confdiff",
    "cts.diagnostics": "cts.protocol.diagnostics",
    "cts.errors": "cts.compose.errors",
    "cts.gate": "cts.gating.cli",
    "cts.data.goldfile": "cts.gold.file",
    "cts.goldfile": "cts.gold.file",
    "cts.index": "cts.corpus.index",
    "cts.interrupt": "cts._util.interrupt",
    "cts.io": "cts._util.io",
    "cts.job_files": "cts.protocol.job_files",
    "cts.lexicon": "cts.text.lexicon",
    "cts.llm.completion_probe": "cts.compose.completion_probe",
    "cts.llm.preflight": "cts.compose.model_checks",
    "cts.llm.rulecheck": "cts.compose.request_rules",
    "cts.metrics": "cts.protocol.metrics",
    "cts.naming": "cts._util.naming",
    "cts.outcome": "cts.protocol.outcome",
    "cts.pipeline": "cts.protocol.pipeline",
    "cts.protocol.budget": "cts.protocol.spend",
    "cts.prompts": "cts._util.prompts",
    "cts.qtypes": "cts.text.qtypes",
    "cts.records": "cts.core.records",
    "cts.scoring": "cts.core.scoring",
    "cts.secrets": "cts._util.secrets",
    "cts.services": "cts.compose.services",
    "cts.tasks.gold": "cts.tasks.build_gold",
    "cts.stages": "cts.protocol.stages",
    "cts.startup": "cts._util.startup",
    "cts.types": "cts.core.types",
    "cts.validate": "cts.compose.validate",
    "cts.versions": "cts._util.versions",
}
"""Old module name -> where it lives now."""


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A finder that answers an old module name with the module at its new path."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        """A spec for ``fullname`` when it is an old name, else None (the normal finders go on).

        It has the new module's file and, for a package, its search path: what runpy reads.
        """
        if fullname not in MOVED:
            return None
        real = importlib.util.find_spec(MOVED[fullname])
        locations = None if real is None else real.submodule_search_locations
        spec = importlib.machinery.ModuleSpec(
            fullname, self, origin=None if real is None else real.origin, is_package=locations is not None
        )
        if locations is not None:
            spec.submodule_search_locations = list(locations)
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        """The module at the new path, imported if need be."""
        module = importlib.import_module(MOVED[spec.name])
        module.__dict__.setdefault("_cts_real_spec", module.__spec__)
        return module

    def get_code(self, fullname: str) -> CodeType | None:
        """The new module's code: what ``python -m <old name>`` runs as ``__main__`` (None when it has none)."""
        new = MOVED[fullname]
        real = importlib.util.find_spec(new)
        loader = None if real is None else real.loader
        return loader.get_code(new) if isinstance(loader, importlib.abc.InspectLoader) else None

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: restore the module's own spec, which the import system just overwrote."""
        module.__spec__ = module.__dict__["_cts_real_spec"]


def install() -> None:
    """Put the finder on ``sys.meta_path`` once."""
    if not any(isinstance(f, MovedModules) for f in sys.meta_path):
        sys.meta_path.append(MovedModules())
