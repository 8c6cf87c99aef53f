"""Human nugget labels recorded in MLflow's trace view, read back as :class:`cts.data.human_labels.HumanLabel` rows.

A person labels a nugget of an instance trace with an assessment (feedback or expectation) of
source ``HUMAN`` whose source id is the annotator:

- name ``nugget.<id>``: the trace's clarified answer (its job's arm);
- name ``orig.nugget.<id>``: the orig answer (the same answer for every job of a setting);
- value ``full``, ``partial`` or ``none`` (any case).

Every other HUMAN assessment is a problem, one line naming the trace, the nugget and the value,
except the copies ``python -m cts.agreement --labels`` itself logs (metadata ``analysis:
human_agreement``). An assessment the UI replaced by an edit is not read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cts.core.types import LABELS
from cts.data.human_labels import HumanLabel
from cts.report.agreement import arm_names
from cts.report.jobs import Job, load_jobs

if TYPE_CHECKING:
    from cts.tracking import StoredAssessment

NAME = re.compile(r"^(?P<orig>orig\.)?nugget\.(?P<nugget>.+)$")
OWN_COPIES = "human_agreement"
"""The ``analysis`` metadata of the expectations cts logs from a labels file: not read back."""

__all__ = ["NAME", "labels_from_assessments", "store_labels", "sweep_jobs_and_store"]


def sweep_jobs_and_store(sweep: Path, uri: str | None) -> tuple[list[Job], str] | str:
    """The sweep's jobs and the store of their runs, or the ``error:`` line why not."""
    jobs = load_jobs(sweep)
    if not jobs:
        return f"error: no finished job found in {sweep}"
    stored = [json.loads((Path(j.job_dir) / "summary.json").read_text()).get("tracking_uri") for j in jobs]
    uri = uri or next((u for u in stored if u), None)
    if uri is None:
        return f"error: {sweep}: its jobs logged to no MLflow store; pass --tracking-uri"
    return jobs, uri


def _where(a: StoredAssessment) -> str:
    return f"trace {a.trace_id} (instance {a.instance_id}, run {a.run_id})"


def _one(
    a: StoredAssessment, arms: Mapping[str, tuple[str | None, str]], weights: Mapping[str, Mapping[str, int]]
) -> tuple[HumanLabel | None, str | None]:
    """One stored assessment as a label, or the problem with it."""
    name, value, where = a.name, a.value, _where(a)
    match = NAME.match(str(name))
    if match is None:
        return (
            None,
            f"{where}: assessment {name!r} = {value!r}: not a nugget label; name it nugget.<id> or orig.nugget.<id>",
        )
    nugget = match["nugget"]
    instance = a.instance_id
    if nugget not in weights.get(instance, {}):
        known = ", ".join(sorted(weights.get(instance, {})))
        return None, f"{where}: nugget {nugget!r} = {value!r}: not a gold nugget of {instance} ({known})"
    label = value.strip().lower() if isinstance(value, str) else None
    if label not in LABELS:
        return None, f"{where}: nugget {nugget} = {value!r}: the value must be one of {', '.join(LABELS)}"
    clarified, orig = arms.get(a.run_id, (None, "orig"))
    arm = orig if match["orig"] else clarified
    if arm is None:
        return None, f"{where}: nugget {nugget} = {value!r}: an orig job's trace has only orig.nugget.<id> labels"
    return HumanLabel(instance, arm, nugget, label, str(a.source_id or "anonymous")), None


def labels_from_assessments(
    found: Sequence[StoredAssessment], jobs: Sequence[Job], weights: Mapping[str, Mapping[str, int]]
) -> tuple[list[HumanLabel], list[str]]:
    """The labels among HUMAN assessments (:class:`cts.tracking.StoredAssessment`), and one line per problem.

    One annotator's two different labels of one nugget of one answer (an orig answer seen on two
    jobs' traces) are a problem too; the same label twice is kept once.
    """
    arms = {j.run_id: pair for j, pair in zip(jobs, arm_names(jobs))}
    labels: dict[tuple[str, str, str, str], HumanLabel] = {}
    problems: list[str] = []
    for a in sorted(found, key=lambda x: (x.trace_id, x.name)):
        if a.metadata.get("analysis") == OWN_COPIES:
            continue
        label, problem = _one(a, arms, weights)
        if label is None:
            problems.append(str(problem))
            continue
        key = (*label.unit, label.annotator)
        if key in labels and labels[key].label != label.label:
            problems.append(
                f"{_where(a)}: nugget {label.nugget} = {label.label!r}: {label.annotator} labelled the same "
                f"{label.arm} answer {labels[key].label!r} on another trace"
            )
        labels.setdefault(key, label)
    return list(labels.values()), problems


def store_labels(
    jobs: Sequence[Job], uri: str, weights: Mapping[str, Mapping[str, int]]
) -> tuple[list[HumanLabel], list[str]]:
    """Every human label recorded on the jobs' traces in ``uri``, and one line per problem."""
    from cts import tracking

    found = tracking.human_assessments(uri, [j.run_id for j in jobs])
    return labels_from_assessments(found, jobs, weights)
