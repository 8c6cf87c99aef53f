"""The request audit in MLflow: per role, the params its requests carried as the provider received them.

The job writes ``request_audit.json`` (role -> model, endpoint, the params asked for, the params
the request rules sent, what they changed, the body of the first request that went out without its
messages); it is logged as an artifact, and each role gets a tag ``cts.request.<role>`` that says in
one line what the provider got (``gpt-5.2: max_completion_tokens=4608, reasoning_effort=low,
response_format=json_schema``), so runs can be compared and filtered by it in the UI.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REQUEST_AUDIT_FILE = "request_audit.json"
_NESTED = ("generationConfig", "generation_config")  # Gemini puts the sampling params one level down
_VALUE_MAX = 40
_TAG_MAX = 5000


def request_tag(entry: Mapping[str, Any]) -> str:
    """One line: the model and the params of its first request as the provider received them.

    From the body that went out (``wire``), or, when every call was served from the cache, from
    the params the request rules sent (marked ``(cached)``). The rules' changes follow ``changed:``.
    """
    wire = entry.get("wire")
    params = dict(wire if wire is not None else entry.get("sent") or {})
    params.pop("model", None)
    for key in _NESTED:
        params.update(params.pop(key, None) or {})
    shown = ", ".join(f"{k}={_short(k, v)}" for k, v in sorted(params.items()))
    changes = "; ".join(entry.get("changes") or [])
    line = f"{entry.get('model')}: {shown or '(no params)'}{'' if wire is not None else ' (cached)'}"
    return (line + (f"; changed: {changes}" if changes else ""))[:_TAG_MAX]


def _short(key: str, value: Any) -> str:
    if isinstance(value, Mapping) and "type" in value:  # response_format, output_format
        kind = str(value["type"])
        return "json_object_schema" if kind == "json_object" and "schema" in value else kind
    if key in ("response_json_schema", "response_schema", "responseJsonSchema", "responseSchema"):
        return "schema"
    text = json.dumps(value, ensure_ascii=False, default=str) if not isinstance(value, str) else value
    return text if len(text) <= _VALUE_MAX else text[: _VALUE_MAX - 3] + "..."


def log_request_audit(path: Path, audit: Mapping[str, Mapping[str, Any]]) -> None:
    """Log the job's ``request_audit.json`` (``path``) and one ``cts.request.<role>`` tag per role."""
    from cts.tracking._batch import set_tags
    from cts.tracking._outbox import call
    from cts.tracking._store import mlflow_module

    mlflow = mlflow_module()
    if path.exists():
        op = {"op": "artifacts", "paths": [str(path.resolve())], "artifact_path": None}
        call(mlflow.get_tracking_uri(), mlflow.active_run().info.run_id, op, lambda: mlflow.log_artifact(str(path)))
    set_tags({f"cts.request.{role}": request_tag(entry) for role, entry in sorted(audit.items())})
