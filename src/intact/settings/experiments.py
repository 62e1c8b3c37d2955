"""The paper's non-prompt experiments' settings, ``experiments.toy`` and ``experiments.drift`` (targets study_toy
and study_drift; :mod:`intact.experiments`): declared with :func:`setting`, as the shared sections are, so their
schema, defaults and reference come from here. Their defaults are the paper's settings."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterator, Mapping

from intact.paths import expand_path, missing_path
from intact.settings.fields import ConfigError, build_dataclass, check_declared, recorded, setting

_PAIR = {"minItems": 2, "maxItems": 2}
#: the images of each digit, 0-9, in scikit-learn's bundled digits (1,797 in all): the drift experiment's data, and
#: the digits benchmark's (intact.data.digits); tests/test_experiments.py holds them to scikit-learn's
DIGIT_COUNTS = (178, 182, 177, 183, 181, 182, 181, 179, 174, 180)


def stratified_sizes(fraction: float, n: int) -> tuple[int, int]:
    """(taken, kept) of scikit-learn's ``train_test_split`` of ``n`` items with ``test_size=fraction``: it takes
    ceil(fraction x n); a stratified split needs at least one item of each class on each side."""
    taken = math.ceil(fraction * n)
    return taken, n - taken


@dataclass(frozen=True)
class ToyConfig:
    """Fig. 2: an MLP fits a Gaussian bump over intervals of x, with and without InTAct."""

    segments: tuple[tuple[float, float], ...] = setting(((-3.0, -1.0), (-1.0, 1.0), (1.0, 3.0)),
                                                        "one task per interval of x", minItems=2, items=_PAIR)
    sigma: float = setting(0.8, "the bump's width", exclusiveMinimum=0)
    samples_per_task: int = setting(200, "points per task", minimum=1)
    hidden: tuple[int, ...] = setting((64, 64), "hidden widths", minItems=1, items={"minimum": 1})
    steps: int = setting(1500, "full-batch Adam steps per task (cosine lr)", minimum=1)
    lr: float = setting(1e-2, "", exclusiveMinimum=0)
    lambda_intdrift: float = setting(100.0, "the InTAct run's only term",
                                     minimum=0)
    percentile: float = setting(0.0, "0: the box is the interval", minimum=0, maximum=50)
    grid_points: int = setting(601, "x where the fits are compared", minimum=1, maximum=1000)
    seed: int = setting(0, "", minimum=0)


@dataclass(frozen=True)
class DriftConfig:
    """The appendix's internal drift: an MLP on Split-digits DIL; InTAct's L_Feat on the first hidden layer, the
    other terms on the later ones."""

    pairs: tuple[tuple[int, int], ...] = setting(((0, 1), (2, 3), (4, 5), (6, 7), (8, 9)),
                                                 "one task per digit pair", minItems=2,
                                                 items={**_PAIR, "items": {"minimum": 0, "maximum": 9}})
    hidden: tuple[int, ...] = setting((100, 100), "", items={"minimum": 1}, **_PAIR)
    epochs: int = setting(20, "", minimum=1)
    batch_size: int = setting(32, "", minimum=1)
    lr: float = setting(1e-3, "", exclusiveMinimum=0)
    test_fraction: float = setting(0.3, "per task: the drift's reference images",
                                   exclusiveMinimum=0, exclusiveMaximum=1)
    seeds: tuple[int, ...] = setting((0, 1, 2), "", minItems=1, maxItems=100, uniqueItems=True,
                                     items={"minimum": 0})
    lambda_lwf: float = setting(1.0, "", minimum=0)
    temperature: float = setting(2.0, "", exclusiveMinimum=0)
    lambda_intdrift: float = setting(100.0, "", minimum=0)
    lambda_feat: float = setting(100.0, "", minimum=0)
    lambda_var: float = setting(1e-3, "", minimum=0)
    lambda_align: float = setting(1e-2, "", minimum=0)
    percentile: float = setting(5.0, "", minimum=0, maximum=50)
    feat_gate: str = setting("student_element", "the paper's (teacher_sample) is about never open on "
                             "100 units", enum=["teacher_sample", "student_element"])
    mnist_path: str | None = setting(None, "a folder of MNIST's IDX files; $VARS and ~ expand; null: "
                                     "scikit-learn's digits", minLength=1)
    max_per_task: int | None = setting(None, "subsample each task",
                                       minimum=1)


def toy_problems(s: ToyConfig) -> Iterator[tuple[str, str]]:
    """(key, problem): every segment an interval of x."""
    for i, (lo, hi) in enumerate(s.segments):
        if not lo < hi:
            yield f"segments[{i}]", f"[{lo}, {hi}] is not an interval: expected lo < hi"


def drift_problems(s: DriftConfig) -> Iterator[tuple[str, str]]:
    """(key, problem): every pair two digits; on the bundled digits, each task's split of ``test_fraction`` leaves
    both sides an image of each digit (:func:`stratified_sizes`)."""
    for i, (a, b) in enumerate(s.pairs):
        if a == b:
            yield f"pairs[{i}]", f"[{a}, {b}]: a task tells two different digits apart"
    if s.mnist_path is not None:
        return
    for a, b in s.pairs:
        n = DIGIT_COUNTS[a] + DIGIT_COUNTS[b]
        n = min(n, s.max_per_task or n)
        test, train = stratified_sizes(s.test_fraction, n)
        if min(test, train) < 2:
            yield "test_fraction", (f"splits the {n} images of digits {a} and {b} into {test} test and {train} "
                                    "training images: a stratified split needs at least 2 on each side, one of each "
                                    "digit")
            return


#: MNIST's four IDX files, as its download names them (each may also be gzipped, or named with ``.idx``)
MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
               "t10k-labels-idx1-ubyte")


def mnist_file(root: Path, stem: str) -> Path | None:
    """The file under ``root`` that holds MNIST's ``stem`` (:data:`MNIST_FILES`), or None."""
    dotted = stem.replace("-idx", ".idx")
    return next((root / n for n in (stem, stem + ".gz", dotted, dotted + ".gz") if (root / n).is_file()), None)


def drift_missing_inputs(s: DriftConfig) -> list[str]:
    """Messages naming what the drift experiment would not find: its ``mnist_path`` folder or an IDX file in it."""
    if s.mnist_path is None:
        return []
    root = Path(expand_path(s.mnist_path))
    if not root.is_dir():
        return ["key 'experiments.drift.mnist_path': " + missing_path("MNIST folder", s.mnist_path)]
    return [f"key 'experiments.drift.mnist_path': no {stem}[.gz] under {root}" for stem in MNIST_FILES
            if mnist_file(root, stem) is None]


#: each experiment under ``experiments:``: its declaration and its consistency checks
EXPERIMENTS: dict[str, type] = {"toy": ToyConfig, "drift": DriftConfig}
EXPERIMENT_CHECKS: dict[str, Callable[[Any], Iterator[tuple[str, str]]]] = {"toy": toy_problems,
                                                                            "drift": drift_problems}

for _cls in EXPERIMENTS.values():
    check_declared(_cls, f"section {_cls.__name__}")


def experiment_settings(cfg: Mapping[str, Any], name: str) -> Any:
    """The typed settings of ``experiments.<name>``: what the config sets over the declared defaults (nested lists
    as tuples, an integer where a float is declared as a float)."""
    return build_dataclass(EXPERIMENTS[name], (cfg.get("experiments") or {}).get(name), f"experiments.{name}")


def check_experiments(cfg: Mapping[str, Any]) -> None:
    """Raise :class:`ConfigError` on the first problem an experiment's check finds, naming the key."""
    for name in EXPERIMENTS:
        settings = experiment_settings(cfg, name)
        for key, problem in EXPERIMENT_CHECKS[name](settings):
            raise ConfigError(f"config: key 'experiments.{name}.{key}': {problem}")


def missing_experiment_inputs(cfg: Mapping[str, Any]) -> dict[str, list[str]]:
    """Experiment name -> the messages naming the files it reads that are not there (start-up checks them, as it
    checks weights and data roots: the rule ``study_<name>`` would fail on them)."""
    out = {"drift": drift_missing_inputs(experiment_settings(cfg, "drift"))}
    return {name: messages for name, messages in out.items() if messages}


def experiments_params(cfg: Mapping[str, Any], *names: str) -> dict[str, Any]:
    """The resolved settings of the experiments ``names`` (all by default), as plain data: an experiment rule's
    params, its own only (Snakemake records them: a changed setting reruns that experiment, not the other)."""
    return {name: recorded(experiment_settings(cfg, name)) for name in names or EXPERIMENTS}
