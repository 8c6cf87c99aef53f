"""The trace writer's backlog is bounded: a job that commits faster than the writer writes waits for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from cts import tracking
from cts.tracking import _writer
from tests.tracking.test_trace_writer import _docs, _store


@pytest.mark.slow
def test_a_job_never_holds_more_trace_documents_than_the_backlog_allows(tmp_path: Path, monkeypatch) -> None:
    """Each batch is acknowledged once written, so ``submit`` waits only while MAX_BACKLOG are on their way."""
    monkeypatch.setattr(_writer, "MAX_BACKLOG", 4)
    monkeypatch.setattr(_writer, "BACKLOG_WAIT_S", 30.0)  # acknowledged only at a flush, the fifth would wait this
    template = tmp_path / "template.db"
    tracking.prepare_store(f"sqlite:///{template}")
    uri, experiment, run = _store(tmp_path, "b.db", template)
    docs = _docs(run, experiment, n=16)
    writer = _writer.TraceWriter(uri, linger_s=0.0, in_process_docs=0)  # acknowledged by the process
    most = 0
    try:
        for doc in docs:
            writer.submit([doc])
            most = max(most, writer._outstanding)
        assert writer.flush() == (16, [])
    finally:
        writer.close()
    assert writer._bounded and most <= 4
