"""Batch mode: a role's requests go through the provider's Batch API at its batch price.

:class:`~cts.llm.batch._broker.BatchBroker` gathers the requests of every job on the
sweep's loop, sends them as batches (by size or by time), polls them and hands each
caller its reply; :class:`~cts.llm.batch._ledger.Ledger` keeps the submitted batches in
the sweep dir so a resumed sweep polls them instead of sending again. This package's
``__init__`` stays light: ``cts.llm._settings`` imports the settings from here.
"""

from cts.llm.batch._settings import BATCH_APIS, BatchApi, BatchSettings, BatchTerms

__all__ = ["BATCH_APIS", "BatchApi", "BatchSettings", "BatchTerms"]
