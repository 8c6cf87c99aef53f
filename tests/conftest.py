"""Shared fixtures. Every test is offline: HTTP goes only to servers tests start on 127.0.0.1."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_MODE", "PRODUCTION")
# A shell without job control starts a background command (`pytest ... &`) with SIGINT ignored, and
# every command a test starts would inherit that: the tests of Ctrl-C need it as a terminal has it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    with contextlib.suppress(ValueError):  # not the main thread: leave it
        signal.signal(signal.SIGINT, signal.default_int_handler)

from tests.llm_server import llm_server_fixture  # noqa: E402,F401 - the scripted OpenAI-compatible server

REPO = Path(__file__).resolve().parents[1]

# Fixtures shared across packages of tests, registered here (a test module never imports another).
pytest_plugins = ["tests.search.fakes", "tests.analysis.fakes"]


def _cache_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's shared cache dir (``CTS_TEST_CACHE_DIR``, else ``cts-cache`` in the run's basetemp)."""
    env = os.environ.get("CTS_TEST_CACHE_DIR")
    if env:
        return Path(env)
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # <run's basetemp>/popen-gw<N>: the run's is shared
        base = base.parent
    return base / "cts-cache"


@pytest.fixture(scope="session", autouse=True)
def _cache_env(tmp_path_factory: pytest.TempPathFactory) -> None:
    """``CTS_CACHE_DIR`` of the tests and the commands they start: the run's cache, never the user's.

    What cts keeps there without a ``paths.cache_dir`` (e.g. the empty MLflow store each new store
    is copied from) is then built once per run, by whichever test needs it first.
    """
    os.environ.setdefault("CTS_CACHE_DIR", str(_cache_path(tmp_path_factory)))


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache (BM25 index, demo set, response caches) per test run, shared by its xdist workers.

    The index and the demo set are built once, by the first worker to get here, under a file
    lock (each worker building its own cost ~15 s of CPU apiece). ``CTS_TEST_CACHE_DIR`` points
    it at a warm cache to skip the one-time builds.
    """
    path = _cache_path(tmp_path_factory)
    from filelock import FileLock

    with FileLock(str(path) + ".lock"):
        if not (path / ".warm").exists():
            _warm(path)
    return path


def _warm(path: Path) -> None:
    """Build the BM25 index and the default demo set (200 instances, seed 0) into ``path``."""
    from cts.compose.services import Services
    from cts.demo.loading import load_demo

    services = Services(cache_dir=path, settings={"corpus_lang": "en-us"})
    load_demo(services.corpus, services.index, services.cache_dir, n=200, seed=0)
    (path / ".warm").touch()


@pytest.fixture(scope="session")
def services(cache_dir: Path):  # noqa: ANN201 - Services (imported lazily)
    """Offline services over the real installed corpus."""
    from cts.compose.services import Services

    return Services(cache_dir=cache_dir, settings={"corpus_lang": "en-us"})


@pytest.fixture(scope="session")
def offline_jobs(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> dict[int, Path]:
    """Job dirs of one offline job (rules_scope, k=1, 12 instances) run with ``repeats`` 1 and 3, by repeats.

    The offline roles are deterministic, so the three repeats of an instance are identical.
    """
    from tests.runs import offline_job

    root = tmp_path_factory.mktemp("offline-jobs")
    return {n: offline_job(root / f"repeats{n}", cache_dir, "k=1", "limit=12", f"repeats={n}") for n in (1, 3)}


# Real services for the cluster tests (tests/cluster_servers.py): started once per session on
# loopback, skipped with the reason when this machine cannot run them.
@pytest.fixture(scope="session")
def pg():  # noqa: ANN201 - cluster_servers.Postgres
    """A PostgreSQL server in a temp data dir."""
    from tests import cluster_servers

    try:
        with cluster_servers.postgres() as server:
            yield server
    except cluster_servers.Unavailable as exc:
        pytest.skip(f"PostgreSQL cannot start here: {exc}")


@pytest.fixture(scope="session")
def slurm_cluster():  # noqa: ANN201 - cluster_servers.Slurm
    """A one-node Slurm cluster (munged, slurmctld, slurmd); sets SLURM_CONF for this process."""
    from tests import cluster_servers

    try:
        with cluster_servers.slurm() as cluster:
            old = os.environ.get("SLURM_CONF")
            os.environ["SLURM_CONF"] = str(cluster.conf)
            try:
                yield cluster
            finally:
                os.environ.pop("SLURM_CONF") if old is None else os.environ.__setitem__("SLURM_CONF", old)
    except cluster_servers.Unavailable as exc:
        pytest.skip(f"Slurm cannot start here: {exc}")


@pytest.fixture(scope="session")
def mlflow_server(pg):  # noqa: ANN001,ANN201 - cluster_servers.MLflowServer
    """``mlflow server`` on a PostgreSQL backend store with a local artifact root."""
    from tests import cluster_servers

    try:
        with cluster_servers.mlflow_server(pg) as server:
            yield server
    except cluster_servers.Unavailable as exc:
        pytest.skip(f"mlflow server cannot start here: {exc}")


@pytest.hookimpl(trylast=True)  # after pytest-xdist's own hook, which names the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow tests first (stable otherwise), so parallel workers do not end on one long test.

    Under ``-n ... --dist loadgroup`` work is handed out in collection order; a slow test
    collected last would leave the other workers idle while it runs.
    """
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    if getattr(config.option, "loadgroup", False):  # an xdist worker under --dist loadgroup
        _name_xdist_groups(items)


def _name_xdist_groups(items: list[pytest.Item]) -> None:
    """Suffix each ``xdist_group`` test's node id with ``@<group>``, as pytest-xdist itself does.

    pytest-xdist 3.8 sets the suffix on ``Item._nodeid``, which pytest 9.2 no longer reads
    (pytest-dev/pytest-xdist#1386): the groups would be silently ignored and, e.g., each
    cluster test start its own PostgreSQL and Slurm on another worker. A no-op where the
    suffix is already there (an xdist with the fix).
    """
    for item in items:
        names = sorted(
            {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
        )
        suffix = "@" + "_".join(names)
        if names and not item.nodeid.endswith(suffix):
            from _pytest.nodeid import NodeId  # pytest >= 9.2: structured node ids

            item._id = NodeId.parse(item.nodeid + suffix)  # type: ignore[attr-defined]
