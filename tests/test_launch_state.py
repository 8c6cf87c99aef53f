"""No module-level mutable launch state outside the launch object (``cts._util.launch.Launch``).

What one launch knows (jobs, sweep dir, swept keys, resume command, plan, store, the pre-flight's
memo, the compose memo, the sweep session) lives in one object that the Hydra callbacks create and
end. This test scans every module of ``cts`` (ast) for state kept at module level instead:

- an assignment of a mutable container (list, dict or set literal or comprehension, ``dict()``,
  ``Counter()``, ``deque()``, weak containers ...) or of another stateful object (``random.Random()``,
  ``itertools.count()``);
- a ``global`` statement;
- a ``functools`` cache on a module-level function.

Each is allowed only in the launch module, as ``__all__``, as a read-only table (no function of
``cts`` mutates it: no mutating method call, item assignment or deletion, augmented assignment),
or when :data:`PROCESS_WIDE` lists it with the reason it is not launch state. Context variables
are not flagged: each context (a job's thread, a task) has its own value.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.layers import PKG, module_name

LAUNCH_MODULE = "cts._util.launch"

PROCESS_WIDE: dict[str, str] = {
    "cts.core.stages:_declared": "the declared stages: code registers a stage once per process, as it imports a class",
    "cts._util.secrets:_KNOWN": "keys this process read: masked in all it writes, whichever launch read them",
    "cts._util.interrupt:_received": "the SIGTERM handler's record: a signal reaches the process, not a launch",
    "cts._util.prompts:_PROCESS_USED": "prompts used outside any job's scope (scripts); a job's are in its context",
    "cts.llm.store:_CHECKED": "SQLite files this process found healthy: a fact about a file, not a launch",
    "cts.llm._adaptive:_LIVE": "weak set of live endpoint limiters; each belongs to one event loop and dies with it",
    "cts.llm.batch._broker:_LIVE": "weak set of live batch brokers, for the progress bar; each dies with its runtime",
    "cts.llm._adaptive:_ORDER": "a counter ordering waiters: only its order matters, never its value",
    "cts.llm._calls:IN_FLIGHT": "weak map from an event loop to its calls in flight; an entry dies with its loop",
    "cts.llm._retry:_JITTER": "the process's retry-jitter RNG (unseeded: processes must not retry in step)",
    "cts.llm.cache:_CLAIMS": "a counter making the LLM cache's claim ids unique within the process",
    "cts.protocol.pipeline:STAGE_CALLS": "a process counter of stage calls; readers take differences (gating CLI)",
    "cts.tracking._store:_PREPARED": "stores whose schema this process found current (a fact about the store)",
    "cts.tracking._writer:_WRITERS": "one trace-writer subprocess per store and process, ended at exit",
    "cts.tracking._outbox:_DOWN": "tracking servers this process found dead (a launch's check_store clears it)",
    "cts.tracking._outbox:_RUNS": "the MLflow runs open in this process and their job dirs",
    "cts.tracking._outbox:_ANNOUNCE": "whether this process is a trace writer (its job's process announces)",
    "cts.compose.schema._table:_found": "the declared key each config path is: derived from the static key table",
    "cts.compose.schema._table:_compiled": "the key table's compiled path patterns (recompiled when the table changes)",
    "cts.compose.validate:_tables": "the value rules compiled from the static key table (recompiled when it changes)",
    "cts.corpus.wiki:load_corpus": "a read-only parsed corpus per language (installed package data)",
    "cts.compose.services:shared_corpus": "the read-only corpus per language, one copy per process",
    "cts.compose.services:shared_index": "the read-only BM25 index per language and cache dir, one copy per process",
    "cts.tracking._datasets:_BUILT": "MLflow dataset entities per name and content digest: a pure function of the rows",
    "cts.search.providers:lead_snippet": "a pure function of its arguments (an article's lead sentences)",
    "cts.compose.model_checks:_SPECS": "model specs per read-only config, an entry dropped with its config",
    "cts._util.naming:_items": "a pure function of an override list's strings (Hydra's parse, once)",
    "cts._util.naming:_swept": "a pure function of an override list's strings (Hydra's parse, once)",
    "cts.compose.component_keys:_set_keys": "the keys a group's option files set: read once, before any launch exists",
    "cts.compose.presets:preset_nodes": "the _global_ presets' nodes: read once, before any launch, by both typo checks",
    "cts.compose.presets:primary_nodes": "the primary configs' nodes: read once, before any launch",
    "cts.compose.choices:_preset_groups": "the config dirs' preset groups: read once, before any launch",
    "cts.compose.presets:_config_file": "a config file parsed: read once, before any launch, by every typo check",
    "cts.compose.component_keys:_option_keys": "the keys an option file sets: read once, before any launch exists",
    "cts.llm._lite:litellm_module": "litellm imported once, with its network fetches off",
    "cts.roles.rules:_place_regex": "compiled regular expressions",
    "cts.tracking._sqlbulk:_mlflow": "what the module takes from MLflow, imported once",
    "cts.tracking._sqlbulk:_sets_trace_values": "a pure function of its arguments (MLflow's span translation)",
    "cts.tracking._sqlbulk:_decoded": "a pure function of its argument (JSON text decoded)",
    "cts.tracking._sqlbulk:_insert_sql": "a pure function of its arguments (an INSERT compiled for a dialect)",
    "cts.tracking._sqlbulk:_left_alone": "a pure function of its arguments (MLflow's span translation)",
    "cts.tracking._tracewrite:_encoder": "a reused JSON encoder per option",
    "cts.tracking._tracewrite:_log_level": "a pure function of the span type (MLflow's span levels)",
    "cts._util.versions:_versions": "installed package versions, read once per process (callers get a copy)",
    "cts.core.records:_FIELDS": "each record class's field names, derived from the class",
    "cts.text.qtypes:classify_question": "a pure function of the question's text over fixed patterns",
    "cts.tracking._datasets:_ENSURED": "evaluation datasets this process found in a store (a fact about the store)",
}
"""Process-wide state that is not a launch's, ``module:name`` -> why."""

_CONTAINERS = {"list", "dict", "set", "bytearray", "defaultdict", "OrderedDict", "deque", "Counter", "ChainMap"}
_CONTAINERS |= {"WeakSet", "WeakKeyDictionary", "WeakValueDictionary"}
_STATEFUL = {"Random", "count", "local", "SimpleNamespace"}  # state however it is used
_CACHES = {"cache", "lru_cache"}
_MUTATORS = {
    *("append", "extend", "insert", "remove", "pop", "popitem", "clear", "update", "setdefault", "add", "discard"),
    *("difference_update", "intersection_update", "symmetric_difference_update", "sort", "reverse"),
    *("appendleft", "extendleft", "popleft", "rotate", "__setitem__", "__delitem__"),
}


@dataclass(frozen=True)
class Kept:
    """Something a module keeps at module level."""

    module: str
    name: str
    line: int
    kind: str  # "container" (may be a read-only table), "stateful", "global", "cache"

    @property
    def key(self) -> str:
        return f"{self.module}:{self.name}"


def _called(node: ast.AST) -> str | None:
    """The name a call expression calls (``collections.Counter()`` -> ``Counter``)."""
    if not isinstance(node, ast.Call):
        return None
    f = node.func
    f = f.func if isinstance(f, ast.Call) else f  # lru_cache(maxsize=4)
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _kind(value: ast.AST | None) -> str | None:
    """``container``, ``stateful`` or None (an immutable value) for a module-level assignment's value."""
    comprehensions = (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)
    called = _called(value) if value is not None else None
    if isinstance(value, comprehensions) or called in _CONTAINERS:
        return "container"
    return "stateful" if called in _STATEFUL else None


def _decorator_name(node: ast.expr) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else _called(node)


def kept_at_module_level(source: str, module: str) -> list[Kept]:
    """What ``source`` keeps at module level: mutable assignments, ``global`` statements, functools caches."""
    tree = ast.parse(source)
    found = []
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        kind = _kind(getattr(node, "value", None)) if targets else None
        found += [Kept(module, t.id, node.lineno, kind) for t in targets if isinstance(t, ast.Name) and kind]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if any(_decorator_name(d) in _CACHES for d in node.decorator_list):
                found.append(Kept(module, node.name, node.lineno, "cache"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            found += [Kept(module, n, node.lineno, "global") for n in node.names]
    return found


def _named(node: ast.AST) -> str | None:
    """``X`` of ``X`` or ``a.X`` (what a mutation goes through)."""
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def mutated_names(source: str) -> set[str]:
    """The names ``source``'s functions mutate through (``X.append()``, ``X[k] = v``, ``del X[k]``, ``X += ...``).

    Only function bodies count: building a table at import time is not keeping state.
    """
    names = set()
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS:
                names.add(_named(node.func.value))
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign | ast.Delete):
                targets = node.targets
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            for t in targets:
                names.add(
                    _named(t.value)
                    if isinstance(t, ast.Subscript)
                    else _named(t)
                    if isinstance(node, ast.AugAssign)
                    else None
                )
    return names - {None}  # type: ignore[arg-type]


def launch_state_outside_the_launch(sources: dict[str, str]) -> list[str]:
    """Every module-level state of ``sources`` (module -> text) that is not allowed, one line each."""
    mutated = set().union(*(mutated_names(s) for s in sources.values()))
    bad = []
    for module, source in sorted(sources.items()):
        for kept in kept_at_module_level(source, module):
            if module == LAUNCH_MODULE or kept.key in PROCESS_WIDE or kept.name == "__all__":
                continue
            if kept.kind == "container" and kept.name not in mutated:
                continue  # a read-only table
            bad.append(f"{module}:{kept.line} {kept.name} ({kept.kind})")
    return bad


def _sources() -> dict[str, str]:
    return {module_name(p): p.read_text(encoding="utf-8") for p in PKG.rglob("*.py")}


def test_no_module_keeps_launch_state_outside_the_launch_object() -> None:
    bad = launch_state_outside_the_launch(_sources())
    assert not bad, (
        "module-level state outside cts._util.launch (put what one launch knows in Launch; "
        "list a process-wide cache in PROCESS_WIDE with its reason):\n" + "\n".join(bad)
    )


def test_every_exception_still_exists() -> None:
    kept = {k.key for module, source in _sources().items() for k in kept_at_module_level(source, module)}
    assert not set(PROCESS_WIDE) - kept, f"stale entries in PROCESS_WIDE: {sorted(set(PROCESS_WIDE) - kept)}"


@pytest.mark.parametrize(
    "source",
    [
        "_ACTIVE: list[str] = []\ndef begin(r):\n    _ACTIVE[:] = [r]\n",
        "_MEMO = {}\ndef remember(k, v):\n    _MEMO[k] = v\n",
        "_SEEN = set()\ndef see(x):\n    _SEEN.add(x)\n",
        "import collections\nCALLS = collections.Counter()\ndef call():\n    CALLS['x'] += 1\n",
        "_CURRENT = None\ndef enter(s):\n    global _CURRENT\n    _CURRENT = s\n",
        "import functools\n@functools.lru_cache(maxsize=8)\ndef ids(key):\n    return key\n",
        "import random\n_RNG = random.Random()\n",
    ],
)
def test_the_scan_finds_state_kept_at_module_level(source: str) -> None:
    assert launch_state_outside_the_launch({"cts.fake": source})


def test_a_read_only_table_and_the_launch_module_pass() -> None:
    table = "CREDIT = {'full': 1.0}\n__all__ = ['credit']\ndef credit(label):\n    return CREDIT[label]\n"
    launch = "_OPEN = {}\ndef begin(d, launch):\n    _OPEN[d] = launch\n"
    assert launch_state_outside_the_launch({"cts.fake": table, LAUNCH_MODULE: launch}) == []
