"""The report's forecast time measures the report, not the first import of what it loads when used."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import REPO
from tests.report.fakes import ORIG_SCORES, make_records, write_job


def slice_dir(root: Path) -> Path:
    """A slice's sweep dir: three jobs of four records each."""
    write_job(root, "none", 1, make_records(1, ORIG_SCORES))
    for k in (1, 2):
        answers = [["known"] * k, ["unknown"] * k, ["known"] * k, ["unknown"] * k]
        write_job(root, "rules_scope", k, make_records(k, (20, 25, 40, 45), [("scope",)] * k, answers))
    return root


def test_the_timed_report_imports_nothing_the_warm_up_did_not(tmp_path: Path) -> None:
    """In a fresh interpreter: the untimed build loads matplotlib; the timed one loads no module."""
    source = slice_dir(tmp_path / "slice")
    sizes = {p.name: 40 for p in source.iterdir()}
    code = textwrap.dedent(
        f"""
        import json, sys
        from pathlib import Path
        import cts.report.build as build
        from cts.plan.report_time import time_report

        real, loaded = build.build_sweep_report, []
        def counted(*args, **kwargs):
            before = set(sys.modules)
            result = real(*args, **kwargs)
            loaded.append(sorted(set(sys.modules) - before))
            return result
        build.build_sweep_report = counted
        took = time_report(Path({str(source)!r}), {sizes!r}, {{"n_resamples": 200}}, 0)
        print(json.dumps([took, loaded]))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    took, loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert took is not None and took > 0
    assert len(loaded) == 2  # the warm-up, then the timed build
    assert "matplotlib.figure" in loaded[0], loaded[0][:20]  # the plots' (about 200 modules)
    assert loaded[1] == []
