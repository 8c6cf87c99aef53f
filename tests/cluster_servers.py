"""Real services for the cluster tests, started on 127.0.0.1 with their data in temp dirs.

PostgreSQL (``initdb``/``pg_ctl`` as the ``postgres`` user: they refuse root), munge
(``munged`` as the ``munge`` user, with its own socket and key), a one-node Slurm
cluster (``slurmctld`` + ``slurmd``, proctrack/linuxproc, task/none; its own ports,
state and spool dirs, ``AuthInfo=socket=`` the private munged) and an
``mlflow server`` on PostgreSQL. Each ``start_*`` returns a handle or raises
:class:`Unavailable` with the reason; fixtures turn that into a skip.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


class Unavailable(RuntimeError):
    """A service cannot start on this machine (the message says why)."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(check, timeout_s: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-2000:] if log is not None and log.exists() else ""
    raise Unavailable(f"{what} did not come up in {timeout_s:.0f} s\n{tail}")


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _service_dir(prefix: str, owner: str | None = None) -> Path:
    # Not under pytest's tmp_path: that is root-only (0700), and postgres/munge
    # must reach their own data dirs.
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    if owner is not None:
        shutil.chown(path, owner, owner)
    return path


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


# --------------------------------------------------------------------------- PostgreSQL


@dataclass(frozen=True)
class Postgres:
    """A running PostgreSQL server (trust auth on loopback, superuser ``postgres``)."""

    port: int
    data_dir: Path

    def url(self, db: str = "postgres") -> str:
        """libpq URL of database ``db``."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{db}"

    def create_db(self, name: str) -> str:
        """Create database ``name``; return its URL."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


def pg_bindir() -> Path:
    """Directory of initdb/pg_ctl: ``pg_config --bindir``, else Debian's layout."""
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True).stdout.strip()
        if out and (Path(out) / "initdb").exists():
            return Path(out)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    if shutil.which("initdb"):
        return Path(shutil.which("initdb")).parent  # type: ignore[arg-type]
    raise Unavailable("PostgreSQL server binaries (initdb, pg_ctl) are not installed")


def _as_user(user: str, cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", user, "--", *cmd]


@contextmanager
def postgres() -> Iterator[Postgres]:
    """Start a PostgreSQL server on a free loopback port; stop it and delete its data after."""
    bindir = pg_bindir()
    if os.geteuid() == 0 and not _user_exists("postgres"):
        raise Unavailable("running as root and there is no 'postgres' user to run initdb/pg_ctl as")
    base = _service_dir("cts-pg-", "postgres" if os.geteuid() == 0 else None)
    data, log, port = base / "data", base / "pg.log", free_port()
    user = "postgres"
    try:

        def run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
            return subprocess.run(_as_user(user, cmd), capture_output=True, text=True)

        init = run([str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "-E", "UTF8"])
        if init.returncode:
            raise Unavailable(f"initdb failed: {init.stderr[-1000:]}")
        opts = f"-c listen_addresses=127.0.0.1 -p {port} -k {base} -c fsync=off -c max_connections=200"
        start = run([str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", opts, "-w", "start"])
        if start.returncode:
            raise Unavailable(
                f"pg_ctl start failed: {start.stderr[-500:]} {log.read_text()[-1500:] if log.exists() else ''}"
            )
        try:
            yield Postgres(port, data)
        finally:
            run([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"])
    finally:
        shutil.rmtree(base, ignore_errors=True)


# --------------------------------------------------------------------------- munge + Slurm


@dataclass(frozen=True)
class Munge:
    """A private munged: its own socket and key, so concurrent test runs never share one."""

    socket: Path

    def works(self) -> bool:
        """Whether a credential made on this socket decodes on it."""
        return _munge_works(self.socket)


def _munge_works(sock: Path) -> bool:
    cred = subprocess.run(["munge", f"--socket={sock}", "-n"], capture_output=True)
    if cred.returncode:
        return False
    return subprocess.run(["unmunge", f"--socket={sock}"], input=cred.stdout, capture_output=True).returncode == 0


@contextmanager
def munge() -> Iterator[Munge]:
    """Start munged (as ``munge`` when root) on a socket and key in a fresh temp dir; stop it after.

    Never the system socket: two test runs on one machine (two checkouts, CI beside a
    dev run) each get their own munged, and stopping one cannot break the other.
    """
    for tool in ("munged", "munge", "unmunge"):
        if not shutil.which(tool) and not Path(f"/usr/sbin/{tool}").exists():
            raise Unavailable(f"{tool} is not installed (apt-get install munge)")
    owner = "munge" if os.geteuid() == 0 and _user_exists("munge") else None
    if os.geteuid() == 0 and owner is None:
        raise Unavailable("running as root and there is no 'munge' user to run munged as")
    base = _service_dir("cts-munge-", owner)
    key, pid_file, log = base / "munge.key", base / "munged.pid", base / "munged.log"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    if owner is not None:
        shutil.chown(key, owner, owner)
    sock = base / "munge.socket"
    cmd = [
        "munged",
        f"--socket={sock}",
        f"--key-file={key}",
        f"--pid-file={pid_file}",
        f"--log-file={log}",
        f"--seed-file={base / 'munged.seed'}",
        "--num-threads=2",
    ]
    started = subprocess.run(_as_user(owner, cmd) if owner else cmd, capture_output=True, text=True)
    try:
        if started.returncode:
            raise Unavailable(
                f"munged failed to start: {started.stderr.strip()} {log.read_text()[-1000:] if log.exists() else ''}"
            )
        _wait(lambda: _munge_works(sock), 10, "munged", log)
        yield Munge(sock)
    finally:
        if pid_file.exists():
            _kill(int(pid_file.read_text().strip() or 0))
        shutil.rmtree(base, ignore_errors=True)


def _kill(pid: int, timeout_s: float = 10) -> None:
    if pid <= 0:  # an empty pid file; os.kill(0) would signal our own process group
        return
    try:
        os.kill(pid, 15)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass


@dataclass(frozen=True)
class Slurm:
    """A one-node Slurm cluster; ``env`` carries ``SLURM_CONF`` for its commands."""

    conf: Path
    base: Path
    partition: str

    @property
    def env(self) -> dict[str, str]:
        """The environment its clients (sbatch, squeue, scancel) need."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}


def _slurm_conf(base: Path, node: str, cpus: int, mem_mb: int, munge_socket: Path) -> str:
    # Everything this cluster touches is its own: ports, state/spool dirs, pid and log
    # files, and (AuthInfo socket=, read by auth/munge and cred/munge in Slurm 22.05) munged.
    # The timings are a test cluster's: schedule on every event and every 2 s (not 60 s),
    # backfill every second, no batch-scheduling delay, short kill/complete waits.
    ctld, slurmd = free_port(), free_port()
    return f"""\
ClusterName=ctstest
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld}
SlurmdPort={slurmd}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={base}/state
SlurmdSpoolDir={base}/spool
SlurmctldPidFile={base}/slurmctld.pid
SlurmdPidFile={base}/slurmd.pid
SlurmctldLogFile={base}/slurmctld.log
SlurmdLogFile={base}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_interval=2,bf_interval=1
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
MinJobAge=3600
KillWait=5
CompleteWait=0
MessageTimeout=5
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""


@contextmanager
def slurm() -> Iterator[Slurm]:
    """Start slurmctld and slurmd for one node on loopback (needs root and munge)."""
    for tool in ("slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol"):
        if not shutil.which(tool) and not Path(f"/usr/sbin/{tool}").exists():
            raise Unavailable(f"{tool} is not installed (apt-get install slurm-wlm)")
    if os.geteuid() != 0:
        raise Unavailable("slurmd must run as root to launch jobs")
    with munge() as auth:
        base = _service_dir("cts-slurm-")
        for sub in ("state", "spool"):
            (base / sub).mkdir()
        node = socket.gethostname().split(".")[0]
        mem_mb = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20 * 0.8)
        conf = base / "slurm.conf"
        conf.write_text(_slurm_conf(base, node, os.cpu_count() or 1, mem_mb, auth.socket))
        cluster = Slurm(conf, base, "debug")
        env = cluster.env
        try:
            subprocess.run(["slurmctld", "-c", "-f", str(conf)], env=env, check=True, capture_output=True)
            subprocess.run(["slurmd", "-f", str(conf), "-N", node], env=env, check=True, capture_output=True)
            _wait(lambda: _node_idle(env), 60, "slurm node", base / "slurmd.log")
            yield cluster
        except subprocess.CalledProcessError as exc:
            raise Unavailable(f"{exc.cmd[0]} failed: {exc.stderr!r}") from exc
        finally:
            subprocess.run(["scancel", "--full", "-u", "root"], env=env, capture_output=True)
            for pid_file in ("slurmd.pid", "slurmctld.pid"):
                if (base / pid_file).exists():
                    _kill(int((base / pid_file).read_text().strip() or 0))
            shutil.rmtree(base, ignore_errors=True)


def _node_idle(env: dict[str, str]) -> bool:
    out = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True).stdout
    return "idle" in out


# --------------------------------------------------------------------------- mlflow server


@dataclass(frozen=True)
class MLflowServer:
    """``mlflow server`` with a PostgreSQL backend store and a local artifact root."""

    uri: str
    artifact_root: Path
    backend_url: str


@contextmanager
def mlflow_server(pg: Postgres) -> Iterator[MLflowServer]:
    """Start ``mlflow server`` on a free port, backed by a fresh database of ``pg``."""
    db = pg.create_db(f"mlflow_{free_port()}")
    backend = db.replace("postgresql://", "postgresql+psycopg://", 1)
    base = Path(tempfile.mkdtemp(prefix="cts-mlflow-"))
    artifacts, port, log = base / "artifacts", free_port(), base / "server.log"
    cmd = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--backend-store-uri",
        backend,
        "--artifacts-destination",
        str(artifacts),
        "--serve-artifacts",
        "--workers",
        "1",
    ]
    # No job execution: it forks a job runner and six huey consumers (each a full MLflow import,
    # ~400 MB) for GenAI jobs no test uses; tracking and artifact serving do not need them.
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    try:
        _wait(lambda: _http_ok(port) or proc.poll() is not None, 120, "mlflow server", log)
        if proc.poll() is not None:
            raise Unavailable(f"mlflow server exited {proc.returncode}: {log.read_text()[-2000:]}")
        yield MLflowServer(f"http://127.0.0.1:{port}", artifacts, backend)
    finally:
        try:
            os.killpg(proc.pid, 15)
            proc.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, 9)
        shutil.rmtree(base, ignore_errors=True)


def _http_ok(port: int) -> bool:
    import urllib.request

    if not _port_open(port):
        return False
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False
