"""cts: clarify-then-search, evaluating clarifying questions by deep-search nugget restoration."""

from cts._util.moved import install as _install_moved_paths

_install_moved_paths()

__version__ = "0.1.0"
