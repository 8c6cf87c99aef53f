"""The protocol run: stages, the per-instance pipeline, job files, metrics, diagnostics, outcome, spend limit."""
