"""The task registry: a task is its module (``cts/tasks/<name>.py``) and its config (``conf/task/<name>.yaml``).

``task._target_`` names the task function (typed keyword arguments, never the config). The
:func:`task` decorator on it records how the composition layer gets those arguments: a
*composer* (``composer(ctx) -> result``: builds the arguments from a :class:`TaskContext`
and calls the task) and a *reader* of its input (``reader(ctx) -> input``, read before the
run starts so that a broken file is refused before anything is created). The record sits on
the function itself, as inspect_ai's ``@task`` does: importing the module named by the
config registers the task, and no table in :mod:`cts.compose` lists the tasks.

A composer never sees the config: :mod:`cts.compose` alone reads it and hands the composer a
:class:`TaskContext` (a value by key, a component built by key, the task's input, the job's
run settings and resources).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from hydra.utils import get_object

from cts.compat.renames import renamed_target

if TYPE_CHECKING:
    from cts.llm import LLMRuntime
    from cts.protocol.spend import SpendLimit
    from cts.tasks.job import RunInfo

F = TypeVar("F", bound=Callable[..., Any])
_SPEC = "__cts_task__"


class TaskContext(Protocol):
    """What a task's composer may ask of its job (built by :mod:`cts.compose` from the config).

    Keys are dotted config paths (``"k"``, ``"build_gold.out_dir"``); ``parts`` are further keys taken
    literally (a judge named ``qwen2.5`` stays one key).
    """

    @property
    def run(self) -> RunInfo:
        """Where the job sits, its tracking settings, resolved config and tags."""
        ...

    @property
    def fingerprint(self) -> str:
        """Hash of the protocol config (what the job measures, not where it writes)."""
        ...

    @property
    def protocol_config(self) -> Mapping[str, Any]:
        """The protocol config the fingerprint hashes (stored beside it in the job dir)."""
        ...

    @property
    def spend_limit(self) -> SpendLimit:
        """The job's LLM spend limit (``services.llm.spend``)."""
        ...

    @property
    def llm(self) -> LLMRuntime:
        """The job's LLM runtime (shared by every role's client)."""
        ...

    def value(self, key: str, *parts: str, default: Any = ...) -> Any:
        """The resolved value at ``key`` (a node as plain dicts and lists); ``default`` when absent."""
        ...

    def values(self, *keys: str) -> dict[str, Any]:
        """Several top-level nodes resolved together, as one plain dict."""
        ...

    def keys(self, key: str, *parts: str) -> list[str]:
        """The names under the node at ``key``."""
        ...

    def build(self, key: str, *parts: str) -> Any:
        """The component configured at ``key`` (a node with ``_target_``), built with its resources."""
        ...

    def model_ids(self, *keys: str) -> dict[str, str]:
        """Config path -> model id of every model spec under the top-level nodes ``keys``."""
        ...

    def input(self) -> Any:
        """The task's input, as its reader read it (before the run, when its files allow)."""
        ...

    def resource_counters(self) -> dict[str, float]:
        """Counters of the job's built resources (tool-cache hits ...)."""
        ...

    def places(self) -> tuple[str, ...]:
        """Place names a concretising UA may add (built-in, plus the offline corpus's when present)."""
        ...


Composer = Callable[[TaskContext], Any]
Reader = Callable[[TaskContext], Any]


def read_dataset(ctx: TaskContext) -> Any:
    """The default reader: the component configured at ``dataset`` (instances and gold)."""
    return ctx.build("dataset")


@dataclass(frozen=True)
class TaskSpec:
    """How the composition layer runs one task.

    Attributes:
        compose: ``compose(ctx)``: build the task's arguments, call it, return its result.
        read: ``read(ctx)``: the task's input (``ctx.input()`` returns it).
        calls: The config keys whose models the task calls (the pre-flight checks them),
            unless ``task.preflight`` lists them; or a function that names them when asked
            (the declared stages', :func:`cts.core.stages.component_roles`).
        writes: The config keys of dirs the task writes besides its job dir (``build_gold.out_dir``):
            refused before the run when they cannot be written (:func:`cts.compose.checks.output_places`).
    """

    compose: Composer
    read: Reader = read_dataset
    calls: tuple[str, ...] | Callable[[], tuple[str, ...]] = ()
    writes: tuple[str, ...] = ()

    def called(self) -> tuple[str, ...]:
        """The config keys whose models the task calls."""
        return tuple(self.calls() if callable(self.calls) else self.calls)


def task(
    compose: Composer,
    *,
    read: Reader = read_dataset,
    calls: tuple[str, ...] | Callable[[], tuple[str, ...]] = (),
    writes: tuple[str, ...] = (),
) -> Callable[[F], F]:
    """Register the decorated function as a task that ``task._target_`` can name.

    Args:
        compose: Builds the task's typed arguments from a :class:`TaskContext` and calls it.
        read: Reads the task's input (default: the configured ``dataset``).
        calls: The config keys whose models the task calls (its pre-flight).
        writes: The config keys of the dirs it writes besides its job dir (checked before the run).
    """

    def register(fn: F) -> F:
        setattr(fn, _SPEC, TaskSpec(compose, read, calls if callable(calls) else tuple(calls), tuple(writes)))
        return fn

    return register


class OutputsUnwritable(Exception):
    """A task's job dir cannot be written: compose says what finished and how to resume, then raises ``fault``."""

    def __init__(self, fault: OSError, job_dir: Path, instances: Sequence[Any], resume: str, multirun: bool) -> None:
        super().__init__(str(fault))
        self.fault, self.job_dir, self.instances, self.resume, self.multirun = (
            fault,
            job_dir,
            instances,
            resume,
            multirun,
        )


def task_spec(target: str) -> TaskSpec:
    """The :class:`TaskSpec` of the task named by ``target`` (a ``task._target_``); importing it registers it.

    Raises:
        ValueError: ``target`` names no function decorated with :func:`task`.
    """
    try:
        spec = getattr(get_object(target), _SPEC, None)
    except Exception as e:  # noqa: BLE001 - Hydra's error for an unimportable path
        raise ValueError(f"task._target_={target} cannot be imported: {e}{renamed_target(target)}") from e
    if not isinstance(spec, TaskSpec):
        raise ValueError(f"task._target_={target} is not a cts task (decorate it with cts.tasks.registry.task)")
    return spec
