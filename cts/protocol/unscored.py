"""Why scores are missing: the unscored rate per role and kind, and the line a mostly unscored job ends with.

Each record holds two scores to measure: the clarified arm's and the orig arm's. An arm is
unscored because of one role (the role of the stage that failed, :mod:`cts.core.stages`) and one
kind: ``invalid_output`` (still unparseable after the bounded re-asks), ``truncated`` (every reply stopped at the output cap), ``rejected`` (the provider refused
the request: ``api_error`` records, and the instances a job stopped by :class:`cts.core.types.RequestRejected`
never ran) or ``infra`` (an infrastructure failure: a 5xx, 429, timeout or expired batch line after
every retry, a lost connection; such instances are not recorded, and a rerun retries them).
``unscored_rate_<role>_<kind>`` is the share of the job's arms lost that way; ``unscored_rate``
counts every missing score (``no_weight`` gold and bugs too).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence

from cts.core.records import ErrorInfo, Record
from cts.core.stages import stage_named, stages


def unscored_roles() -> tuple[str, ...]:
    """The roles of the unscored table, in the pipeline's order (:mod:`cts.core.stages`)."""
    return tuple(s.role for s in stages() if s.unscored)


def _role_of(stage: str) -> str | None:
    found = stage_named(stage)
    return found.role if found and found.unscored else None


UNSCORED_KINDS: tuple[str, ...] = ("invalid_output", "truncated", "rejected", "infra")
_KIND = {"invalid_output": "invalid_output", "truncated": "truncated", "api_error": "rejected", "infra": "infra"}
_SAID = {"infra": "infrastructure failure"}  # how the closing lines name a kind


_NO_REASON = ErrorInfo("", "exception", "no reason recorded")


def arm_errors(record: Record) -> Iterator[ErrorInfo | None]:
    """The reason of each of the record's two arms (clarified, orig), None for a scored arm."""
    clarified = record.clarified.error if record.clarified else None
    orig = record.orig.error if record.orig else None
    yield None if record.score is not None else record.error or clarified or _NO_REASON
    yield None if record.orig_score is not None else orig or _NO_REASON


def unscored_rates(
    records: Sequence[Record], rejected: Mapping[str, int] | None = None, infra: Mapping[str, int] | None = None
) -> dict[str, float]:
    """``unscored_rate`` and ``unscored_rate_<role>_<kind>`` over the arms of ``records``.

    Args:
        records: The job's records.
        rejected: Per role, instances the job did not run because the provider rejected that
            role's request (both of their arms count as rejected).
        infra: Per role, instances not recorded because that role's call failed on infrastructure
            (both of their arms count as ``infra``; see :func:`infra_by_role`).
    """
    missing = {(role, "rejected"): n for role, n in (rejected or {}).items()}
    missing.update({(role, "infra"): n for role, n in (infra or {}).items()})
    counts: Counter[tuple[str, str]] = Counter()
    unscored = 0
    for record in records:
        for error in arm_errors(record):
            if error is None:
                continue
            unscored += 1
            kind: str = "infra" if error.infra else error.kind  # an older version's record of a transient failure
            role = _role_of(error.stage)
            if role and kind in _KIND:  # other kinds count in the total only
                counts[role, _KIND[kind]] += 1
    for role_kind, n in missing.items():
        counts[role_kind] += 2 * n
    n_arms = 2 * (len(records) + sum(missing.values()))
    out = {"unscored_rate": (unscored + 2 * sum(missing.values())) / n_arms if n_arms else float("nan")}
    declared = unscored_roles()
    roles = [*declared, *sorted({r for r, _ in counts} - set(declared))]  # a rejected role's own name
    for role in roles:
        for kind in UNSCORED_KINDS:
            out[f"unscored_rate_{role}_{kind}"] = counts[role, kind] / n_arms if n_arms else float("nan")
    return out


def rejected_by_role(failures: Sequence[Mapping[str, object]], n_missing: int) -> dict[str, int]:
    """Per role: the instances a job did not run because the provider rejected that role's request.

    Args:
        failures: The job's ``infra_failures.jsonl`` lines (a rejection names its ``role``).
        n_missing: Instances the job was asked to run and did not finish.
    """
    role = next((str(f.get("role")) for f in failures if f.get("kind") == "request_rejected" and f.get("role")), "")
    n_rejected = n_missing - sum(infra_by_role(failures).values())  # the others failed on infrastructure
    return {role: n_rejected} if role and n_rejected > 0 else {}


def infra_by_role(failures: Sequence[Mapping[str, object]]) -> dict[str, int]:
    """Per role: the instances of this invocation not recorded because that role's call failed on infrastructure.

    Args:
        failures: The job's ``infra_failures.jsonl`` lines (an instance's line names its ``id`` and ``stage``).
    """
    found = Counter(_role_of(str(f.get("stage"))) or str(f.get("stage")) for f in failures if f.get("id"))
    return dict(found)


def unscored_line(rates: Mapping[str, float]) -> str | None:
    """``unscored: 33% of the scores (ua truncated 17%, judge invalid_output 17%)``, or None when none is missing."""
    if not rates.get("unscored_rate", 0) > 0:
        return None
    found = [(v, *_role_kind(k)) for k, v in rates.items() if k != "unscored_rate" and v > 0]
    reasons = ", ".join(f"{role} {_SAID.get(kind, kind)} {v:.0%}" for v, role, kind in sorted(found, reverse=True))
    return f"unscored: {rates['unscored_rate']:.0%} of the scores ({reasons})"


def mostly_unscored_note(records: Sequence[Record]) -> str | None:
    """A closing line when more than half of the job's arms are unscored (None otherwise), with the top reasons."""
    rates = unscored_rates(records)
    if not records or not rates["unscored_rate"] > 0.5:
        return None
    found = [(v, *_role_kind(k)) for k, v in rates.items() if k != "unscored_rate" and v > 0]
    reasons = ", ".join(f"{role} {_SAID.get(kind, kind)} {v:.0%}" for v, role, kind in sorted(found, reverse=True)[:3])
    return (
        f"cts: MOSTLY UNSCORED: {rates['unscored_rate']:.0%} of the {2 * len(records)} scores (clarified and orig "
        f"arms) are missing; by role and kind: {reasons or 'no reason recorded'} (metrics unscored_rate_<role>_<kind>)"
    )


def _role_kind(metric: str) -> tuple[str, str]:
    name = metric.removeprefix("unscored_rate_")
    kind = next(k for k in UNSCORED_KINDS if name.endswith("_" + k))
    return name[: -len(kind) - 1], kind
