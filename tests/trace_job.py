"""Run one ``train_task`` job as Snakemake runs it and print, as a JSON list on the last line, the package files it
executes (paths relative to ``src/intact``): ``tests/test_one_job.py`` compares them with docs/one-job.md.

Usage: python tests/trace_job.py <manifest.json> <backbone.safetensors> <scratch folder>

The tiny config's ``coda_p+intact``, seed 0: the rule's side (``resolve_run``, its plain form and hash, as
``run_config`` in workflow/rules/common.smk computes them), then the adapter workflow/scripts/train_task.py itself
for tasks 0 and 1 (task 1 from task 0's state), given what Snakemake gives it, with the benchmark's query cache
(built first, untraced: another rule's job). A file counts when a function of it runs (``sys.setprofile``);
importing a module does not (its body, and any call made while a package module is being imported, is left
out), so the set is the same in a fresh process and in one that has imported everything already.
"""

from __future__ import annotations

import json
import runpy
import sys
import threading
from pathlib import Path

from snakemake.iocontainers import Namedlist

import intact
from intact.cache import build_query_cache
from intact.config import resolve_run
from intact.testing import REPO, tiny_config

PACKAGE = Path(intact.__file__).parent
ADAPTER = REPO / "workflow/scripts/train_task.py"
METHOD = "coda_p+intact"


class Job:
    """What Snakemake hands a ``script:`` job as ``snakemake`` (the parts the adapter reads)."""

    def __init__(self, run: dict, task: int, inputs: dict[str, str], out: Path, log: Path):
        self.input = Namedlist(fromdict=inputs)
        self.output = Namedlist(fromdict={"state": str(out / "state.safetensors"),
                                          "evaluation": str(out / "eval.json")})
        self.params = Namedlist(fromdict={"run": run})
        self.wildcards = Namedlist(fromdict={"task": str(task)})
        self.log, self.rule, self.threads = [str(log)], "train_task", 1


class Tracer:
    """The package's source files whose functions run, outside any package module's import."""

    def __init__(self) -> None:
        self.prefix, self.seen, self.files = f"{PACKAGE}/", set(), set()

    def __call__(self, frame, event: str, arg) -> None:
        code = frame.f_code
        if event != "call" or code in self.seen or not code.co_filename.startswith(self.prefix):
            return
        if code.co_name == "<module>" or self._importing(frame.f_back):
            return
        self.seen.add(code)
        self.files.add(Path(code.co_filename).relative_to(PACKAGE).as_posix())

    def _importing(self, frame) -> bool:
        while frame is not None:
            if frame.f_code.co_name == "<module>" and frame.f_code.co_filename.startswith(self.prefix):
                return True
            frame = frame.f_back
        return False


def main(manifest: str, weights: str, scratch: str) -> None:
    cfg, folder = tiny_config(), Path(scratch)
    query = folder / "cache"
    build_query_cache(resolve_run(cfg, "digits", METHOD, 0).backbone, manifest, weights, query, threads=1,
                      progress=False)
    tracer = Tracer()
    sys.setprofile(tracer)
    threading.setprofile(tracer)
    try:
        run = resolve_run(cfg, "digits", METHOD, 0)
        plain, _ = run.to_dict(), run.hash()
        for task in (0, 1):
            inputs = {"manifest": manifest, "backbone": weights, "query": str(query / "query.json")}
            if task:
                prev = folder / f"task{task - 1}"
                inputs |= {"state": str(prev / "state.safetensors"), "hypercube": str(prev / "hypercube.safetensors")}
            job = Job(plain, task, inputs, folder / f"task{task}", folder / f"task{task}.log")
            runpy.run_path(str(ADAPTER), init_globals={"snakemake": job})
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    print(json.dumps(sorted(tracer.files)))


if __name__ == "__main__":
    main(*sys.argv[1:])
