"""Ask-or-not gates evaluated after the fact over a finished sweep (``python -m cts.gating``)."""
