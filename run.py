"""cts entry point: `python run.py [-m] [group=option ...]` (see README)."""

import gc

# Start-up (imports, composing every job's config) builds about a million long-lived objects, and
# each full collection of the cyclic GC rescans them all: about 1 s before a sweep's first request.
# cts turns it back on, with those objects frozen, once the jobs are set up (cts._util.startup).
gc.disable()

import os
import sys
from importlib.resources.abc import Traversable
from pathlib import Path

import hydra
from omegaconf import DictConfig

from cts._util.switches import spell_out_switches
from cts.compat.renames import renamed_on_command_line
from cts.compose.component_keys import component_key_problems
from cts.compose.validate import command_line_problems, register_resolvers
from cts.core.errors import ConfigError, exit_on_error

os.environ.setdefault("PROJECT_ROOT", str(Path(__file__).resolve().parent))
register_resolvers()  # ${cts_pid:} in the default run dir (conf/config.yaml)


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    """Compose the config and run the configured task; returns the sweep metric.

    A cts error ends the job with its ``error:`` lines and exit status (cts.core.errors).
    """
    from cts.compose.app import run

    with exit_on_error():
        return run(cfg)
    return None  # not reached: exit_on_error ends the process on an error


def _config_dirs() -> list[Traversable]:
    """conf/ and the command line's own config dirs (an old option name may be a user's own file there)."""
    from hydra_plugins.cts_model_roles.cts_model_roles import command_line_dirs

    return [Path(__file__).resolve().parent / "conf", *command_line_dirs(sys.argv)]


def _command_line() -> None:
    """Refuse a retired name; spell out ``plan=true`` (so ``plan.calibration_n=10`` beside it has a node)."""
    if renamed := renamed_on_command_line(sys.argv[1:], _config_dirs()):  # a name retired since the first release
        raise ConfigError("\n".join(f"error: {line}" for line in renamed))
    from hydra_plugins.cts_model_roles.cts_model_roles import MEMBER_GROUPS, ROLES

    dirs, args = _config_dirs(), sys.argv[1:]
    if unknown := command_line_problems(args, dirs, (*ROLES, *MEMBER_GROUPS)) + component_key_problems(args, dirs):
        raise ConfigError("\n".join(f"error: {line}" for line in unknown))
    try:
        sys.argv[1:] = spell_out_switches(sys.argv[1:])
    except ValueError as e:
        raise ConfigError(f"error: {e}") from None


if __name__ == "__main__":
    with exit_on_error():
        _command_line()
    main()
