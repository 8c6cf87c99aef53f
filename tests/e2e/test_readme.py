"""The README as a user types it: its fenced command blocks, run verbatim from a fresh copy of the repo.

Which blocks: every fenced block of README.md carries a ``readme-test`` marker (tests/readme_commands.py).
``run setup`` and ``run offline-sweep`` blocks are run here; each ``skip (<reason>)`` block is
reported as a skipped test with its reason. An unmarked block, or a marker naming a recipe this
file does not run, fails :func:`test_every_fenced_block_is_run_or_marked`, so a new recipe cannot
escape. No block of the README routes a recipe to a local server, so none runs against
tests/llm_fakes.py.

What "verbatim" means here:

- **The fresh copy**: the repo's tracked files (``git ls-files``, with their working-tree contents, so
  the README being edited is the one tested) copied into a temp dir; no outputs, venv or caches.
- **The environment**: this process's environment without the project's and the tests' variables
  (``PROJECT_ROOT``, ``VIRTUAL_ENV``, ``PYTHONPATH``, ``CTS_*``, ``HYDRA_*``, ``MLFLOW_*``,
  ``LITELLM_*``) and without this venv on ``PATH``; the one addition is ``CTS_CACHE_DIR`` (the README's
  own setting) = the session's test cache, so the demo set and BM25 index are built once per session.
- **The set-up command**: its first step, ``python3 -m venv --upgrade-deps .venv``, is the only substitution: a real
  install takes minutes (and the pip upgrade needs a registry), so ``.venv`` is created by the current interpreter and sees the current
  venv's installed packages through a ``.pth`` file. The rest, ``. .venv/bin/activate && pip install
  -c constraints.txt -e . && python run.py experiment=offline``, runs as written from the copy's root:
  pip resolves the constraints and installs cts editable from the copy. Later recipes run in that
  venv, as in the user's shell after set-up (``PATH`` and ``VIRTUAL_ENV`` as ``activate`` sets them).
- **No** ``hydra.run.dir``, ``hydra.sweep.dir``, ``tracking.uri`` or ``paths.*`` is added: outputs
  go where a user's go, ``<copy>/outputs`` (runs, multirun, mlflow.db).
- **From another directory** (an empty temp dir) a user types the path to run.py, and only that:
  ``python run.py`` becomes ``python <copy>/run.py``. run.py sets ``PROJECT_ROOT`` to its own dir,
  so the outputs still land in ``<copy>/outputs`` and nothing is written to the working dir (both
  asserted). The set-up command's install steps run from the root only (``-c constraints.txt -e .``
  name the root); its ``python run.py`` steps run from both.

Each test reads what its command added (new dirs under outputs/, new MLflow runs), so the order in
which they run does not matter.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import readme_commands as rc

REPO = Path(__file__).resolve().parents[2]
BLOCKS = rc.blocks((REPO / "README.md").read_text(encoding="utf-8"))
RECIPES = {"setup", "offline-sweep", "release"}
VENV_STEP = "python3 -m venv --upgrade-deps .venv && "
DEMO_SIZE = 200  # the demo set's default size (python -m cts.demo --n 200)
_DROPPED_PREFIXES = ("CTS_", "HYDRA_", "MLFLOW_", "LITELLM_")
_DROPPED = {"PROJECT_ROOT", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"}
WHERE = ["root", "elsewhere"]


@dataclass(frozen=True)
class User:
    """A user's shell after set-up: the fresh copy, an unrelated working dir, the activated venv's env."""

    copy: Path
    elsewhere: Path
    env: dict[str, str]

    @property
    def outputs(self) -> Path:
        return self.copy / "outputs"

    def cwd(self, where: str) -> Path:
        return self.copy if where == "root" else self.elsewhere


@dataclass(frozen=True)
class Outcome:
    """What one command did: exit status and output, the dirs and MLflow runs it added."""

    command: str
    returncode: int
    output: str
    new_dirs: frozenset[Path]
    new_runs: Any  # pandas DataFrame of the runs added to <copy>/outputs/mlflow.db

    def failure(self) -> str:
        return f"$ {self.command}\nexit {self.returncode}\n{self.output[-6000:]}"


def _fresh_copy(dest: Path) -> Path:
    """The tracked files of the repo, as in the working tree, under ``dest``."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: no tracked files to copy")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = REPO / name
        if source.is_file():  # a tracked file deleted in the working tree is not copied
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def _layered_venv(venv: Path) -> None:
    """``python3 -m venv --upgrade-deps .venv``, replaced: a venv of this interpreter that sees this venv's packages.

    A plain path in a ``.pth`` puts this venv's site-packages on ``sys.path`` without running its
    ``.pth`` files, so this checkout's own editable cts stays invisible there.
    """
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    import site

    dirs = [*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])]
    (_site_packages(venv) / "_readme_test_reuse.pth").write_text("\n".join(dirs) + "\n")


def _site_packages(venv: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_path('purelib'))"
    return Path(
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", code], check=True, capture_output=True, text=True
        ).stdout.strip()
    )


def _user_env(venv: Path, cache_dir: Path) -> dict[str, str]:
    """A fresh shell's environment with ``venv`` activated and the shared cache; nothing else added."""
    this_venv_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED and not k.startswith(_DROPPED_PREFIXES)}
    path = [p for p in env.get("PATH", os.defpath).split(os.pathsep) if p and p != this_venv_bin]
    return {
        **env,
        "PATH": os.pathsep.join([str(venv / "bin"), *path]),
        "VIRTUAL_ENV": str(venv),
        "CTS_CACHE_DIR": str(cache_dir),
    }


@pytest.fixture(scope="module")
def user(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> User:
    """The fresh copy with its substituted ``.venv``; the set-up command has not run yet."""
    copy = _fresh_copy(tmp_path_factory.mktemp("fresh-clone").resolve() / "cts")
    _layered_venv(copy / ".venv")
    elsewhere = tmp_path_factory.mktemp("elsewhere").resolve()
    return User(copy, elsewhere, _user_env(copy / ".venv", cache_dir))


def _run_dirs(outputs: Path) -> set[Path]:
    return {p for pattern in ("runs/*", "multirun/*", "multirun/*/*") for p in outputs.glob(pattern) if p.is_dir()}


def _run_ids(outputs: Path) -> set[str]:
    from cts import tracking

    db = outputs / "mlflow.db"
    return set(tracking.search_runs(f"sqlite:///{db}")["run_id"]) if db.exists() else set()


def run_command(user: User, command: str, where: str, env: dict[str, str] | None = None) -> Outcome:
    """Run ``command`` in bash from ``where`` (root or elsewhere); what it added under <copy>/outputs."""
    from cts import tracking

    dirs, ids = _run_dirs(user.outputs), _run_ids(user.outputs)
    proc = subprocess.run(
        ["bash", "-e", "-c", command],
        cwd=user.cwd(where),
        env=env or user.env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    db = user.outputs / "mlflow.db"
    runs = tracking.search_runs(f"sqlite:///{db}") if db.exists() else None
    new_runs = runs[~runs["run_id"].isin(ids)] if runs is not None else None
    return Outcome(
        command, proc.returncode, proc.stdout + proc.stderr, frozenset(_run_dirs(user.outputs) - dirs), new_runs
    )


def _setup_command() -> str:
    text = rc.recipe(BLOCKS, "setup").text.strip()
    assert text.startswith(VENV_STEP), f"the set-up command no longer starts with {VENV_STEP!r}: {text!r}"
    return text


def _run_steps(command: str) -> list[str]:
    return [step for step in command.split(" && ") if step.startswith("python run.py")]


@pytest.fixture(scope="module")
def setup_outcome(user: User) -> Outcome:
    """The set-up command from the copy's root, its venv step substituted (module docstring)."""
    command = _setup_command()[len(VENV_STEP) :]
    # Before activation the shell has no venv: PATH without it, as on a fresh machine.
    fresh = {**user.env, "PATH": user.env["PATH"].split(os.pathsep, 1)[1]}
    fresh.pop("VIRTUAL_ENV")
    return run_command(user, command, "root", env=fresh)


@pytest.fixture(scope="module", params=WHERE)
def sweep_outcome(request: pytest.FixtureRequest, user: User, setup_outcome: Outcome) -> tuple[str, Outcome]:
    """The offline sweep recipe, after set-up, from the root and from elsewhere."""
    assert setup_outcome.returncode == 0, setup_outcome.failure()
    command = rc.recipe(BLOCKS, "offline-sweep").text.strip()
    if request.param == "elsewhere":
        command = rc.retarget(command, user.copy / "run.py")
    return command, run_command(user, command, request.param)


# -- classification -------------------------------------------------------------------------


def test_every_fenced_block_is_run_or_marked():
    assert len(BLOCKS) >= len(RECIPES)
    problems = rc.marker_problems(BLOCKS, RECIPES)
    assert not problems, "\n".join(problems)


def test_unmarked_malformed_and_unknown_blocks_are_problems():
    text = (
        "```bash\necho new recipe\n```\n\n<!-- readme-test: skip -->\n```bash\nls\n```\n"
        "<!-- readme-test: run nope -->\n~~~sh\nls\n~~~\n<!-- readme-test: skip (needs a GPU) -->\n```\nx\n```\n"
    )
    found = rc.blocks(text)
    assert [(b.line, b.lang) for b in found] == [(1, "bash"), (6, "bash"), (10, "sh"), (14, "")]
    problems = rc.marker_problems(found, {"setup"})
    assert [p.split(":")[0] for p in problems] == [
        "README line 1 (```bash)",
        "README line 6 (```bash)",
        "README line 10 (```sh)",
        "recipe 'setup' has no README block marked `run setup`",
    ]
    assert "no marker" in problems[0] and "malformed" in problems[1] and "`run nope`" in problems[2]
    assert rc.marker(found[3]) == rc.Marker("skip", "needs a GPU")


def test_a_user_elsewhere_types_the_path_to_run_py():
    run_py = Path("/some where/cts/run.py")
    assert rc.retarget("python run.py -m k=1,2", run_py) == "python '/some where/cts/run.py' -m k=1,2"
    with pytest.raises(ValueError):
        rc.retarget("python -m cts.report outputs/multirun/x", run_py)
    assert rc.swept_job_names("python run.py -m experiment=offline clarifier=a,b k=1,2") == {
        "clarifier=a,k=1",
        "clarifier=a,k=2",
        "clarifier=b,k=1",
        "clarifier=b,k=2",
    }


@pytest.mark.parametrize(
    "block", [b for b in BLOCKS if (m := rc.marker(b)) and m.action == "skip"], ids=lambda b: f"line{b.line}"
)
def test_block_not_run_here(block: rc.Block):
    pytest.skip(f"README line {block.line}: {rc.marker(block).arg}")


def test_the_readme_test_command_is_what_ci_runs():
    """The set-up block that runs the suite is skipped here; .ci/run runs its pytest steps as written."""
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    suites = [b for b in BLOCKS if "python -m pytest" in b.text]
    assert suites, "no README block runs the test suite"
    for block in suites:
        steps = [s.strip() for s in block.text.split(" && ") if s.strip().startswith("python -m pytest")]
        assert " && ".join(steps) in ci, f"README line {block.line}: .ci/run does not run {steps}"


# -- the first screen and the guide ----------------------------------------------------------

FIRST_SCREEN = 30  # lines: what a newcomer sees before scrolling


def test_the_first_set_up_command_is_on_the_first_screen():
    """What cts is comes first (a short paragraph), then the set-up command within the first 30 lines."""
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    setup = rc.recipe(BLOCKS, "setup")
    assert setup.line + 1 <= FIRST_SCREEN, f"the set-up command is at README line {setup.line + 1}"
    before = [b for b in BLOCKS if b.line < setup.line]
    assert not before, f"a block comes before the set-up command: README line {before[0].line}"
    prose = [line for line in lines[1 : setup.line] if line.strip() and not line.startswith(("#", "<!--"))]
    assert any("cts" in line for line in prose[:3]), prose[:3]  # it says what cts is before the commands


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _guide() -> tuple[str, set[str]]:
    text = (REPO / "docs" / "guide.md").read_text(encoding="utf-8")
    outside_fences = re.sub(r"(?ms)^```.*?^```", "", text)
    return text, {_slug(h) for h in re.findall(r"(?m)^#{2,4} (.+)$", outside_fences)}


def test_the_guide_opens_with_contents_then_concepts():
    """docs/guide.md is the index: its Contents list Concepts and every other page of docs/, its Concepts the words."""
    text, anchors = _guide()
    sections = re.findall(r"(?m)^## (.+)$", re.sub(r"(?ms)^```.*?^```", "", text))
    assert sections == ["Contents", "Concepts"], sections
    contents = text.split("## Contents", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"\]\(([^)]+)\)", contents)
    assert listed[0] == "#concepts" and "concepts" in anchors, listed[:1]
    pages = {p.name for p in (REPO / "docs").glob("*.md")} - {"guide.md"}
    assert set(listed[1:]) == pages, f"the contents and docs/ differ: {sorted(set(listed[1:]) ^ pages)}"
    concepts = text.split("## Concepts", 1)[1].split("\n## ", 1)[0]
    for word in ("Instance", "Arm", "Role", "Job", "Sweep", "Fingerprint", "Cache"):
        assert f"**{word}**" in concepts, f"the Concepts section does not define {word}"


def test_the_readme_links_every_task_page_it_names():
    """The README's pointers into docs/ name pages that exist; tests/e2e/test_doc_links.py checks their anchors."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(docs/([a-z-]+\.md)", text))
    assert {"guide.md", "before-you-pay.md", "batch.md", "cluster.md", "models.md", "compare.md"} <= linked, linked
    assert all((REPO / "docs" / name).is_file() for name in linked), linked


# -- set-up ---------------------------------------------------------------------------------


def _assert_one_offline_job(user: User, outcome: Outcome) -> None:
    """``outcome`` added exactly one job dir under outputs/runs and one FINISHED MLflow job run."""
    assert outcome.returncode == 0, outcome.failure()
    (job,) = outcome.new_dirs
    assert job.parent == user.outputs / "runs", outcome.new_dirs
    _assert_job_dir(user, job)
    jobs = outcome.new_runs[outcome.new_runs["tags.cts.kind"] == "job"]
    assert len(outcome.new_runs) == len(jobs) == 1 and set(jobs["status"]) == {"FINISHED"}
    assert jobs["run_id"].iloc[0] == json.loads((job / "mlflow_run.json").read_text())["run_id"]
    assert jobs["metrics.n_instances"].iloc[0] == DEMO_SIZE and jobs["metrics.n_errors"].iloc[0] == 0


def _assert_job_dir(user: User, job: Path) -> None:
    records = (job / "records.jsonl").read_text().splitlines()
    assert len(records) == DEMO_SIZE, job
    assert json.loads((job / "summary.json").read_text())["metrics"]["n_instances"] == DEMO_SIZE
    stored = json.loads((job / "mlflow_run.json").read_text())["tracking_uri"]
    assert stored == f"sqlite:///{user.outputs / 'mlflow.db'}"  # the default store, outputs/mlflow.db
    assert (job / "config.yaml").is_file() and (job / "run.log").is_file()


# Every slow test here shares the module's copy, venv and runs: one xdist worker builds them once.
@pytest.mark.slow
@pytest.mark.xdist_group("readme")
def test_setup_command_from_the_root(user: User, setup_outcome: Outcome):
    assert setup_outcome.returncode == 0, setup_outcome.failure()
    venv = user.copy / ".venv"
    assert list(_site_packages(venv).glob("cts-*.dist-info")), "pip did not install cts into .venv"
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import cts; print(cts.__file__)"],
        cwd=user.elsewhere,
        env=user.env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(user.copy), where.stdout  # the copy's cts, editable
    _assert_one_offline_job(user, setup_outcome)


@pytest.mark.slow
@pytest.mark.xdist_group("readme")
def test_setup_run_step_from_another_directory(user: User, setup_outcome: Outcome):
    assert setup_outcome.returncode == 0, setup_outcome.failure()
    (step,) = _run_steps(_setup_command())
    outcome = run_command(user, rc.retarget(step, user.copy / "run.py"), "elsewhere")
    _assert_one_offline_job(user, outcome)
    assert not any(user.elsewhere.iterdir()), sorted(user.elsewhere.iterdir())  # nothing in the working dir


# -- the offline sweep ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.xdist_group("readme")
def test_offline_sweep_runs_every_job(user: User, sweep_outcome: tuple[str, Outcome]):
    command, outcome = sweep_outcome
    assert outcome.returncode == 0, outcome.failure()
    expected = rc.swept_job_names(command)
    assert len(expected) == 9, expected  # the README: "9 jobs"
    jobs = {p for p in outcome.new_dirs if p.parent.parent == user.outputs / "multirun" and p.name != "report"}
    assert {p.name for p in jobs} == expected, sorted(outcome.new_dirs)
    for job in jobs:
        _assert_job_dir(user, job)
    runs = outcome.new_runs[outcome.new_runs["tags.cts.kind"] == "job"]
    assert len(runs) == 9 and set(runs["status"]) == {"FINISHED"}
    assert set(runs["tags.mlflow.runName"]) == expected
    assert not any(user.elsewhere.iterdir()), sorted(user.elsewhere.iterdir())  # nothing in the working dir


@pytest.mark.slow
@pytest.mark.xdist_group("readme")
def test_offline_sweep_is_one_sweep_dir_with_one_report(user: User, sweep_outcome: tuple[str, Outcome]):
    command, outcome = sweep_outcome
    assert outcome.returncode == 0, outcome.failure()
    sweeps = {p for p in outcome.new_dirs if p.parent == user.outputs / "multirun"}
    assert len(sweeps) == 1, f"{len(sweeps)} sweep dirs: {sorted(p.name for p in sweeps)}"
    (sweep,) = sweeps
    expected = rc.swept_job_names(command)
    assert {p.name for p in sweep.iterdir() if p.is_dir()} == expected | {"report"}
    jobs = outcome.new_runs[outcome.new_runs["tags.cts.kind"] == "job"]
    assert {Path(d).parent for d in jobs["tags.cts.job_dir"]} == {sweep}  # each run names its job dir in it
    assert (sweep / "multirun.yaml").is_file()
    report = (sweep / "report" / "report.md").read_text(encoding="utf-8")
    assert f"Source: `{sweep}` ({len(expected)} jobs)" in report
    assert (sweep / "report" / "scores.csv").is_file() and len(list((sweep / "report").glob("*.png"))) >= 1
    said = [line for line in outcome.output.splitlines() if "sweep report" in line and "written to" in line]
    assert len(said) == 1 and said[0].endswith(f"sweep report ({len(expected)} jobs) written to {sweep / 'report'}"), (
        said
    )
    reports = outcome.new_runs[outcome.new_runs["tags.cts.kind"] == "sweep_report"]
    assert len(reports) == 1 and set(reports["status"]) == {"FINISHED"}


# -- the released benchmark -----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.xdist_group("readme")
def test_release_recipe_from_another_directory(user: User, setup_outcome: Outcome, tmp_path: Path):
    """The release recipe, typed where the user unzipped a (made-up) release: inspect, score_answers, import.

    Not ``user.elsewhere``: the other recipes assert that they leave it empty.
    """
    from tests.release.fixture import write_release

    assert setup_outcome.returncode == 0, setup_outcome.failure()
    where = tmp_path / "release-user"
    where.mkdir()
    write_release(where / "release")
    command = rc.retarget(rc.recipe(BLOCKS, "release").text.strip(), user.copy / "run.py")
    proc = subprocess.run(
        ["bash", "-e", "-c", command], cwd=where, env=user.env, capture_output=True, text=True, timeout=600
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "no problem: cts reads every file as shown" in out and "score_mean" in out
    imported = user.outputs / "release" / "release"
    assert {p.name for p in imported.iterdir()} >= {"clarifier=eb,k=1", "clarifier=gp,k=2", "report"}
    assert "Table 4." in (imported / "report" / "report.md").read_text(encoding="utf-8")
    assert sorted(p.name for p in where.iterdir()) == ["release"]  # nothing written where the user typed it
