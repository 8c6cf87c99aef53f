"""How human is the simulated user: UAs, gates and clarifiers against real people's answers (ClariQ, Qulac).

``python -m cts.realism`` (:mod:`cts.realism.cli`); the rule for an informative answer is
:mod:`cts.realism.answers`, the statistics :mod:`cts.realism.metrics`, :mod:`cts.realism.asking`
and :mod:`cts.realism.pattern`.
"""
