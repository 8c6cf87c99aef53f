"""The config files a launch's Hydra compositions read, each read and parsed once per launch.

Hydra's loader builds a new ``CachingConfigRepository`` for every composition, so each job
it composes reads and parses every YAML file of the defaults tree again (about 45 ms of a
130 ms composition here). :class:`ConfigFiles` keeps what the repository loaded for the
compositions of one launch (``ComposedJobs``): :meth:`ConfigFiles.loader` hands out a
shallow copy of Hydra's loader whose repository loads a path once and then returns deep
copies, because Hydra changes what it loads while composing (``_extract_defaults_list``,
``InputDefault.update_parent``, the schema merge).

Nothing shared is changed: Hydra's loader, its repository and its class stay as they were, so
a composition that does not go through the copy (another thread's, a later launch's) reads
the files as before.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.config_repository import IConfigRepository
from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigResult, ConfigSource

_Key = tuple[tuple[tuple[str, str | None, str | None], ...], str]


class ConfigFiles:
    """What one launch's compositions loaded, by search path and config path (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loaded: dict[_Key, ConfigResult | None] = {}

    def loader(self, loader: Any) -> Any:
        """A copy of ``loader`` that reads each config file once for this launch (``loader`` if not Hydra's own).

        Args:
            loader: Hydra's config loader; it is not changed.
        """
        if not isinstance(loader, ConfigLoaderImpl) or not isinstance(loader.repository, IConfigRepository):
            return loader
        reading_once: Any = copy.copy(loader)  # Hydra types its repository as ConfigRepository; it uses the interface
        reading_once.repository = _ReadOnce(loader.repository, self)
        return reading_once

    def load(self, key: _Key, read: Any) -> ConfigResult | None:
        """A fresh copy of what ``read()`` returned the first time ``key`` was loaded."""
        with self._lock:
            known = key in self._loaded
            loaded = self._loaded.get(key)
        if not known:
            loaded = read()
            with self._lock:
                loaded = self._loaded.setdefault(key, loaded)
        return copy.deepcopy(loaded)


class _ReadOnce(IConfigRepository):
    """Hydra's config repository, its loads served from a launch's :class:`ConfigFiles`.

    Hydra deep-copies the loader's repository into each composition's ``CachingConfigRepository``
    (which may then move its search path): the copy keeps the same :class:`ConfigFiles`.
    """

    def __init__(self, inner: IConfigRepository, files: ConfigFiles) -> None:
        self.inner = inner
        self.files = files

    def __deepcopy__(self, memo: dict[int, Any]) -> _ReadOnce:
        return _ReadOnce(copy.deepcopy(self.inner, memo), self.files)

    def load_config(self, config_path: str) -> ConfigResult | None:
        sources = tuple((type(s).__name__, s.provider, s.path) for s in self.inner.get_sources())
        return self.files.load((sources, config_path), lambda: self.inner.load_config(config_path))

    def get_schema_source(self) -> ConfigSource:
        return self.inner.get_schema_source()

    def group_exists(self, config_path: str) -> bool:
        return self.inner.group_exists(config_path)

    def config_exists(self, config_path: str) -> bool:
        return self.inner.config_exists(config_path)

    def get_group_options(self, group_name: str, results_filter: ObjectType | None = ObjectType.CONFIG) -> list[str]:
        return self.inner.get_group_options(group_name, results_filter)

    def get_sources(self) -> list[ConfigSource]:
        return self.inner.get_sources()

    def initialize_sources(self, config_search_path: ConfigSearchPath) -> None:
        self.inner.initialize_sources(config_search_path)
