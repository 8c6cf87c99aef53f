"""The package's layers (the README's order), shared by the architecture and seams tests."""

from __future__ import annotations

from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "cts"

# Ordered layers; a module's layer is that of its longest matching prefix.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "contracts",
        ("cts", "cts.core", "cts.compat", "cts.compose.schema"),
    ),  # compat: older formats; schema: the settings' one declaration
    ("leaf", ("cts._util", "cts.text", "cts.stats", "cts.corpus", "cts.tracking")),
    ("components", ("cts.llm", "cts.roles", "cts.search", "cts.gold", "cts.data", "cts.demo", "cts.sweep")),
    ("protocol", ("cts.protocol",)),
    ("report", ("cts.report",)),
    ("analysis", ("cts.analysis", "cts.release")),
    ("tasks", ("cts.tasks",)),
    ("composition", ("cts.compose",)),
    (
        "entry",
        (
            "cts.compose.callbacks",
            "cts.compose.launch",
            "cts.agreement",
            "cts.gating",
            "cts.realism",
            "cts.plan",
            "cts.report.cli",
            "cts.report.__main__",
            "cts.demo.cli",
            "cts.demo.__main__",
            "cts.release.cli",
            "cts.release.__main__",
        ),
    ),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int:
    best, rank = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, rank = len(p), i
    assert rank >= 0, f"{module} is in no layer: add it to LAYERS (and the README)"
    return rank
