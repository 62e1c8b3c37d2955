"""Every value a config may hold, met the way a user meets it: refused in one line at validation, or run.

    PYTHONPATH=src python tools/settings_fuzz.py validation [--values small|full] [config.yaml overlay.yaml ...]
    PYTHONPATH=src python tools/settings_fuzz.py jobs [--only TEXT ...]

``validation``: the config (default ``config.yaml``; several files are layered as Snakemake layers them) with every
declared key written out (the ``intact``, ``optim`` and ``head`` sections, every method's ``methods.<m>`` and the
experiments, at their defaults), then each of its values, and each list and mapping, replaced in turn by each bad
value (:data:`VALUES`; at a string, bad method names too), checked by validation and the reads the workflow makes
at start-up (``workflow/rules/common.smk``). Validation may refuse it (:class:`~intact.settings.ConfigError`) or
accept it; any other exception escaped as a traceback, and is listed.

``jobs``: each declared setting of each method and of the shared sections at its edges (its bounds, each enum value,
the other boolean, a large and a small value), and some list values (:data:`LIST_CASES`). Where validation accepts
it, two tasks of the tiny digits benchmark train and are evaluated in this process. Then each edge of the digits
benchmark's settings (where accepted: the benchmark is prepared), of its backbone's pretraining (one epoch) and of the
experiments' (short runs of the toy and the drift experiment; list values too, :data:`LIST_EDGES`). Then each edge
of each image benchmark type's settings, its shipped splits, its task list and the image-only optim settings
(:func:`image_cases`): where validation accepts it (data roots checked), the type's synthetic tree is prepared and two
tasks of ``coda_p+intact`` train on an untrained 32-px RGB ViT (:func:`run_image_case`). Each case ends
in one of: refused at validation; ran; diverged (the guard's ``NonFiniteError``: a rate of 1000 may); refused by the
job (a ``ValueError`` naming the setting: a check validation could not make); crashed (anything else). Its 328 method
and section cases took ~25 min on 2 cores beside another run.

Exit status 1 when something escaped validation or a job crashed. docs/log/2026-11-30-settings-fuzz.md.
"""

from __future__ import annotations

import argparse
import collections
import copy
import dataclasses
import shutil
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from intact.cli import existing_file
from intact.config import missing_data, missing_weights, resolver, tracking_config, validate_config
from intact.layering import read_files
from intact.methods import METHODS
from intact.plan import Plan
from intact.rehearsal import settings as rehearsal_settings
from intact.report.settings import report_settings
from intact.settings import ConfigError, defaults, settable_fields
from intact.settings.experiments import EXPERIMENTS, experiments_params
from intact.settings.fields import type_hints
from intact.settings.sections import SECTIONS, PretrainConfig, section_defaults

#: values put in place of each value of the config: ``small`` one of each JSON type, ``full`` edges too
VALUES = {
    "small": ["x", 2.5, [], {}, None],
    "full": ["x", "", -1, 0, 1, 2.5, 10**30, -(10**30), [], [1], [None], [[]], {}, {"a": 1}, {"x": None}, None,
             True, False, float("nan"), float("inf")],
}
#: method names put in place of each string of the config
NAMES = ["", " ", "coda_p+", "coda_p@x", "coda_p-no_var", "a b", "coda_p+intact+intact", "coda_p@lr=1,lr=2",
         "coda_p@methods.coda_p.x=1", "coda_p+intact@lambda_intdrift=-1", "coda_p@protocol=nope",
         "coda_p@optim.epochs=0", "\u00fc", "coda_p+intact-no_var@lambda_var=1"]
#: the shared sections a run reads, filled in and fuzzed
RUN_SECTIONS = ("intact", "optim", "head")


def filled(*paths: str) -> dict[str, Any]:
    """The layered config with every declared key of the run sections, the methods and the experiments written
    out (at its default where the config does not set it)."""
    cfg = read_files(paths)
    for s in RUN_SECTIONS:
        cfg[s] = {**section_defaults(s), **(cfg.get(s) or {})}
    cfg["methods"] = dict(cfg.get("methods") or {})
    for name, spec in METHODS.loaded().items():
        declared = defaults(spec.settings)
        settable = {f.name: declared[f.name] for f in settable_fields(spec.settings) if f.name in declared}
        cfg["methods"][name] = {**settable, **(cfg["methods"].get(name) or {})}
    cfg["experiments"] = dict(cfg.get("experiments") or {})
    for name, cls in EXPERIMENTS.items():
        cfg["experiments"][name] = {**defaults(cls), **(cfg["experiments"].get(name) or {})}
    return cfg


def leaves(node: Any, path: tuple = ()) -> Iterator[tuple]:
    """The path of every value, list and mapping under ``node`` (itself first)."""
    yield path
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        yield from leaves(value, (*path, key))


def replaced(cfg: Mapping[str, Any], path: tuple, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(cfg)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = copy.deepcopy(value)
    return out


def start_up(cfg: dict[str, Any]) -> None:
    """Validation, then what the workflow reads from the config before it plans a job (common.smk)."""
    runs = validate_config(cfg, check_files=False)
    tracking_config(cfg)
    missing_weights(cfg)
    missing_data(cfg, prepared=lambda b: False)
    plan = Plan(cfg)
    plan.target_runs()
    plan.full_targets()
    experiments_params(cfg)
    report_settings(cfg, resolver(cfg, runs))
    rehearsal_settings(cfg)


def where(err: BaseException) -> str:
    frame = traceback.extract_tb(err.__traceback__)[-1]
    return f"{type(err).__name__} at {frame.filename.rpartition('/src/')[2] or frame.filename}:{frame.lineno}"


def fuzz_validation(cfg: dict[str, Any], values: list[Any], names: list[str] = NAMES, sections: tuple[str, ...] = (),
                    check: Callable[[dict[str, Any]], Any] = start_up) -> tuple[int, list[tuple[str, Any, str]]]:
    """(mutations, escapes): each (key, value, exception) that left ``check`` other than as a ConfigError; each
    value of the top-level ``sections`` (default: all) replaced by each of ``values`` (and at a string, ``names``)."""
    check(copy.deepcopy(cfg))  # the filled config itself is valid
    count, escaped = 0, []
    for path in list(leaves(cfg))[1:]:
        if sections and path[0] not in sections:
            continue
        node = cfg
        for key in path:
            node = node[key]
        for value in values + (names if isinstance(node, str) else []):
            count += 1
            try:
                check(replaced(cfg, path, value))
            except ConfigError:
                pass
            except Exception as err:  # noqa: BLE001 - what this tool looks for
                escaped.append((".".join(map(str, path)), value, f"{where(err)}: {str(err)[:200]}"))
    return count, escaped


def edge_values(field: dataclasses.Field, hint: Any) -> list[Any]:
    """A declared setting's edges: each other enum value or boolean; for a number its bounds, 1 (or 0 and 1e-8)
    and a large value (64 or 1e3), and null where it may be; none for other types."""
    bounds, text = field.metadata.get("bounds", {}), str(hint)
    if "enum" in bounds:
        out = list(bounds["enum"])
    elif hint is bool or text == "bool":
        out = [not field.default]
    elif "int" in text or "float" in text:
        whole = "float" not in text
        step = 1 if whole else 1e-6
        out = [bounds[k] for k in ("minimum", "maximum") if k in bounds]
        out += [bounds["exclusiveMinimum"] + step] if "exclusiveMinimum" in bounds else []
        out += [bounds["exclusiveMaximum"] - step] if "exclusiveMaximum" in bounds else []
        out += [64, 1] if whole else [1e3, 0.0, 1e-8]
        out += [None] if "None" in text else []
    else:
        out = []
    return [v for v in dict.fromkeys(out) if v != field.default]


#: list-valued method and section settings: (run name, section, key, value); a method's name is its section
LIST_CASES = [("coda_p+intact", "coda_p", "layers", []), ("coda_p+intact", "coda_p", "layers", [0, 0]),
              ("coda_p+intact", "coda_p", "layers", [2, 0]), ("dualprompt+intact", "dualprompt", "g_layers", []),
              ("dualprompt+intact", "dualprompt", "e_layers", [0, 1]), ("l2p+intact", "l2p", "layers", []),
              ("compositional_prompt+intact", "compositional_prompt", "general_layers", [0, 0]),
              ("esn", "esn", "temperatures", [5.0]), ("net_finetune+intact", "net_finetune", "protect", []),
              ("net_finetune+intact", "net_finetune", "widths", [1]), ("coda_p+intact", "optim", "milestones", [3, 1]),
              ("coda_p+intact", "head", "hidden", [1])]


def job_cases() -> Iterator[tuple[str, dict[str, Any], str]]:
    """(run name, sections, label) of each edge of each method's and each run section's settings, and
    :data:`LIST_CASES`."""
    for run, section, key, v in LIST_CASES:
        where = {"methods": {section: {key: v}}} if section in METHODS.loaded() else {section: {key: v}}
        yield run, where, f"{'methods.' if 'methods' in where else ''}{section}.{key}={v!r}"
    for name, spec in sorted(METHODS.loaded().items()):
        hints = type_hints(spec.settings)
        run = name + ("+intact" if spec.accepts_intact else "")
        for f in settable_fields(spec.settings):
            for v in edge_values(f, hints[f.name]):
                yield run, {"methods": {name: {f.name: v}}}, f"methods.{name}.{f.name}={v!r}"
    for section in RUN_SECTIONS:
        hints = type_hints(SECTIONS[section])
        for f in settable_fields(SECTIONS[section]):
            for v in edge_values(f, hints[f.name]):
                yield "coda_p+intact", {section: {f.name: v}}, f"{section}.{f.name}={v!r}"


def run_case(bench: Mapping[str, Any], name: str, sections: dict[str, Any], folder: Path) -> str:
    """How one job case ends (the module docstring's categories), with the error where there is one."""
    from intact.layering import merge

    cfg = merge(bench["config"], sections)
    cfg["run"] = {**cfg["run"], "methods": [name]}
    try:
        validate_config(cfg, check_files=False)
    except ConfigError:
        return "refused at validation"
    return ended(lambda: train_two(bench, name, sections, folder))


def train_two(bench: Mapping[str, Any], name: str, sections: dict[str, Any], folder: Path) -> None:
    """Train and evaluate tasks 0 and 1 (where there are two) of run ``name`` (``sections`` merged over ``bench``'s
    config) in ``folder``."""
    from intact.evaluate import evaluate_task
    from intact.testing import tiny_run, train_one

    run = tiny_run(bench, name, 0, **sections)
    shutil.rmtree(folder, ignore_errors=True)
    for t in range(min(2, run.benchmark.num_tasks)):
        out = folder / f"task{t}"
        train_one(bench, run, out, t, folder / f"task{t - 1}" if t else None)
        evaluate_task(run, t, manifest=bench["manifest"], backbone_weights=bench["weights"],
                      state=out / "state.safetensors", out_path=out / "eval.json", threads=1)


def ended(job: Callable[[], Any], refusals: tuple[type[Exception], ...] = (ValueError,)) -> str:
    """How ``job`` ended: ran, diverged, refused by the job (one of ``refusals``: a ``ValueError`` names the
    setting) or crashed."""
    from intact.guard import NonFiniteError

    try:
        job()
    except NonFiniteError as err:
        return f"diverged: {str(err)[:160]}"
    except refusals as err:
        return f"refused by the job: {str(err)[:200]}"
    except Exception as err:  # noqa: BLE001 - what this tool looks for
        return f"crashed: {where(err)}: {str(err)[:200]}"
    return "ran"


#: list-valued experiment settings the edges of numbers do not reach: (experiment, key, value)
LIST_EDGES = [("toy", "segments", [[1.0, -1.0], [1.0, 3.0]]), ("toy", "segments", [[0.0, 0.0], [1.0, 2.0]]),
              ("toy", "segments", [[0.0, 2.0], [1.0, 3.0]]), ("toy", "hidden", [1]),
              ("drift", "pairs", [[1, 1], [2, 3]]), ("drift", "pairs", [[0, 1], [0, 1]]), ("drift", "hidden", [1, 1])]
#: what keeps an experiment case short (its settings' own edges are what is varied)
SHORT = {"toy": {"steps": 3, "samples_per_task": 20, "grid_points": 11}, "drift": {"epochs": 1, "seeds": [0]}}


def data_cases() -> Iterator[tuple[str, dict[str, Any], str]]:
    """(kind, config change, label) of each edge of the digits benchmark's settings, its backbone's pretraining (one
    epoch) and the experiments'."""
    from intact.data import BENCHMARKS

    bench = BENCHMARKS["digits"].settings
    hints = type_hints(bench)
    for f in settable_fields(bench):
        for v in edge_values(f, hints[f.name]):
            yield "benchmark", {"benchmarks": {"digits": {f.name: v}}}, f"benchmarks.digits.{f.name}={v!r}"
    pretrain = type_hints(PretrainConfig)
    for f in settable_fields(PretrainConfig):
        for v in edge_values(f, pretrain[f.name]) if f.name != "epochs" else ():
            change = {"backbones": {"vit_digits": {"pretrain": {"epochs": 1, f.name: v}}}}
            yield "pretrain", change, f"backbones.vit_digits.pretrain.{f.name}={v!r}"
    for name, cls in EXPERIMENTS.items():
        hints = type_hints(cls)
        edges = [(f.name, v) for f in settable_fields(cls) if f.name not in SHORT[name]
                 for v in edge_values(f, hints[f.name])]
        for key, v in edges + [(k, v) for e, k, v in LIST_EDGES if e == name]:
            yield name, {"experiments": {name: {**SHORT[name], key: v}}}, f"experiments.{name}.{key}={v!r}"


def run_data_case(kind: str, change: dict[str, Any], folder: Path, manifest: Path) -> str:
    """How one benchmark, pretraining or experiment case ends: refused at validation, ran (prepared, pretrained for
    one epoch on ``manifest``'s digits, or trained), diverged, or crashed."""
    from intact.config import backbone_config, benchmark_config
    from intact.pretrain import pretrain_backbone
    from intact.data import benchmark_class
    from intact.experiments.drift import run_drift, split_tasks
    from intact.experiments.toy import run_toy
    from intact.layering import merge
    from intact.settings.experiments import experiment_settings
    from intact.testing import tiny_config

    cfg = merge(tiny_config(), change)
    try:
        validate_config(cfg, check_files=False)
    except ConfigError:
        return "refused at validation"
    shutil.rmtree(folder, ignore_errors=True)

    def job() -> None:
        if kind == "benchmark":
            benchmark_class("digits").prepare(benchmark_config(cfg, "digits"), folder)
        elif kind == "pretrain":
            pretrain_backbone(backbone_config(cfg, "vit_digits"), manifest, folder / "w.safetensors",
                              folder / "w.json", threads=1, progress=False, benchmark=benchmark_config(cfg, "digits"))
        elif kind == "toy":
            run_toy(experiment_settings(cfg, "toy"), "intact")
        else:
            settings = experiment_settings(cfg, "drift")
            run_drift(settings, split_tasks(settings, 0), "intact", 0)
    return ended(job, refusals=())   # here a ValueError is scikit-learn's split error in the job: a crash


#: the image benchmark types with a synthetic layout (intact.data.synthetic), each with two of its tasks
IMAGE_TASKS = {"imagenet_r": ["art", "cartoon"], "imagenet_c": ["defocus_blur", "glass_blur"],
               "domainnet": ["real", "quickdraw"], "imagenet_mix": ["c_defocus_blur", "r_art"]}
#: the shared settings that only image benchmarks read (the crop, the resize, the last partial batch), tried on each
IMAGE_OPTIM = ("train_crop", "test_resize", "drop_last", "batch_size")


def image_cases() -> Iterator[tuple[str, dict[str, Any], str]]:
    """(benchmark type, config change, label) of each edge of each image benchmark type's settings (``val_*`` with
    ``eval_split: val``, where they are read), of the image-only optim settings, and of its task list."""
    from intact.data import BENCHMARKS

    optim = type_hints(SECTIONS["optim"])
    for kind, tasks in IMAGE_TASKS.items():
        decl = BENCHMARKS[kind]
        hints = type_hints(decl.settings)
        for f in settable_fields(decl.settings):
            values = edge_values(f, hints[f.name]) + (list(decl.splits) if f.name == "split" else [])
            for v in values:
                run = {"run": {"eval_split": "val"}} if f.name.startswith("val_") else {}
                yield kind, {"benchmarks": {kind: {f.name: v}}, **run}, f"benchmarks.{kind}.{f.name}={v!r}"
        for v in ([], tasks[:1], [tasks[0], tasks[0]], tasks[::-1], [*tasks, decl.tasks[-1]]):
            yield kind, {"benchmarks": {kind: {"domains": v}}}, f"benchmarks.{kind}.domains={v!r}"
        for f in (f for f in settable_fields(SECTIONS["optim"]) if f.name in IMAGE_OPTIM):
            for v in edge_values(f, optim[f.name]):
                yield kind, {"optim": {f.name: v}}, f"{kind}: optim.{f.name}={v!r}"


def image_config(kind: str, base: Path) -> dict[str, Any]:
    """The tiny config with benchmark ``kind`` on its synthetic tree under ``base`` (two tasks, 32 px) and an untrained
    RGB ViT (``base/vit_rgb.safetensors``), run ``coda_p+intact``."""
    from intact.data.synthetic import tree_keys
    from intact.testing import tiny_config

    cfg = tiny_config(benchmarks=[kind], methods=["coda_p+intact"])
    cfg["backbones"]["vit_rgb"] = {"model": "vit_rgb_p8", "weights": str(base / "vit_rgb.safetensors"),
                                   "sha256": None, "input_mean": [0.5] * 3, "input_std": [0.5] * 3}
    cfg["benchmarks"][kind] = {"type": kind, "backbone": "vit_rgb", "image_size": 32, "domains": IMAGE_TASKS[kind],
                               **tree_keys(kind, base / kind)}
    cfg["optim"]["batch_size"] = 4
    return cfg


def image_trees(base: Path) -> None:
    """Each type's synthetic tree (4 classes, 4 images a class and task) and the untrained ViT under ``base``."""
    import torch
    from safetensors.torch import save_file

    from intact.data import BENCHMARKS
    from intact.data.synthetic import write_tree
    from intact.models.backbone import create_vit

    for kind, tasks in IMAGE_TASKS.items():
        write_tree(kind, base / kind, [*tasks, BENCHMARKS[kind].tasks[-1]], per_class=4, classes=4, seed=0)
    torch.manual_seed(0)
    save_file(create_vit("vit_rgb_p8").state_dict(), str(base / "vit_rgb.safetensors"))


def run_image_case(kind: str, change: dict[str, Any], base: Path, folder: Path) -> str:
    """How one image case ends: refused at validation (data roots checked), or the benchmark prepared and two tasks
    of ``coda_p+intact`` trained and evaluated on it (:func:`ended`)."""
    from intact.config import benchmark_config
    from intact.data import prepare_benchmark
    from intact.layering import merge

    cfg = merge(image_config(kind, base), change)
    try:
        validate_config(cfg)
    except ConfigError:
        return "refused at validation"
    shutil.rmtree(folder, ignore_errors=True)

    def job() -> None:
        manifest = prepare_benchmark(benchmark_config(cfg, kind), folder / "data", workers=1, progress=False)
        bench = {"config": cfg, "benchmark": kind, "manifest": manifest, "weights": base / "vit_rgb.safetensors"}
        train_two(bench, "coda_p+intact", {}, folder / "run")
    return ended(job)


def fuzz_jobs(only: list[str]) -> dict[str, list[str]]:
    """Category -> the labels of the cases that ended in it."""
    from intact.testing import tiny_bench

    cases = [c for c in [*job_cases(), *data_cases(), *image_cases()] if not only or any(o in c[2] for o in only)]
    ends: dict[str, list[str]] = collections.defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        bench = tiny_bench(Path(tmp) / "bench")
        image_trees(Path(tmp) / "trees")
        for i, (name, sections, label) in enumerate(cases):
            if name in IMAGE_TASKS:
                end = run_image_case(name, sections, Path(tmp) / "trees", Path(tmp) / "image")
            elif name in ("benchmark", "pretrain", *EXPERIMENTS):
                end = run_data_case(name, sections, Path(tmp) / "data", bench["manifest"])
            else:
                end = run_case(bench, name, sections, Path(tmp) / "run")
            ends[end.partition(":")[0]].append(label)
            if end not in ("ran", "refused at validation"):
                print(f"{label} ({name}): {end}", flush=True)
            print(f"[{i + 1}/{len(cases)}]", file=sys.stderr, flush=True)
    return ends


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["validation", "jobs"])
    parser.add_argument("configs", nargs="*", type=existing_file, default=["config.yaml"],
                        help="validation: the config files, layered")
    parser.add_argument("--values", choices=sorted(VALUES), default="full", help="validation: the bad values")
    parser.add_argument("--only", nargs="*", default=[], help="jobs: the cases whose label holds one of these")
    args = parser.parse_args(argv)
    args.configs = [str(path) for path in args.configs]
    if args.mode == "validation":
        count, escaped = fuzz_validation(filled(*args.configs), VALUES[args.values])
        for key, value, err in escaped:
            print(f"{key} = {value!r}: {err}")
        print(f"{count} mutations of {' <- '.join(args.configs)}: {len(escaped)} escaped validation")
        return 1 if escaped else 0
    ends = fuzz_jobs(args.only)
    print("; ".join(f"{end}: {len(labels)}" for end, labels in sorted(ends.items())))
    return 1 if ends.get("crashed") else 0


if __name__ == "__main__":
    raise SystemExit(main())
