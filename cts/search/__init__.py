"""Search backends: implementations of :class:`cts.core.types.SearchBackend`.

``extractive`` is the non-LLM baseline over the offline corpus; deep-search
agents live beside it.
"""
