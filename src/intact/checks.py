"""Everything about a config that can be checked without training, checked when the config is validated.

:func:`check_runs` is called by :func:`intact.config.validate_config` (at Snakefile start-up, before any
job): every run that ``run:`` or a study declares is resolved, and its settings are checked against the
method and the backbone - the blocks its declaration's ``layer_keys`` name past the backbone's depth, the
method's own declared checks (a CODA pool too small for the task count, ...), an input size or channel
count the backbone does not take, a method-name override that the run would silently ignore, a
non-positive lambda in a sensitivity grid (a log-spaced sweep). Each message names the key.

Imports no torch for the embedded backbone (see :mod:`intact.models.arch`).
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable, Iterator, Mapping

from intact.data.declare import BenchmarkSettings
from intact.data.image_config import ImageBenchmarkConfig
from intact.methods import METHODS
from intact.methods.declare import problems
from intact.models.arch import Arch, backbone_arch
from intact.naming import misspelled, parse_method_name
from intact.settings import ConfigError, RunConfig
from intact.studies import expand_studies
from intact.tune import expand_tune, point_problems, tune_run_count, tune_section

#: the most runs (benchmark x method name x seed) a config may declare: config.yaml declares under 400 (its tune
#: study included), a paper config about 200
MAX_RUNS = 10_000


def declared_runs(cfg: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, method name) of every run the config declares: ``run.methods`` and each study's runs."""
    for m in cfg["run"]["methods"]:
        yield "run.methods", m
    for name, study in expand_studies(cfg).items():
        for m in study.methods:
            yield f"studies.{name}", m


def check_run_count(cfg: Mapping[str, Any]) -> None:
    """The runs the config declares - the default run and the studies on ``run.benchmarks`` (a run two of them
    name counted once), and the tune study's (:func:`intact.tune.tune_run_count`) - at most :data:`MAX_RUNS`;
    counted from the lists the schema has bounded, before any plan, grid or file list is built."""
    seeds: dict[str, set[int]] = {m: set(cfg["run"]["seeds"]) for m in cfg["run"]["methods"]}
    for study in expand_studies(cfg).values():
        for m in study.methods:
            seeds.setdefault(m, set()).update(study.seeds)
    count = len(cfg["run"]["benchmarks"]) * sum(map(len, seeds.values())) + tune_run_count(cfg)
    if count > MAX_RUNS:
        _fail(f"it declares {count:,} runs (benchmark x method x seed, studies and studies.tune included); "
              f"at most {MAX_RUNS:,}")


def check_runs(cfg: Mapping[str, Any],
               resolve: Callable[[str, str], RunConfig]) -> dict[tuple[str, str], RunConfig]:
    """Resolve (``resolve(benchmark, method)``) and check every declared run on every benchmark of
    ``run.benchmarks`` and every run of studies.tune; raise ConfigError naming the run and where it is declared.
    Return the resolved runs, (benchmark, method) -> run."""
    _check_grids(cfg)
    seen: dict[tuple[str, str], RunConfig] = {}
    for where, method in declared_runs(cfg):
        for b in cfg["run"]["benchmarks"]:
            if (b, method) in seen:
                continue
            try:
                run = seen[(b, method)] = resolve(b, method)
                _check_optim(run)
                _check_name_overrides(method, run)
                _check_backbone_fit(cfg, run)
            except ConfigError as err:
                raise ConfigError(f"{err} (run {method!r}, declared in {where})") from None
    for b, method in tune_runs(cfg):
        try:
            run = seen[(b, method)] = seen.get((b, method)) or resolve(b, method)
            _check_optim(run)
            _check_name_overrides(method, run)
            _check_backbone_fit(cfg, run)
        except ConfigError as err:
            raise ConfigError(f"{err} (run {method!r} on {b!r}, declared in studies.tune)") from None
    study = expand_tune(cfg)
    for entry, search in zip(tune_section(cfg).searches, study.searches) if study else ():
        for problem in point_problems(entry, search):
            _fail(f"key 'studies.tune.searches': run {search.run!r}: {problem}")
    return seen


def tune_runs(cfg: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(benchmark, name) of every run studies.tune may ask for: each search point on validation and on test
    (whichever is chosen), each baseline; the searched runs must be distinct and the benchmarks declared."""
    try:
        study = expand_tune(cfg)
    except ValueError as err:
        raise ConfigError(f"config: {err}") from None
    if study is None:
        return []
    runs = [s.run for s in study.searches]
    if len(set(runs)) < len(runs):
        _fail(f"key 'studies.tune.searches': each run is searched once (got {runs})")
    if cfg["run"].get("eval_split") == "val":
        _fail("key 'run.eval_split' = 'val': the tune study's final runs and baselines run under run.eval_split, so "
              "they would be scored on the validation part; set it to test, or remove studies.tune (`tune: null`)")
    names = [n for s in study.searches for n in (*s.val_names, *s.test_names)] + list(study.baseline_runs())
    return [(b, n) for b in study.benchmarks for n in dict.fromkeys(names)]


def _fail(msg: str):
    raise ConfigError(f"config: {msg}")


def _check_grids(cfg: Mapping[str, Any]) -> None:
    spec = (cfg.get("studies") or {}).get("sensitivity")
    grid = spec["grid"] if spec else {}  # a required key, read as intact.studies.sensitivity_grid reads it
    for key, values in grid.items():
        for i, v in enumerate(values):
            if v <= 0:
                _fail(f"key 'studies.sensitivity.grid.{key}[{i}]' = {v!r}: a sensitivity grid is a log-spaced sweep, "
                      f"so every lambda must be > 0 (lambda = 0 switches the term off: that is studies.ablation)")
            if misspelled(v):
                _fail(f"key 'studies.sensitivity.grid.{key}[{i}]' = {v!r}: spelled {misspelled(v)} in its run's "
                      "name, another number (a name keeps 6 significant digits); round it")


def _check_name_overrides(method: str, run: RunConfig) -> None:
    for section in parse_method_name(method).section_overrides():
        top, _, rest = section.partition(".")
        if top == "intact" and run.intact is None:
            _fail(f"method {method!r}: sets InTAct keys but the run has no '+intact', so they would be ignored "
                  f"(did you mean {run.base + '+intact' + method[len(run.base):]!r}?)")
        if top == "methods" and rest.split(".")[0] != run.base:
            _fail(f"method {method!r}: overrides 'methods.{rest}', which a {run.base!r} run never reads "
                  f"(only 'methods.{run.base}' applies)")


def check_benchmark_settings(bench: BenchmarkSettings) -> None:
    """The benchmark type's own declared checks (its declaration's ``check``)."""
    check = bench.declaration.check
    for key, problem in (check(bench) if check else ()):
        value = getattr(bench, key)
        _fail(f"key 'benchmarks.{bench.name}.{key}' = {list(value) if isinstance(value, tuple) else value!r}: "
              f"{problem}")


def _check_optim(run: RunConfig) -> None:
    """A view of prepared images only where there are some; a batch that fits a task where the last partial one
    is dropped (where the benchmark knows its sizes before it is prepared: :meth:`BenchmarkSettings.train_images`)."""
    bench, o = run.benchmark, run.optim
    least = bench.train_images(run.eval_split)
    if o.drop_last and least is not None and o.batch_size > least:
        _fail(f"key 'optim.batch_size' = {o.batch_size}: more than the {least} training images of a task of benchmark "
              f"{bench.name!r} (eval_split {run.eval_split}), and optim.drop_last is set, so no step would be taken; "
              f"use batch_size <= {least} or drop_last: false")
    if (o.train_crop != "benchmark" or o.test_resize is not None) and not isinstance(bench, ImageBenchmarkConfig):
        _fail(f"key 'optim.train_crop' = {o.train_crop!r} / 'optim.test_resize' = {o.test_resize!r}: benchmark "
              f"{bench.name!r} (type {bench.type!r}) has no prepared images to crop; they apply to image benchmarks")
    if o.test_resize is not None and o.test_resize < bench.image_size:  # the job's exact bound is at least this
        _fail(f"key 'optim.test_resize' = {o.test_resize}: Resize({o.test_resize}) leaves no CenterCrop"
              f"({bench.image_size}) of the images of benchmark {bench.name!r}; use test_resize >= {bench.image_size} "
              "(the official scripts: 256 at 224)")


def _check_method(run: RunConfig, arch: Arch) -> None:
    """The method's declared checks (:func:`intact.methods.declare.problems`): its block lists against the
    backbone's depth, then its own checks, which see the benchmark and the backbone (depth, width, heads)."""
    spec, settings = METHODS[run.base], run.settings
    bb = run.backbone
    for key, problem in problems(spec, settings, run.benchmark, arch):
        value = getattr(settings, key)
        _fail(f"key 'methods.{run.base}.{key}' = {list(value) if isinstance(value, tuple) else value!r}: {problem} "
              f"(backbone {bb.name!r}: {bb.model})")


def _check_backbone_fit(cfg: Mapping[str, Any], run: RunConfig) -> None:
    bb, bench = run.backbone, run.benchmark
    try:
        arch = backbone_arch(bb.model)
    except ValueError as err:
        _fail(f"key 'backbones.{bb.name}.model' = {bb.model!r}: {err}")
    if arch.problem:
        _fail(f"key 'backbones.{bb.name}.model' = {bb.model!r}: prompts cannot be attached: {arch.problem}")
    _check_method(run, arch)
    channels = bench.declaration.channels  # declared: the type's images have this many channels
    if channels is not None and arch.in_chans != channels:
        _fail(f"key 'benchmarks.{bench.name}.backbone' = {bb.name!r}: {bb.model} takes {arch.in_chans}-channel "
              f"images, benchmark {bench.name!r} has {channels}")
    for key in ("input_mean", "input_std"):
        n = len(getattr(bb, key))
        if n not in (1, arch.in_chans):
            _fail(f"key 'backbones.{bb.name}.{key}' has {n} values; {bb.model} takes {arch.in_chans}-channel images "
                  f"(expected 1 value{f' or {arch.in_chans}' if arch.in_chans != 1 else ''})")
    if arch.img_size is not None and channels is not None and (bench.image_size,) * 2 != arch.img_size:
        _fail(f"key 'benchmarks.{bench.name}.image_size' = {bench.image_size}: backbone {bb.name!r} ({bb.model}) "
              f"takes {arch.img_size[0]}x{arch.img_size[1]} images")
