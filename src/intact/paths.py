"""Where a run's files live: one spelling of the run folder for the package and the workflow; a user's paths
(``~`` and ``$VARS`` expanded) and why one is not there (no torch)."""

from __future__ import annotations

import os
import re
from pathlib import Path

#: the folder every output goes under (relative to the working directory)
RESULTS = "results"

#: a run's key: (benchmark, method, seed) as a path, also the run's place under results/logs and timings
RUN_KEY = "{benchmark}/{method}/seed{seed}"

#: a run's folder as a Snakemake wildcard pattern (and a ``str.format`` template)
RUN_DIR = f"{RESULTS}/runs/{RUN_KEY}"


def run_dir(benchmark: str, method: str, seed: int | str, root: str | os.PathLike = RESULTS) -> str:
    """The folder of run (benchmark, method, seed) under the results folder ``root``."""
    return f"{os.fspath(root)}/runs/" + RUN_KEY.format(benchmark=benchmark, method=method, seed=seed)


def run_of(folder: str | os.PathLike) -> dict[str, str]:
    """The benchmark, method and seed of a run folder (:func:`run_dir`'s inverse)."""
    path = Path(folder)
    return {"benchmark": path.parent.parent.name, "method": path.parent.name, "seed": path.name.removeprefix("seed")}


def task_dir(benchmark: str, method: str, seed: int | str, task: int | str, root: str | os.PathLike = RESULTS) -> str:
    """The folder of task ``task`` of a run: its state, hypercube, train.json and eval.json."""
    return f"{run_dir(benchmark, method, seed, root)}/task{task}"


#: a benchmark's query cache for a backbone: its listing (written last), beside one ``.npy`` per (split, task)
QUERY_CACHE = f"{RESULTS}/cache/{{benchmark}}/{{backbone}}/query.json"
#: the listing's key of its files' sha256 (checked by :class:`intact.cache.QueryCache`, added by ``intact migrate``)
QUERY_DIGESTS = "sha256"

#: a run's tracking marker: the Snakemake target of its MLflow tracking step (intact.tracking)
MARKER = "tracking.json"


def marker_path(benchmark: str, method: str, seed: int) -> str:
    """The tracking marker of one run (relative to the workdir)."""
    return f"{run_dir(benchmark, method, seed)}/{MARKER}"


def user_cache(name: str) -> Path | None:
    """``intact/<name>`` in the user's cache folder (``$XDG_CACHE_HOME``, else ``~/.cache``); None where the user
    has no home folder (nothing is kept then)."""
    try:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    except RuntimeError:
        return None
    return base / "intact" / name


def expand_path(value: str) -> str:
    """``~`` and ``$VARS`` expanded: data roots and weights may come from the environment."""
    return os.path.expanduser(os.path.expandvars(value))


def missing_path(what: str, raw: str) -> str:
    """"<what> '<raw>' (= expanded) does not exist", naming environment variables in it that are unset or empty."""
    path = expand_path(raw)
    text = f"{what} {raw!r}" + (f" (= {path!r})" if path != raw else "") + " does not exist"
    unset = [v for v in re.findall(r"\$\{?(\w+)\}?", raw) if not os.environ.get(v)]
    return text + (f" (environment variable {', '.join('$' + v for v in unset)} is not set)" if unset else "")


def file_problem(what: str, raw: str) -> str | None:
    """Why ``raw`` (``~`` and ``$VARS`` expanded) is not a file that can be read, said precisely: it does not
    exist (:func:`missing_path`), is a directory, is not a regular file (a socket, a device, a pipe), or cannot
    be read; None when it is a readable regular file."""
    expanded = expand_path(raw)
    path = Path(expanded)
    if not expanded or not path.exists():  # "$VAR" with VAR set to "" expands to "": not the current folder
        broken = f" (a broken symbolic link to {os.readlink(path)!r})" if path.is_symlink() else ""
        return missing_path(what, raw) + broken
    shown = f"{what} {raw!r}" + (f" (= {str(path)!r})" if str(path) != raw else "")
    if path.is_dir():
        return f"{shown} is a directory, not a file"
    if not path.is_file():
        return f"{shown} is not a regular file"
    if not os.access(path, os.R_OK):
        return f"{shown} cannot be read (no read permission)"
    return None
