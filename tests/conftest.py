"""Shared fixtures over the public test kit :mod:`intact.testing` (a tiny config, a prepared tiny benchmark +
backbone, a Snakemake runner, a train-and-evaluate helper)."""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import signal
import re
import shutil
import subprocess
import sys
import time
import types
import tomllib
from pathlib import Path

import pytest
import torch

# the public test kit (src/intact/testing.py): the project's tests use what a plugin's tests use
import intact.testing as kit
from intact.testing import ENV_CACHE, REPO, tiny_bench as _build_tiny_bench, tiny_config, write_config  # noqa: F401
from intact.testing import train_and_evaluate as train_on_tiny, train_one  # noqa: F401
from intact.runtime import warm, warm_snakemake
from intact.runtime.warm import catchable


# ---- the two tiers (docs/testing.md) ----------------------------------------------------------------------
# `make check` runs the fast tier, `pytest -m "not slow"`: unit tests and workflow dry runs. A test that trains on
# the pretrained tiny benchmark, runs workflow jobs, an MLflow server or a SLURM cluster is in the full tier only
# (`make test`): it carries the `slow` mark (pyproject.toml), set by hand or, for the fixtures below, here.

#: the session's artefacts whose tests are full-tier ones wherever they use them (directly or through another
#: fixture): each holds a pretrained backbone
FULL_TIER_FIXTURES = frozenset({"tiny_bench", "prepared_digits"})

#: Snakemake's lines for a job it ran (finished or failed): a dry run, ``--lint``, ``--unlock``, ``--report`` and a
#: run refused at its start print none
RAN_A_JOB = re.compile(r"^(Finished jobid: \d+|Error in rule \w+:|\d+ of \d+ steps? \()", re.M)

#: the test running in this process (set around its set-up, call and tear-down)
RUNNING: list[pytest.Item] = []

#: whether MLflow (the ``workflow`` extra) is installed: where it is not, tracking leaves every run ``pending``
#: (intact.tracking.track) and the tests of MLflow itself are skipped
MLFLOW = importlib.util.find_spec("mlflow") is not None
NO_MLFLOW = "MLflow (intact[workflow]) is not installed"

#: a test of a claim made for the CPU in fp32, a feature cache equal to the live path bit for bit (``intact.cache``):
#: skipped where CUDA is visible, since training then runs on the GPU, where the claim is not made
CPU_CLAIM = pytest.mark.skipif(torch.cuda.is_available(), reason="a claim made for the CPU in fp32 (bit for bit), "
                               "and training runs on CUDA here")


def in_fast_tier(item: pytest.Item) -> bool:
    return item.get_closest_marker("slow") is None


def snakemake(workdir: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    """:func:`intact.testing.snakemake`, for the suite's tests: a fast-tier test whose run executed a workflow job
    fails, naming the mark it lacks (its module fixtures' runs count as its own)."""
    proc = kit.snakemake(workdir, *args, **kw)
    if RUNNING and in_fast_tier(RUNNING[0]) and RAN_A_JOB.search(proc.stdout + proc.stderr):
        raise AssertionError(f"{RUNNING[0].nodeid} runs workflow jobs (snakemake {' '.join(args)}), but it is in the "
                             "fast tier: mark it @pytest.mark.slow (docs/testing.md)")
    return proc


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    RUNNING[:] = [item]
    try:
        return (yield)
    finally:
        RUNNING.clear()


def fenced(doc: Path, lang: str, first_line: str = "") -> str:
    """The first ``lang`` code block of the page ``doc`` (that starts with ``first_line``)."""
    return re.search(rf"```{lang}\n({re.escape(first_line)}.*?)```", doc.read_text(), re.S).group(1)


def install_page_package(root: Path, doc: Path, project: str = "") -> dict[str, str]:
    """The package a docs page spells out - its first toml block (of ``project``: the block naming it) as
    pyproject.toml, and each module it lists (``py-modules``) from the python block that starts with
    ``# <module>.py`` - installed into ``root/site`` with no index and no build isolation; the environment
    (PYTHONPATH) under which it is installed."""
    pkg = root / "pkg"
    pkg.mkdir()
    pyproject = fenced(doc, "toml", f'[project]\nname = "{project}"' if project else "")
    (pkg / "pyproject.toml").write_text(pyproject)
    for module in tomllib.loads(pyproject)["tool"]["setuptools"]["py-modules"]:
        (pkg / f"{module}.py").write_text(fenced(doc, "python", f"# {module}.py\n"))
    return install_package(pkg, root / "site")


def load_tool(name: str) -> types.ModuleType:
    """``tools/<name>.py`` as a module (the tools are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pythonpath(*first: str | Path) -> str:
    """A subprocess's PYTHONPATH: ``first``, then this process's, so that dependencies found through it stay found
    (a machine whose packages are carried there, as on the GPU machine); no empty entry (Python reads one as the
    working directory)."""
    return os.pathsep.join(filter(None, [*map(str, first), os.environ.get("PYTHONPATH")]))


def install_package(pkg: Path, site: Path) -> dict[str, str]:
    """The package folder ``pkg`` installed into ``site`` with no index and no build isolation (it builds in
    ``pkg``: pass a copy); the environment (PYTHONPATH) under which it is installed."""
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(site), str(pkg)], check=True, capture_output=True, text=True)
    return {"PYTHONPATH": pythonpath(site, REPO / "src")}


def python_in(env: dict[str, str], code: str) -> str:
    """The standard output of ``python -c code`` under ``env`` (an installed package's, :func:`install_package`)
    over this process's environment; a non-zero exit fails the test."""
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, check=True, capture_output=True,
                          text=True).stdout


def header_only_weights(model: str, path: Path) -> Path:
    """A .safetensors file that declares timm ``model``'s tensors (names, shapes, float32) over a sparse data
    section: what ``intact validate`` reads of a real file (its header), at no cost in time or disk (ViT-B's
    330 MB of data are a hole). Loading it gives zeros."""
    from intact.models.backbone import create_vit

    with torch.device("meta"):
        state = create_vit(model).state_dict()
    header, end = {}, 0
    for key, tensor in state.items():
        size = tensor.numel() * 4
        header[key] = {"dtype": "F32", "shape": list(tensor.shape), "data_offsets": [end, end + size]}
        end += size
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(len(blob).to_bytes(8, "little") + blob)
        f.truncate(8 + len(blob) + end)
    return path


def plain_signals() -> None:
    """``preexec_fn`` for a process a test signals: start it with nothing blocked or ignored, as a shell starts
    a command. What the test runner's process inherited, or what C code in it set (a SIG_IGN that Python's
    ``signal.getsignal`` does not show), survives exec; a suite run once ignored SIGINT that way in every
    process it started, and the Ctrl-C tests then tested the runner, not the code."""
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for sig in catchable():
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # a signal the C library reserves for itself


def process_gone(pid: int, timeout: float = 10) -> bool:
    """Whether process ``pid`` is gone within ``timeout`` seconds."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


def assert_config_error(mutate, fragments) -> None:
    """``mutate`` applied to the tiny config makes validation fail with a message holding every fragment."""
    from intact.config import ConfigError, validate_config

    cfg = tiny_config()
    mutate(cfg)
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    for fragment in fragments:
        assert fragment in str(err.value), str(err.value)


def shared_temp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This run's temporary folder that every test process sees: under pytest-xdist the workers' common
    parent, else the session's own."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session", autouse=True)
def _kit_cache(tmp_path_factory: pytest.TempPathFactory):
    """The test kit's tiny benchmark cache (intact.testing.ENV_CACHE) and the user cache folder
    (``XDG_CACHE_HOME``: the workflow's code-input cache, intact.sources) in this run's temporary folder,
    shared by the workers and the processes they start (a plugin test run as its author would), not the
    user's: the suite builds what it tests, its timings do not depend on an earlier run, and it leaves
    nothing in the user's home."""
    shared = shared_temp(tmp_path_factory)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV_CACHE, str(shared / "kit_cache"))
        mp.setenv("XDG_CACHE_HOME", str(shared / "user_cache"))
        yield shared / "kit_cache"


@pytest.fixture(scope="session")
def tiny_bench(tmp_path_factory: pytest.TempPathFactory, _kit_cache: Path) -> dict:
    """A prepared 3-domain digits benchmark and a pretrained backbone (~85% clean accuracy; read-only for the
    tests). Built once per session - under pytest-xdist once for all workers: the first builds it under a file
    lock in the run's shared temporary folder, the others wait and read it."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return _build_tiny_bench(tmp_path_factory.mktemp("tiny_bench"))
    from filelock import FileLock  # a torch dependency

    shared = shared_temp(tmp_path_factory) / "tiny_bench"
    with FileLock(str(shared) + ".lock"):
        done = shared / "paths.json"
        if not done.exists():
            built = _build_tiny_bench(shared)
            done.write_text(json.dumps({"manifest": str(built["manifest"])}))
    return {"config": tiny_config(), "manifest": Path(json.loads(done.read_text())["manifest"]),
            "weights": shared / "backbone.safetensors", "root": shared}


#: what a prepared digits workdir holds, built by the workflow's own rules: the benchmark's data and preview
#: figure (prepare_data) and its pretrained backbone (pretrain_backbone)
PREPARED_PARTS = ("data/digits", "figures/digits/domains.png", "backbones")


def prepared_key(cfg: dict) -> str:
    """What decides a prepared digits workdir's files: the digits benchmark's settings and its backbone's."""
    from intact.hashing import stable_hash

    bench = cfg["benchmarks"]["digits"]
    return stable_hash({"benchmark": bench, "backbone": cfg["backbones"][bench.get("backbone", "vit_digits")]})


def _build_prepared(folder: Path, cfg: dict) -> None:
    """The tiny config with ``cfg``'s digits benchmark and backbones (not its methods: a plugin's need its
    environment), run up to the prepared files."""
    work = folder / "work"
    base = tiny_config()
    base["benchmarks"]["digits"], base["backbones"] = cfg["benchmarks"]["digits"], cfg["backbones"]
    base["tracking"]["enabled"], base["studies"] = False, {}
    write_config(work, base)
    backbone = cfg["benchmarks"]["digits"].get("backbone", "vit_digits")
    snakemake(work, "results/data/digits/manifest.json", f"results/backbones/{backbone}.safetensors",
              "results/figures/digits/domains.png")
    (folder / "complete").write_text("")


@pytest.fixture(scope="session")
def prepared_digits(tmp_path_factory: pytest.TempPathFactory):
    """``prepared_digits(cfg, workdir)``: ``workdir`` holding ``cfg`` as its config.yaml and the digits benchmark
    and backbone that ``cfg`` declares, as its own prepare_data and pretrain_backbone jobs would have left them
    (:data:`PREPARED_PARTS`, copied with their times; not the jobs' logs or Snakemake's records). Each distinct
    (benchmark, backbone) settings is prepared once per session by those rules - under pytest-xdist once for all
    workers, under a file lock in the run's shared temporary folder; the copy is the test's to change."""
    from filelock import FileLock  # a torch dependency

    shared = shared_temp(tmp_path_factory) / "prepared_digits"
    shared.mkdir(exist_ok=True)

    def prepare(cfg: dict, workdir: Path) -> Path:
        folder = shared / prepared_key(cfg)
        with FileLock(str(folder) + ".lock"):
            if not (folder / "complete").exists():
                _build_prepared(folder, cfg)
        for part in PREPARED_PARTS:
            src, dst = folder / "work/results" / part, workdir / "results" / part
            dst.parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, dst)
        write_config(workdir, cfg)
        return workdir

    return prepare


@contextlib.contextmanager
def checkout_lock(tmp_path_factory: pytest.TempPathFactory, mode: int = fcntl.LOCK_SH):
    """A lock on the checkout's files across the test processes (a file in the run's shared temporary folder):
    ``LOCK_SH`` (:func:`checkout_unchanged`, or a module fixture's runs that a test compares) or ``LOCK_EX``
    (:func:`checkout_edited`)."""
    with open(shared_temp(tmp_path_factory) / "checkout.lock", "a") as f:
        fcntl.flock(f, mode)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@pytest.fixture
def checkout_edited(tmp_path_factory: pytest.TempPathFactory):
    """For a test that edits the checkout's own files (and puts them back): no test that needs the checkout
    unchanged runs meanwhile in another worker."""
    with checkout_lock(tmp_path_factory, fcntl.LOCK_EX):
        yield


@pytest.fixture
def checkout_unchanged(tmp_path_factory: pytest.TempPathFactory):
    """For a test whose runs must all see one state of the checkout (a job records ``git_commit``, with
    ``-dirty`` while a file is edited): it waits for an editing test in another worker, and holds it off."""
    with checkout_lock(tmp_path_factory, fcntl.LOCK_SH):
        yield


#: the files whose workflows start their own warm parent, as a user's run does: the SLURM cluster's jobs run cold
#: (and its daemons must not inherit a socket), and the warm tests test the parent's own start and end
OWN_WARM_PARENT = ("test_slurm.py", "test_warm.py", "test_warm_workflow.py")


@pytest.fixture(scope="session")
def kept_warm_parent() -> warm.WarmParent | None:
    """One warm parent per test process, kept for the whole session (intact.runtime.warm.start_or_adopt): the many
    small workflow runs of the suite adopt it instead of each importing torch, timm and intact anew. A job it
    cannot serve as a fresh Python would run (another PYTHONPATH, code edited since) runs cold or in the
    run's own parent, as for any user. Its socket is exported per module (below), not to the whole process."""
    parent = warm.start_for_checkout(REPO, export=False)
    yield parent
    if parent is not None:
        parent.stop()


@pytest.fixture(scope="session")
def kept_snakemake_parent() -> warm.WarmParent | None:
    """One warm parent per test process that has imported Snakemake and the Snakefile's modules, kept for the
    session: the workflow runs of :func:`intact.testing.snakemake` start from it (``python -m
    intact.runtime.warm_snakemake``) instead of each importing Snakemake anew (~0.9 s of a tiny dry run's ~1.7 s)."""
    parent = warm_snakemake.start(REPO)
    yield parent
    if parent is not None:
        parent.stop()


@pytest.fixture(scope="module", autouse=True)
def _adopt_the_kept_warm_parent(request: pytest.FixtureRequest):
    """The test module's workflow runs (and their module fixtures' runs) see the kept parents' sockets, except
    in :data:`OWN_WARM_PARENT`, whose Snakemake runs start as a user's do."""
    if request.path.name in OWN_WARM_PARENT or not warm.enabled():
        yield
        return
    kept = {warm_snakemake.ENV_SOCKET: request.getfixturevalue("kept_snakemake_parent")}
    # jobs run only in full-tier tests (a fast-tier one runs none): a module without one selected starts no parent
    if not all(in_fast_tier(item) for item in request.session.items if item.path == request.path):
        kept[warm.ENV_SOCKET] = request.getfixturevalue("kept_warm_parent")
    with pytest.MonkeyPatch.context() as mp:
        for name, parent in kept.items():
            if parent is not None:
                mp.setenv(name, parent.path)
        yield


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--rehearsal", default=None, metavar="DIR",
                     help="read the finished rehearsals under DIR (`intact rehearse --root DIR`; "
                     "tests/test_rehearsal.py)")


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, one torch thread in each test process: ``make test``'s 3 workers on 2 cores with
    torch's default of a thread per core run 6 compute threads, whose OpenMP spin-waits take cores from the
    other workers (3 concurrent test_methods.py runs: 67.8 -> 63.9 s wall); tiny models gain nothing from 2.
    Only this process: what it starts (jobs, warm parents) keeps a fresh process's threads, which
    tests/test_warm.py compares warm and cold."""
    if os.environ.get("PYTEST_XDIST_WORKER") is not None:
        import torch

        torch.set_num_threads(1)


#: the files that take longest, longest first (Snakemake pipelines, the SLURM cluster, an MLflow server, then
#: in-process training; seconds in a whole-suite run: docs/log/2026-11-27-test-suite-cpu.md): ``make test``
#: runs ``pytest -n 3 --dist loadfile --no-loadscope-reorder``, which hands whole files to the workers in
#: collection order, so the long files start first and the short ones fill the gaps at the end (longest-first
#: scheduling: a long file handed out last would run alone while the other workers' cores idle)
SLOW_FIRST = ("test_slurm.py", "test_workflow.py", "test_warm_workflow.py", "test_paper_workflow.py",
              "test_tracking.py", "test_esn_consistent_prompt.py", "test_adding_a_method.py", "test_tune.py",
              "test_methods.py", "test_warm.py", "test_plugins.py", "test_certificate_rounding.py", "test_training.py",
              "test_network_methods.py", "test_compositional_prompt.py", "test_migrate.py", "test_regression.py")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The `slow` mark on every test that uses one of :data:`FULL_TIER_FIXTURES`. Collection order:
    :data:`SLOW_FIRST` in its order, then every other file as collected (a stable sort: the order of the tests
    within a file is kept)."""
    for item in items:
        if FULL_TIER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))
