"""No prompt example overlaps the benchmark: an example must not give away a demo instance's reading.

A worked example in a prompt that names a benchmark instance's ambiguous term, or offers
two of its readings ("the company or the river?" for Amazon), teaches the model the answer
to that instance. The demo instances are built from the installed corpus, so this is
computed, not listed by hand.

What is checked: the quoted utterances of every example in ``prompts/`` (after
``Example ...:`` or ``e.g.``), e.g. the Clarifier's sample questions. One-word quoted
strings are the output's vocabulary (labels such as "time", "full"), not examples.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from cts._util.prompts import default_prompts_dir
from cts.demo import load_demo
from cts.text.tokens import content_tokens, normalize

_EXAMPLE = re.compile(r"(?:\bexamples?\b[^:\n]*:|\be\.g\.,?)(.*)", re.IGNORECASE)


def prompt_examples(text: str) -> list[str]:
    """The example texts of a prompt: what follows ``Example ...:`` or ``e.g.`` on its line,
    or, when the line ends there, the block of lines up to the next blank line."""
    lines = text.splitlines()
    out: list[str] = []
    for i, line in enumerate(lines):
        m = _EXAMPLE.search(line)
        if not m:
            continue
        rest = m.group(1).strip()
        if not rest:
            block = []
            for nxt in lines[i + 1 :]:
                if not nxt.strip():
                    break
                block.append(nxt)
            rest = "\n".join(block)
        out.append(rest)
    return out


def utterances(example: str) -> list[str]:
    """The quoted strings of an example that are sentences, not one-word labels or keys."""
    return [q for q in re.findall(r'"([^"\n]+)"', example) if len(q.split()) >= 2]


def _mentions(text: str, phrase: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(normalize(phrase))}(?!\w)", normalize(text)) is not None


def readings(head: str, qualifier: str, titles: Iterable[str]) -> set[str]:
    """Words that pick a reading of ``head``: the instance's qualifier and the other words
    of every corpus title that contains the head (``Amazon River`` -> ``river``)."""
    head_tokens = set(content_tokens(head))
    words = set(content_tokens(qualifier))
    low = normalize(head)
    for title in titles:
        if low in normalize(title) and _mentions(title, head):
            words |= set(content_tokens(title))
    return words - head_tokens


def overlaps(example: str, head: str, senses: set[str]) -> bool:
    """An example names the ambiguous term, or offers two of its readings."""
    return _mentions(example, head) or len(senses & set(content_tokens(example))) >= 2


def test_example_extraction_finds_inline_and_block_examples() -> None:
    text = (
        'Rules.\nOutput JSON, e.g. {"n1": "full"}\nExample for two: ["a?", "b?"]\nExample:\nline one\nline two\n\nafter'
    )
    assert prompt_examples(text) == ['{"n1": "full"}', '["a?", "b?"]', "line one\nline two"]
    assert utterances('["time"] or {"n1": "full", "q": "Which year do you mean?"}') == ["Which year do you mean?"]


def test_overlap_rule_catches_a_term_and_two_readings_but_not_one_generic_word() -> None:
    titles = ["Amazon (company)", "Amazon River", "Amazon rainforest", "River Thames"]
    senses = readings("Amazon", "company", titles)
    assert {"company", "river", "rainforest"} <= senses and "thames" not in senses
    assert overlaps("Do you mean the company or the river?", "Amazon", senses)
    assert overlaps("Is it about Amazon?", "Amazon", senses)
    assert not overlaps("Which company do you mean?", "Amazon", senses)


def test_no_prompt_example_overlaps_a_demo_instance(services) -> None:
    instances = load_demo(services.corpus, services.index, services.cache_dir, n=200, seed=0).instances
    titles = [d.title for d in services.corpus.docs]
    examples = {
        p.name: [u for ex in prompt_examples(p.read_text(encoding="utf-8")) for u in utterances(ex)]
        for p in sorted(Path(default_prompts_dir()).glob("*.md"))
    }
    assert len(examples["clarifier.md"]) >= 2, "the Clarifier prompt's example questions were not found"
    found = []
    for inst in instances:
        head = str(inst.meta["head"])
        senses = readings(head, str(inst.meta["qualifier"]), titles)
        found += [
            (name, inst.id, head, ex[:80]) for name, exs in examples.items() for ex in exs if overlaps(ex, head, senses)
        ]
    assert not found, found
