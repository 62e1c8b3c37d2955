"""Send a job's stdout/stderr (Python and C level) to its log file, as Snakemake's ``log:`` expects, with the
deprecations a plugin raises (:func:`show_deprecations`)."""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
import warnings
from pathlib import Path
from collections.abc import Iterator


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
