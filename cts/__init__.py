"""cts: clarify-then-search, evaluating clarifying questions by deep-search nugget restoration."""

__version__ = "0.1.0"
