"""A workflow script's job: its stdout/stderr (Python and C level) to its log file, as Snakemake's ``log:`` expects,
with the deprecations a plugin raises (:func:`show_deprecations`), and the rule's params in their typed forms
(:func:`job`, the one way every adapter in ``workflow/scripts`` reads its settings)."""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from collections.abc import Callable, Iterator, Mapping


def _run(data: Mapping[str, Any]) -> Any:
    from intact.config import run_from_dict

    return run_from_dict(data)


def _backbone(data: Mapping[str, Any]) -> Any:
    from intact.settings import BackboneConfig, build_dataclass

    return build_dataclass(BackboneConfig, data, "backbone")


def _benchmark(data: Any) -> Any:
    """A benchmark's typed settings; a rule whose params hold them typed already (Snakemake then records nothing
    of them: their plain form would be a new params entry, and rerun every stored query cache) hands them on."""
    from intact.data import benchmark_settings
    from intact.data.declare import BenchmarkSettings

    return data if isinstance(data, BenchmarkSettings) else benchmark_settings(data)


def _tracking(data: Any) -> Any:
    """The tracking settings; handed on where the rule's params hold them typed (as :func:`_benchmark`'s)."""
    from intact.settings import TrackingConfig, build_dataclass

    return data if isinstance(data, TrackingConfig) else build_dataclass(TrackingConfig, data, "tracking")


def _experiments(data: Mapping[str, Any]) -> dict[str, Any]:
    from intact.settings.experiments import EXPERIMENTS, experiment_settings

    return {name: experiment_settings({"experiments": data}, name) for name in EXPERIMENTS if name in data}


def _report(data: Mapping[str, Any]) -> Any:
    from intact.report.settings import ReportSettings
    from intact.settings import build_dataclass

    return build_dataclass(ReportSettings, data, "report")


#: the typed form of each ``params`` entry a rule hands its script, by the entry's name; any other entry is plain
#: data (a hash, a name, a list of seeds), handed on as it is
PARAM_FORMS: dict[str, Callable[[Any], Any]] = {
    "run": _run, "backbone": _backbone, "benchmark": _benchmark, "tracking": _tracking, "experiments": _experiments,
    "report": _report,
}


def job_params(params: Any) -> SimpleNamespace:
    """A rule's named params (Snakemake's ``snakemake.params``, or any mapping), each in its :data:`PARAM_FORMS`."""
    return SimpleNamespace(**{k: PARAM_FORMS.get(k, lambda v: v)(v) for k, v in params.items()})


@contextlib.contextmanager
def job(snakemake: Any) -> Iterator[SimpleNamespace]:
    """A workflow script's body: logged to the rule's log (:func:`log_to`), it gets the rule's params typed
    (:func:`job_params`); a setting that does not build fails the job, its message in the log."""
    with log_to(snakemake.log[0], snakemake.rule):
        yield job_params(snakemake.params)


def show_deprecations() -> None:
    """Print every ``DeprecationWarning`` (once per place that raises it), as pytest does: Python shows only those
    ``__main__`` raises, so a plugin's (at its import, in a hook) would reach its author under pytest alone. Called
    by ``intact validate`` and every job (:func:`log_to`); a ``-W`` option or ``PYTHONWARNINGS`` decides instead."""
    if not sys.warnoptions:
        warnings.simplefilter("default", DeprecationWarning)


@contextlib.contextmanager
def log_to(path: str | os.PathLike | None, rule: str | None = None) -> Iterator[None]:
    """Redirect file descriptors 1 and 2 to ``path`` (appending) for the duration of the block; an exception
    that leaves the block is written there with its traceback, then raised again.

    ``rule`` (the Snakemake rule name) is exported as ``INTACT_RULE`` for provenance records. Deprecations are
    shown (:func:`show_deprecations`): a plugin's hooks write them to the log.
    """
    show_deprecations()
    if rule:
        os.environ["INTACT_RULE"] = rule
    if not path:
        yield
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "a") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            yield
        except Exception:
            # the traceback into the log too: Snakemake points at a failed job's log file, and the console it
            # prints the exception to is gone on a cluster (or says only "empty file" of the log)
            sys.stderr.flush()
            traceback.print_exc(file=f)   # to the file itself, whatever sys.stderr has been replaced with
            f.flush()
            raise
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
