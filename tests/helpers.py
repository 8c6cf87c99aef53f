"""Small in-test components implementing the role Protocols (no LLM, no corpus)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cts.core.types import QA, Evidence, Gold, Instance, Nugget, SearchResult
from cts.text.qtypes import classify_question


class TableSearch:
    """Answers from a fixed query -> answer table; counts calls; can fail on demand."""

    def __init__(self, table: dict[str, str], fail_on: Sequence[str] = ()) -> None:
        self.table, self.fail_on, self.calls = table, set(fail_on), []

    async def search(self, query: str) -> SearchResult:
        self.calls.append(query)
        if query in self.fail_on:
            raise RuntimeError(f"backend down for {query!r}")
        answer = self.table.get(query, "")
        return SearchResult(
            answer=answer,
            evidence=(Evidence("e1", "local://x", "x", answer),),
            trace=({"tool": "search", "query": query},),
            summary={"calls": 1},
        )


class Typer:
    async def classify(self, question: str) -> tuple[str, ...]:
        return classify_question(question)


@dataclass
class Spy:
    """Wraps a role object and records every argument it receives."""

    inner: Any
    seen: list[str] = field(default_factory=list)

    def _log(self, *args: Any) -> None:
        for a in args:
            self.seen.extend(f"{x.question} {x.answer}" for x in a) if isinstance(
                a, list | tuple
            ) else self.seen.append(str(a))

    async def ask(self, blurred_query: str, k: int) -> list[str]:
        self._log(blurred_query, k)
        return await self.inner.ask(blurred_query, k)

    async def answer(self, fused_query: str, question: str) -> str:
        self._log(fused_query, question)
        return await self.inner.answer(fused_query, question)

    async def rewrite(self, blurred_query: str, qa: Sequence[QA]) -> str:
        self._log(blurred_query, list(qa))
        return await self.inner.rewrite(blurred_query, qa)

    async def search(self, query: str) -> SearchResult:
        self._log(query)
        return await self.inner.search(query)


def gold_for(instance_id: str, *facts: tuple[str, int]) -> Gold:
    return Gold(
        instance_id=instance_id,
        nuggets=tuple(Nugget(id=f"n{i}", text=t, weight=w, evidence_ids=("e1",)) for i, (t, w) in enumerate(facts, 1)),
        evidence=(Evidence("e1", "local://x", "x", "x"),),
    )


def mercury() -> tuple[Instance, Gold, dict[str, str]]:
    inst = Instance("m1", "Tell me about Mercury", "Tell me about Mercury, the planet")
    gold = gold_for("m1", ("Mercury is the first planet from the Sun", 3), ("Mercury has no moons", 1))
    table = {
        "Tell me about Mercury": "Mercury is a chemical element, a liquid metal.",
        "Tell me about Mercury, planet": "Mercury is the first planet from the Sun. Mercury has no moons.",
    }
    return inst, gold, table


def built(target: Any, services: Any, **config: Any) -> Any:
    """``target`` built as the composition layer builds it: ``config`` plus chat clients and job resources."""
    from cts.compose.services import component_arguments

    return target(**component_arguments(target, config, services))
