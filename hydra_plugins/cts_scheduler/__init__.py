"""Hydra launcher ``cts``: every job of a multirun in one process, on one shared schedule."""
