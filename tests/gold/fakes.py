"""Shared by several test modules (moved out of test_gold.py: no test module imports another)."""

from __future__ import annotations

from cts.core.types import Evidence, Gold, Nugget

E1 = Evidence("e1", "local://1", "北京", "北京是中华人民共和国的首都。")


E2 = Evidence("e2", "https://example.org/2", "Paris", "Paris is the capital of France.")


GOOD = Gold(
    instance_id="x1",
    nuggets=(
        Nugget("n1", "北京是首都。", 3, ("e1",)),
        Nugget("n2", "Paris is a capital.", 1, ("e2", "e1")),
    ),
    evidence=(E1, E2),
    must_cover=("哪个城市是首都？",),
    provenance={"backend": "fake", "nested": {"k": [1, 2]}},
)
