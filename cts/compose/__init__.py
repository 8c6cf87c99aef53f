"""Composition: the only package that reads the config (build, pre-flight, services, errors, Hydra callbacks)."""
