"""Hydra plugin: every ``conf/model/<name>.yaml`` is an option of every LLM role group."""
