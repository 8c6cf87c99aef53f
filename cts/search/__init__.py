"""Search backends: implementations of :class:`cts.types.SearchBackend`.

``extractive`` is the non-LLM baseline over the offline corpus; deep-search
agents live beside it.
"""
