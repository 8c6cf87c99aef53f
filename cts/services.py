"""Shared, lazily built resources of one job: the offline corpus, the BM25 index, the LLM runtime.

The builder (:func:`cts.app.build_node`) hands them to a component only when its
signature has a ``services`` parameter (the LLM roles, the rule UA, extractive
search, WebDancer, the local-corpus provider and fetcher, the demo set); each
resource is built at most once per job and only when some component asks for it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from cts.corpus import Corpus
    from cts.index import CorpusIndex
    from cts.llm import LLMRuntime

T = TypeVar("T")


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
        return self._memo[key]  # type: ignore[no-any-return]

    @property
    def corpus(self) -> Corpus:
        """The offline Wikipedia corpus (read from the installed package)."""
        from cts.corpus import load_corpus

        return self.memo("corpus", lambda: load_corpus(self.settings.get("corpus_lang", "en-us")))

    @property
    def index(self) -> CorpusIndex:
        """BM25 index over :attr:`corpus`, cached on disk under :attr:`cache_dir`."""
        from cts.index import load_or_build_index

        return self.memo("index", lambda: load_or_build_index(self.corpus, self.cache_dir))

    @property
    def llm(self) -> LLMRuntime:
        """The job's LLM runtime: response cache, per-endpoint limits, accounting."""
        from cts.sweep import shared_llm_runtime  # a sweep session shares one across its jobs

        return self.memo("llm", lambda: shared_llm_runtime(self.settings.get("llm", {}), self.cache_dir))

    def usage_scope(self) -> contextlib.AbstractContextManager[Mapping[str, Mapping[str, float]]]:
        """Per-instance usage accounting of every LLM call made inside the block."""
        from cts.llm import usage_scope  # light: litellm is imported on the first call only

        return usage_scope()

    def prompt_files(self) -> list[Path]:
        """Prompt files the job's components loaded (logged with every run)."""
        from cts.prompts import used_prompts

        return [p.path for p in used_prompts().values() if p.path is not None]

    def prompt_versions(self) -> dict[str, str]:
        """Name -> content hash of every prompt loaded, plus ``_all``: one hash over them."""
        from cts.prompts import prompts_version, used_prompts

        used = used_prompts()
        return {**{n: p.version for n, p in sorted(used.items())}, "_all": prompts_version()} if used else {}

    def stats(self) -> dict[str, float]:
        """Counters of every built resource that keeps some (e.g. tool-cache hits)."""
        out: dict[str, float] = {}
        for resource in self._memo.values():
            stats = getattr(resource, "stats", None)
            if callable(stats):
                out.update({k: float(v) for k, v in stats().items()})
        return out
