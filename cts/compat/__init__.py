"""Compatibility at the edge: what older versions wrote, read in today's form, here and nowhere else.

Every reader of an older job dir, record or config goes through this package, which upgrades
what it reads to today's form; no other module knows an older format (tests/compat/test_edge.py
enforces it).

- :mod:`cts.compat.renames`: the retired names (the table ``renames.tsv``: old name, new name,
  day, what it means) and the command line's one ``error:`` line per retired name.
- :mod:`cts.compat.config`: a stored protocol config or a job's whole stored config in today's
  keys and ``_target_`` paths; the ``services.llm`` mapping; a model file's old id key and its
  ``request.structured_output`` as a boolean.
- :mod:`cts.compat.records`: ``records.jsonl`` lines of older versions (the arm's old key, old end
  reasons, infrastructure failures committed as results, questions stored without types).
- :mod:`cts.compat.job_dirs`: ``summary.json`` (old stop reasons, factors from the run name) and
  ``traces.jsonl`` (lines without times).

The policy (docs/reference.md, "Compatibility"): before 1.0 a renamed name gets no alias, only its
error line; from 1.0 a deprecated name keeps working until the release its notice names.
"""
