"""What the calibration slice will cost, said before it runs: the registry's prices times the prompts' sizes.

Nothing has been sent yet, so the slice's cost is bounded, not measured:

- **at least**: every distinct model of every role the jobs call (each role's own model,
  ``<role>.model``, of the groups their task calls) answers once per instance and repeat, however many jobs call it (jobs
  share identical requests: the orig arm, the same question asked twice), its input the role's
  smallest prompt file plus the instance's text and its output one token, no reply cached;
- **at most**: every call at its output cap, as often as the config lets it happen: an agent
  (a node with ``max_llm_calls``) that many turns per arm with a context of up to
  ``max_context_tokens``, any other role ``k`` times per arm with all its re-asks, its input its
  prompts plus everything the run wrote before it. A role with no output cap has no bound.

Tokens are counted as the WebDancer agent counts its context (:func:`cts.search.react.approx_tokens`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

__all__ = ["SliceCost", "slice_cost", "slice_cost_line"]


@dataclass(frozen=True)
class SliceCost:
    """The slice's cost before it runs: ``low`` and ``high`` USD (``high`` None: no bound), and its runs."""

    runs: int
    low: float
    high: float | None
    unpriced: tuple[str, ...] = ()
    unbounded: tuple[str, ...] = ()


def slice_cost(jobs: Sequence[DictConfig], groups: Sequence[Sequence[str]], runs: Sequence[int]) -> SliceCost:
    """The bounds of the slice's cost: ``runs[i]`` runs of ``jobs[i]``, whose task calls the models of ``groups[i]``."""
    least: dict[tuple[str, str], float] = {}  # (role's spec path, model) -> the cheapest its runs can cost
    high = 0.0
    unpriced: set[str] = set()
    unbounded: set[str] = set()
    for job, job_groups, n in zip(jobs, groups, runs, strict=True):
        for call in _calls(job, job_groups):
            if call.p_in == call.p_out == 0:
                unpriced.add(call.model)
            key = (call.path, call.model)
            if call.path.count(".") == 1 and call.path.endswith(
                ".model"
            ):  # a role's own model (a summariser may not be called)
                least[key] = max(least.get(key, 0.0), n * (call.prompt * call.p_in + call.p_out))
            if call.cap is None:
                unbounded.add(call.path)
            else:
                high += n * call.times * (call.context * call.p_in + call.cap * call.p_out)
    bound = None if unbounded else high
    return SliceCost(sum(runs), sum(least.values()), bound, tuple(sorted(unpriced)), tuple(sorted(unbounded)))


def slice_cost_line(cost: SliceCost, n: int, jobs: int, cap: float | None) -> str:
    """What the user is told before the slice runs (and what the spend limit will do to it)."""
    high = "no bound" if cost.high is None else f"${cost.high:.4f}"
    line = (
        f"cts plan: calibration slice, {n} instance(s) per job ({cost.runs} runs over {jobs} jobs): at the "
        f"registry's prices and the prompts' sizes it costs at least ${cost.low:.4f} and at most {high}"
    )
    if cost.unbounded:
        line += f" ({', '.join(cost.unbounded)}: no output cap)"
    if cost.unpriced:
        line += f"; no price, counted as $0: {', '.join(cost.unpriced)}"
    if cap is not None and cost.low > cap:
        line += (
            f"; services.llm.spend.max_usd ${cap:.4f} is below its least: the spend limit will stop the slice, "
            "and the jobs it does not reach are forecast as unknown"
        )
    elif cap is not None and (cost.high is None or cost.high > cap):
        line += f"; services.llm.spend.max_usd ${cap:.4f} may stop it before every job has its runs"
    return line


@dataclass(frozen=True)
class _Call:
    path: str
    model: str
    p_in: float
    p_out: float
    prompt: int
    context: int
    cap: int | None
    times: int


def _calls(job: DictConfig, groups: Sequence[str]) -> Iterator[_Call]:
    """One :class:`_Call` per model spec the job's task calls."""
    from cts.compose.model_checks import find_model_specs
    from cts.llm import LLMSettings, ModelSpec
    from cts.plan.samples import prices_of

    llm = OmegaConf.to_container(job.services.llm, resolve=True)
    assert isinstance(llm, dict)
    settings = LLMSettings.from_mapping({str(k): v for k, v in llm.items()})
    k, arms = int(job.get("k") or 1), 2 + len(job.get("arms") or ())
    reasks = 1 + int(settings.max_reasks)
    for path, node in find_model_specs(OmegaConf.masked_copy(job, [g for g in groups if g in job])):
        values = OmegaConf.to_container(node, resolve=True)
        assert isinstance(values, dict)
        fields = {str(key): v for key, v in values.items()}
        spec = ModelSpec.coerce(fields)
        role = _parent(job, path)
        prompts = _prompt_tokens(role)
        cap = _cap(role, path, fields)
        agent = role.get("max_llm_calls")
        times = (int(agent) + 1) * arms if agent else reasks * k * arms
        written = times * (cap or 0)
        context = int(role.get("max_context_tokens") or (sum(prompts) + written))
        p_in, p_out = prices_of(spec, settings)
        yield _Call(path, spec.name, p_in, p_out, min(prompts, default=0) + 32, context, cap, times)


def _parent(job: DictConfig, path: str) -> Mapping[str, Any]:
    parent = OmegaConf.select(job, path.rsplit(".", 1)[0]) if "." in path else job
    values = OmegaConf.to_container(parent, resolve=True) if isinstance(parent, DictConfig) else {}
    return {str(k): v for k, v in values.items()} if isinstance(values, dict) else {}


def _prompt_tokens(role: Mapping[str, Any]) -> list[int]:
    """The sizes of the prompt files a role's node names (``prompt: clarifier``, ``prompts: {system: ...}``)."""
    from cts._util.prompts import default_prompts_dir
    from cts.search.react import approx_tokens

    names = [role["prompt"]] if isinstance(role.get("prompt"), str) else []
    names += [v for v in (role.get("prompts") or {}).values() if isinstance(v, str)]
    root = Path(str(role.get("prompts_dir") or default_prompts_dir()))
    return [
        approx_tokens((root / f"{n}.md").read_text(encoding="utf-8")) for n in names if (root / f"{n}.md").is_file()
    ]


def _cap(role: Mapping[str, Any], path: str, spec: Mapping[str, Any]) -> int | None:
    """The output cap of a model spec's calls: its role's (the summariser's for ``summary_model``), else the spec's."""
    key = "summary_max_output_tokens" if path.endswith("summary_model") else "max_output_tokens"
    params = spec.get("params") or {}
    for value in (role.get(key), params.get("max_tokens"), params.get("max_completion_tokens")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None
