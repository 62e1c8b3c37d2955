"""A test kit for methods and benchmarks, the project's own and a plugin's: a tiny config, a tiny benchmark
and a train-and-evaluate helper (docs/adding-a-method.md, "Testing a method")::

    from intact.testing import tiny_bench, tiny_run, train_and_evaluate

    def test_my_method_learns(tmp_path):
        bench = tiny_bench(tmp_path / "bench")                 # 3 digit domains, a pretrained tiny ViT
        run = tiny_run(bench, "my_method+intact", methods={"my_method": {"lam": 0.5}})
        R = train_and_evaluate(bench, run, tmp_path / "run", tasks=2)
        assert R[0, 0] > 50                                    # accuracy in %, chance 10

A benchmark's test names its entry of the config (any registered type, a plugin's too; docs/adding-a-benchmark.md)::

    cfg = tiny_config()
    cfg["benchmarks"]["rotdigits"] = {"type": "rotdigits", "backbone": "vit_digits", "domains": ["rot0", "rot90"]}
    bench = tiny_bench(tmp_path / "bench", cfg, benchmark="rotdigits")

Imports neither pytest nor snakemake (:func:`snakemake` runs it as a subprocess) nor, until a helper trains,
torch. The tiny config is the workflow's ``config.yaml`` shrunk to seconds, and :func:`snakemake` runs its
Snakefile: the checkout's (an editable install), else the copy a wheel ships in the package (setup.py).
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any
from collections.abc import Mapping

import yaml

from intact.layering import merge, read_files
from intact.methods import METHODS
from intact.paths import user_cache
from intact.runtime.warm_snakemake import ENV_SOCKET as WARM_SNAKEMAKE
from intact.settings import SECTIONS


def _workflow_root() -> Path:
    """The folder holding the Snakefile and ``config.yaml``: the checkout this package runs from (src layout:
    ``<checkout>/src/intact``), or ``intact/workflow`` where it was installed from a wheel (setup.py)."""
    here = Path(__file__).resolve().parent
    return here.parents[1] if (here.parents[1] / "Snakefile").is_file() else here / "workflow"


#: the checkout, or the workflow a wheel installed (:func:`_workflow_root`)
REPO = _workflow_root()


def tiny_config(**run: object) -> dict:
    """The default config shrunk to seconds: 3 domains, 1 epoch, short pretraining, one seed; ``run`` updates
    the ``run`` section (``methods=[...]``)."""
    path = REPO / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"intact.testing needs the workflow (its config.yaml and Snakefile): {path} is not "
                                "there; install intact from its checkout (`pip install <checkout>`, or `-e`)")
    cfg = read_files([path])
    cfg["run"].update({"seeds": [0], "methods": ["coda_p", "coda_p+intact"], **run})
    cfg["benchmarks"]["digits"]["domains"] = ["blur", "noise", "edges"]
    # every shared section present (empty: its declared defaults), so a test can set one key
    for section in SECTIONS:
        cfg[section] = dict(cfg.get(section) or {})
    # 25 epochs (~9 s): a weaker backbone leaves every method at chance, and tests of learning test nothing
    cfg["backbones"]["vit_digits"]["pretrain"] = {"epochs": 25}
    cfg["optim"]["epochs"] = 1
    # every method's section present (empty: its declared defaults), so a test can set one key
    cfg["methods"] = {name: dict((cfg.get("methods") or {}).get(name, {})) for name in METHODS.builtins()}
    cfg["methods"]["coda_p"]["pool_size"] = 6
    return cfg


def write_config(workdir: Path, cfg: Mapping[str, Any]) -> Path:
    """``workdir/config.yaml`` holding ``cfg`` (the folder is created)."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(dict(cfg), sort_keys=False))
    return path


def snakemake(workdir: Path, *args: str, check: bool = True, timeout: float = 900,
              env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the checkout's Snakefile in ``workdir`` (which holds its own config.yaml) on 2 cores; AssertionError
    with the output's tail if it fails and ``check``. Where the environment names a warm parent that has
    imported Snakemake (:data:`intact.runtime.warm_snakemake.ENV_SOCKET`: the project's test suite sets one), the
    command starts from it, unless ``env`` sets a ``PYTHON*`` variable (the command's Python must then start
    as that says: its import path, its import-time profile)."""
    extra = dict(env or {})
    warm = os.environ.get(WARM_SNAKEMAKE) and not any(k.startswith("PYTHON") for k in extra)
    module = "intact.runtime.warm_snakemake" if warm else "snakemake"
    cmd = [sys.executable, "-m", module, "-s", str(REPO / "Snakefile"), "-d", str(workdir), "--cores", "2", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **extra})
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
    return proc


#: set to a folder to keep tiny benchmarks there, to "off" to build every time (default: ~/.cache/intact)
ENV_CACHE = "INTACT_TEST_CACHE"


def tiny_bench(root: Path, cfg: Mapping[str, Any] | None = None, benchmark: str = "digits") -> dict:
    """Prepare ``benchmark`` of the tiny config (or of ``cfg``: any registered type, a plugin's included) under
    ``root``, and its backbone: pretrained on its ``pretrain.benchmark`` (prepared too where that is another one:
    the digits ViT, ~85% clean accuracy, ~10 s on 2 cores), or the local weights file the config names.
    ``{"config", "benchmark", "manifest", "weights", "root"}``, what the other helpers take.

    What it builds is kept in a cache (:data:`ENV_CACHE`) under :func:`tiny_bench_key`, and copied from there
    the next time: the same files, bit for bit, without the 10 s. A benchmark whose backbone pretrains on
    another benchmark takes that one's build (:func:`_lend_pretraining`)."""
    from intact.config import backbone_config, validate_config
    from intact.paths import expand_path

    cfg = copy.deepcopy(dict(cfg or tiny_config()))
    cfg["run"] = {**cfg["run"], "benchmarks": [benchmark]}  # its runs are the ones checked (and resolved by tiny_run)
    validate_config(cfg)
    built = _kept_or_built(cfg, benchmark, root)
    if built != root:
        shutil.copytree(built, root, dirs_exist_ok=True, ignore=shutil.ignore_patterns("complete"))
    weights = backbone_config(cfg, cfg["benchmarks"][benchmark]["backbone"]).weights
    return {"config": cfg, "benchmark": benchmark, "manifest": root / "data" / "manifest.json", "root": root,
            "weights": root / "backbone.safetensors" if weights == "pretrain" else Path(expand_path(weights))}


def tiny_bench_key(cfg: Mapping[str, Any], benchmark: str = "digits") -> str:
    """A name for everything that decides the tiny benchmark's files: the benchmark's, its backbone's and its
    pretraining benchmark's config sections, the package versions, the numerics of this machine
    (:mod:`intact.fingerprint`) and the source of every ``intact`` module that preparing and pretraining import,
    and of the modules that declare and implement the benchmark's type (a plugin's)."""
    from intact import data, pretrain
    from intact.config import backbone_config
    from intact.fingerprint import fingerprint
    from intact.hashing import sha256_file, stable_hash
    from intact.provenance import package_versions
    from intact.sources import source_files

    bench = cfg["benchmarks"][benchmark]
    backbone = cfg["backbones"][bench["backbone"]]
    source = backbone_config(cfg, bench["backbone"]).pretrain.benchmark if backbone["weights"] == "pretrain" else None
    modules = {str(Path(m.__file__).resolve()) for m in (data, pretrain)} | _type_modules(bench["type"])
    code = {path: sha256_file(path) for path in sorted({*source_files(data.__file__, pretrain.__file__), *modules})}
    return stable_hash({"benchmark": bench, "backbone": backbone, "packages": package_versions(),
                        "pretrain_benchmark": (cfg["benchmarks"].get(source)
                                               if source not in (None, benchmark) else None),
                        "python": sys.version, "numerics": fingerprint(), "code": code}, length=20)


def _type_modules(kind: str) -> set[str]:
    """The source files of the modules that declare and implement benchmark type ``kind``."""
    import importlib.util

    from intact.data import BENCHMARKS

    decl = BENCHMARKS[kind]
    names = {decl.settings.__module__}
    if isinstance(decl.implementation, str):
        names.add(decl.implementation.partition(":")[0])
    origins = (getattr(importlib.util.find_spec(n), "origin", None) for n in sorted(names))
    return {str(Path(o).resolve()) for o in origins if o and o.endswith(".py")}


def _kept_or_built(cfg: Mapping[str, Any], benchmark: str, root: Path) -> Path:
    """The folder holding ``benchmark``'s tiny build (``cfg`` validated): its cache entry where one is complete,
    else ``root``, built now (and kept where a cache is)."""
    cache = _cache_folder()
    kept = cache / tiny_bench_key(cfg, benchmark) if cache else None
    if kept is not None and (kept / "complete").is_file():
        return kept
    _build_tiny_bench(cfg, root, benchmark)
    if kept is not None:
        _keep(root, kept)
    return root


def _build_tiny_bench(cfg: Mapping[str, Any], root: Path, benchmark: str = "digits") -> None:
    from intact.config import backbone_config, benchmark_config
    from intact.data import prepare_benchmark
    from intact.pretrain import pretrain_backbone

    bench_cfg = benchmark_config(cfg, benchmark)
    manifest = prepare_benchmark(bench_cfg, root / "data")
    backbone = backbone_config(cfg, bench_cfg.backbone)
    if backbone.weights != "pretrain":
        return
    source = benchmark_config(cfg, backbone.pretrain.benchmark)
    if source.name != benchmark:  # the backbone pretrains on another benchmark (a plugin reusing the digits ViT)
        if source.backbone == bench_cfg.backbone:  # whose own tiny build holds this backbone
            _lend_pretraining(cfg, source.name, root)
            return
        manifest = prepare_benchmark(source, root / "pretrain_data")
    pretrain_backbone(backbone, manifest, root / "backbone.safetensors", root / "backbone.json", threads=1,
                      progress=False, benchmark=source)


def _lend_pretraining(cfg: Mapping[str, Any], source: str, root: Path) -> None:
    """Copy ``source``'s tiny build (from its cache entry, or built now) as ``root``'s pretraining data and
    backbone: the files that preparing ``source`` and pretraining here would write (pretraining is deterministic;
    ``backbone.json`` keeps ``source``'s measured ``seconds``), without pretraining the same backbone once per
    benchmark."""
    with tempfile.TemporaryDirectory() as tmp:
        lent = _kept_or_built(cfg, source, Path(tmp))
        shutil.copytree(lent / "data", root / "pretrain_data")
        for name in ("backbone.safetensors", "backbone.json"):
            shutil.copy2(lent / name, root / name)


def _cache_folder() -> Path | None:
    value = os.environ.get(ENV_CACHE, "")
    if value.lower() == "off":
        return None
    return Path(value) if value else user_cache("tiny_bench")


def _keep(root: Path, kept: Path) -> None:
    """Copy ``root`` to ``kept`` whole or not at all: into a temporary folder, then renamed (a concurrent
    build of the same key wins the rename; both hold the same files)."""
    kept.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=kept.parent, prefix=f".{kept.name}."))
    try:
        shutil.copytree(root, tmp, dirs_exist_ok=True)
        (tmp / "complete").write_text("")
        os.rename(tmp, kept)
    except OSError:
        pass  # kept by another process meanwhile, or the cache is not writable: this build is still whole
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def tiny_run(bench: Mapping[str, Any], method: str, seed: int = 0, **sections: Mapping[str, Any]) -> Any:
    """The resolved run (:class:`~intact.settings.RunConfig`) of ``method`` on the tiny benchmark (the one
    :func:`tiny_bench` prepared: digits, or the ``benchmark`` it was given); ``sections``
    are merged over the config first (``methods={"my_method": {...}}``, ``optim={"epochs": 2}``)."""
    from intact.config import resolve_run

    cfg = merge(bench["config"], dict(sections))
    return resolve_run(cfg, bench.get("benchmark", "digits"), method, seed)


def train_one(bench: Mapping[str, Any], run: Any, out: Path, task: int, prev: Path | None = None, **kw: Any) -> dict:
    """Train task ``task`` of ``run`` on the tiny benchmark into ``out`` (from the state in ``prev``), on one
    thread and without progress bars; ``kw`` goes to :func:`intact.train.train_task`. Its train record."""
    from intact.train import train_task

    return train_task(run, task, manifest=bench["manifest"], backbone_weights=bench["weights"], out_dir=out,
                      prev_dir=prev, threads=1, progress=False, **kw)


def train_and_evaluate(bench: Mapping[str, Any], run: Any, folder: Path, tasks: int) -> Any:
    """Train ``run`` on tasks ``0..tasks-1`` of the tiny benchmark (``folder/task<t>``, each task from the previous
    one's state, as the jobs would) and evaluate after each on every task: R[i, t], the accuracy (%) on task i
    after task t, a torch tensor of (the benchmark's tasks, ``tasks``)."""
    import torch

    from intact.evaluate import evaluate_task

    R = torch.zeros(run.benchmark.num_tasks, tasks)
    for t in range(tasks):
        out = folder / f"task{t}"
        train_one(bench, run, out, t, folder / f"task{t - 1}" if t else None)
        rec = evaluate_task(run, t, manifest=bench["manifest"], backbone_weights=bench["weights"],
                            state=out / "state.safetensors", out_path=out / "eval.json", threads=1)
        R[:, t] = torch.tensor(rec["accuracy"])
    return R
