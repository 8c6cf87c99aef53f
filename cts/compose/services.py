"""Composition-side resources of one job and the factories that hand them to components.

:class:`Services` holds the job's shared resources (the offline corpus, the BM25 index,
the LLM runtime, the tool cache), each built at most once per job and only when some
component needs it. Components never see it: the builder (:func:`cts.compose.app.build_node`)
calls :func:`component_arguments`, which gives each component exactly what its
signature asks for, by parameter type:

- ``Chat``: a chat client for the model spec the config gives under that key
  (``clarifier.model`` -> the clarifier's client), from :func:`chat_client`;
- ``Corpus``, ``CorpusIndex``, ``PlaceLexicon``, ``ToolCache``, ``CacheDir``: the job's one;
- ``max_reasks`` left unset in the config: ``services.llm.max_reasks`` (a parameter, or a field of
  the component's settings object).

:func:`local_llm_served` runs the job inside its local LLM server (``services.local_llm``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import logging
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from cts.compose.schema import LLM
from cts.compose.schema import Services as ServicesSchema
from cts.core.types import CacheDir

if TYPE_CHECKING:
    from cts.corpus.index import CorpusIndex
    from cts.corpus.wiki import Corpus
    from cts.llm import Chat, LLMRuntime, LocalLLMServer, ModelSpec
    from cts.search.toolcache import ToolCache
    from cts.text.lexicon import PlaceLexicon

log = logging.getLogger(__name__)
T = TypeVar("T")

_CORPUS_LANG = ServicesSchema().corpus_lang


class Services:
    """Per-job container of shared resources.

    Attributes:
        cache_dir: Directory outside git for indexes, datasets and response caches.
        settings: The job's ``services`` config (corpus language, llm runtime, ...).
    """

    def __init__(self, cache_dir: Path, settings: Mapping[str, Any] | None = None) -> None:
        self.cache_dir = Path(cache_dir)
        self.settings: Mapping[str, Any] = settings or {}
        self._memo: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"Services(cache_dir={str(self.cache_dir)!r})"

    def memo(self, key: str, build: Callable[[], T]) -> T:
        """Return the resource stored under ``key``, building it on first use."""
        if key not in self._memo:
            self._memo[key] = build()
        return self._memo[key]

    @property
    def corpus(self) -> Corpus:
        """The offline Wikipedia corpus (read from the installed package; one copy per process)."""
        return self.memo("corpus", lambda: shared_corpus(self.settings.get("corpus_lang", _CORPUS_LANG)))

    @property
    def index(self) -> CorpusIndex:
        """BM25 index over :attr:`corpus`, cached on disk under :attr:`cache_dir` (one copy per process)."""
        return self.memo(
            "index", lambda: shared_index(self.settings.get("corpus_lang", _CORPUS_LANG), str(self.cache_dir))
        )

    @property
    def llm(self) -> LLMRuntime:
        """The job's LLM runtime: response cache, per-endpoint limits, accounting."""
        from cts.sweep import (
            shared_llm_runtime,  # a sweep session shares one across its jobs
        )

        return self.memo("llm", lambda: shared_llm_runtime(self.settings.get("llm", {}), self.cache_dir))

    def usage_scope(self) -> contextlib.AbstractContextManager[Mapping[str, Mapping[str, float]]]:
        """Per-instance usage accounting of every LLM call made inside the block."""
        from cts.llm import (
            usage_scope,  # light: litellm is imported on the first call only
        )

        return usage_scope()

    def counters(self) -> dict[str, float]:
        """Counters of every built resource that keeps some (e.g. tool-cache hits)."""
        out: dict[str, float] = {}
        for resource in self._memo.values():
            counters = getattr(resource, "counters", None)
            if callable(counters):
                out.update({k: float(v) for k, v in counters().items()})
        return out


@contextlib.contextmanager
def local_llm_served(services: Services, server: LocalLLMServer | None, job_dir: Path) -> Iterator[Services]:
    """The job's services, with its local LLM server running for the block when one is configured.

    The server's ``api_base`` becomes ``services.llm.api_base`` (every role calls it) unless that
    is set: an explicit one wins (a gateway or a logging proxy in front of the server). The
    config keeps its own value, so the fingerprint does not change with the server's port, and
    the response cache keys the server's calls by what it serves (:meth:`LocalLLMServer.identity`),
    so a rerun on another port is served from the cache.

    Args:
        services: The job's services (nothing built yet).
        server: The ``services.local_llm`` component (None = no local server).
        job_dir: Where the server's log goes.

    Raises:
        InputError: The server cannot start (a package missing, no answer in time), with the reason.
    """
    if server is None:
        yield services
        return
    from cts.compose.errors import InputError
    from cts.llm import LocalServerError

    with contextlib.ExitStack() as stack:
        try:
            api_base = stack.enter_context(server.serve(job_dir, services.cache_dir))
        except LocalServerError as exc:
            raise InputError([str(exc)]) from exc
        llm = dict(services.settings.get("llm") or {})
        served = Services(
            services.cache_dir, {**services.settings, "llm": {**llm, "api_base": llm.get("api_base") or api_base}}
        )
        if llm.get("api_base"):  # a gateway in front of the server: the calls name it
            yield served
            return
        with served.llm.endpoint_identity(api_base, server.identity(services.cache_dir)):
            yield served


def chat_client(services: Services, model: ModelSpec | Mapping[str, Any], role: str) -> Chat:
    """A client of ``model`` on the job's LLM runtime, its usage booked under ``role``."""
    from cts.llm import ModelSpec

    return services.llm.client(ModelSpec.coerce(model), role=role)


@functools.cache
def shared_corpus(lang: str) -> Corpus:
    """The corpus of ``lang``, read once per process: the jobs of a sweep share it (read-only, ~15 MB)."""
    from cts.corpus.wiki import load_corpus

    return load_corpus(lang)


@functools.cache
def shared_index(lang: str, cache_dir: str) -> CorpusIndex:
    """The BM25 index over :func:`shared_corpus`, loaded once per process and cache dir."""
    from cts.corpus.index import load_or_build_index

    return load_or_build_index(shared_corpus(lang), Path(cache_dir))


def tool_cache(services: Services) -> ToolCache:
    """The job's shared tool cache: the LLM cache's URL if set, else ``<cache_dir>/tool_cache.sqlite``."""
    from cts.search.toolcache import TOOL_CACHE_FILE, TOOL_TABLE, ToolCache

    cache = (services.settings.get("llm") or {}).get("cache") or {}
    mode = cache.get("mode", LLM().cache.mode)
    url = cache.get("url")
    if url:
        return services.memo("tool_cache", lambda: ToolCache(url, mode, TOOL_TABLE))
    return services.memo("tool_cache", lambda: ToolCache(Path(services.cache_dir) / TOOL_CACHE_FILE, mode))


def place_lexicon(services: Services) -> PlaceLexicon:
    """Place names of the offline corpus, once per job (see :func:`cts.text.lexicon.corpus_places`)."""
    from cts.text.lexicon import PlaceLexicon

    return services.memo("place_lexicon", lambda: PlaceLexicon.of_corpus(services.corpus))


def concretiser_places(services: Services) -> tuple[str, ...]:
    """Built-in places plus the offline corpus's places when a corpus is available (backbone stability)."""
    from cts.text.lexicon import BUILTIN_PLACES_EN, BUILTIN_PLACES_ZH, corpus_places

    places = set(BUILTIN_PLACES_EN) | set(BUILTIN_PLACES_ZH)
    try:
        places |= set(corpus_places(services.corpus))
    except Exception as e:  # noqa: BLE001 - no corpus (package missing): the built-in list serves
        log.info("no corpus place lexicon (%s); using the built-in list", e)
    return tuple(sorted(p for p in places if len(p) >= 2))


RESOURCES: dict[str, Callable[[Services], Any]] = {
    "Corpus": lambda s: s.corpus,
    "CorpusIndex": lambda s: s.index,
    "PlaceLexicon": place_lexicon,
    "ToolCache": tool_cache,
    "CacheDir": lambda s: CacheDir(s.cache_dir),
}
"""Parameter type name -> the job's resource of that type (never a config key)."""
CHAT = "Chat"
SETTINGS = "settings"
"""The parameter a component takes its knobs in, as one frozen dataclass (:func:`settings_parameter`)."""
_NAME = re.compile(r"[A-Za-z_][\w.]*")


def type_name(annotation: Any) -> str:
    """The one type an annotation names, optional or not (``"Chat | None"`` -> ``Chat``), else ``""``."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    names = [n.rsplit(".", 1)[-1] for n in _NAME.findall(text) if n not in ("None", "Optional", "typing.Optional")]
    return names[0] if len(names) == 1 else ""


def resource_parameters(target: Callable[..., Any]) -> set[str]:
    """Parameters of ``target`` the builder fills from the job's resources (not config keys)."""
    params = inspect.signature(target).parameters
    return {name for name, p in params.items() if type_name(p.annotation) in RESOURCES}


def settings_parameter(target: Callable[..., Any]) -> tuple[str, type] | None:
    """``target``'s ``settings`` parameter and its dataclass, when it takes its config keys as one frozen object.

    The config keeps the keys flat (``search.max_llm_calls``); the builder binds the ones that are
    the dataclass's fields into it, and the unknown-key check accepts them.
    """
    p = inspect.signature(target).parameters.get(SETTINGS)
    found = getattr(sys.modules.get(getattr(target, "__module__", "")), type_name(p.annotation), None) if p else None
    return (SETTINGS, found) if isinstance(found, type) and dataclasses.is_dataclass(found) else None


def component_arguments(target: Callable[..., Any], config: Mapping[str, Any], services: Services) -> dict[str, Any]:
    """The arguments of ``target``: its config values, with chat clients and resources filled in.

    Args:
        target: The component's class or factory.
        config: Its config values, nested components already built.
        services: The job's resources.
    """
    params = inspect.signature(target).parameters
    out = dict(config)
    for name, p in params.items():
        kind = type_name(p.annotation)
        if kind == CHAT and out.get(name) is not None:
            out[name] = chat_client(services, out[name], role=name)  # the component names its role
        elif kind in RESOURCES:
            out[name] = RESOURCES[kind](services)
    bound = settings_parameter(target)
    fields = {f.name for f in dataclasses.fields(bound[1])} if bound is not None and bound[0] not in out else set()
    if ("max_reasks" in params or "max_reasks" in fields) and out.get("max_reasks") is None:
        out["max_reasks"] = services.llm.settings.max_reasks
    if fields and bound is not None:
        out[bound[0]] = bound[1](**{k: out.pop(k) for k in list(out) if k in fields})
    return out
