"""A small hand-written set of ambiguous queries (not derived from the demo's construction).

Each has a blurred query, the intent a user had in mind, and what an intent-aware
search would return; a few are Chinese. Used to run the sequential rules and the
gates on data they were not built around.
"""

from __future__ import annotations

from cts.core.types import Instance

INSTANCES = (
    Instance("h1", "Jaguar", "Jaguar the British car maker in the 1960s"),
    Instance("h2", "What happened at the Olympics?", "What happened at the Olympics in 1936"),
    Instance("h3", "Python release schedule", "Python release schedule, the programming language"),
    Instance("h4", "苹果发布会", "苹果公司2023年在美国的发布会"),
    Instance("h5", "长城的历史", "长城在明朝的历史"),
    Instance("h6", "Average rent for a two-bedroom flat", "Average rent for a two-bedroom flat in Berlin"),
    Instance("h7", "上海2023年常住人口统计数据是多少", "上海2023年常住人口统计数据是多少"),
    Instance(
        "h8",
        "Who won the 2014 FIFA World Cup final in Rio de Janeiro and what was the score?",
        "Who won the 2014 FIFA World Cup final in Rio de Janeiro and what was the score?",
    ),
)

# Titles of a small hand-made encyclopedia: some heads are shared (ambiguous), some are not.
TITLES = (
    "Jaguar",
    "Jaguar Cars",
    "Jaguar (band)",
    "Python (programming language)",
    "Python (genus)",
    "Monty Python",
    "苹果",
    "苹果公司",
    "长城",
    "Olympic Games",
    "Berlin",
    "2014 FIFA World Cup",
)
