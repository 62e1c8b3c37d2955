# Helpers shared by the rules: config validation at start-up, run resolution, path builders.
import dataclasses
import os
import re
import sys

from intact.config import ConfigError, backbone_config, benchmark_config, missing_files, resolve_run, validate_config, weights_path
from intact.data.image_config import IMAGE_TYPES, plain_config
from intact.layering import LayerError, apply_extends
from intact.methods import METHODS
from intact.naming import NAME_PATTERN, parse_method_name
from intact.paths import RUN_DIR, run_dir
from intact.studies import DEFAULT_RUN_REPORT, expand_studies, report_files
from intact.tracking import tracking_config, tracking_markers

NOT_EXECUTING = ("--dry-run", "--dryrun", "--lint", "--dag", "--rulegraph", "--filegraph", "--d3dag", "--summary",
                 "--detailed-summary", "--list-rules", "--list-target-rules", "--list", "--lt")


def _dry_run():
    """-n / --dry-run (or lint, DAG drawing, listings): nothing runs, so missing data and weights only warn.
    The workflow object learns of -n only after parsing, so the command line is read too."""
    flags = sys.argv[1:]
    return workflow.dryrun or any(a in NOT_EXECUTING or re.fullmatch(r"-[A-Za-z]*n[A-Za-z]*", a) for a in flags)


try:
    # a --configfile that extends another (configs/paper/*.yaml over base.yaml): resolve the layers
    apply_extends(config, workflow.config_settings.configfiles, workflow.config_settings.config)
    validate_config(config, check_files=False)
    TRACKING = tracking_config(config)
    # weights and raw data: a dry run lists the grid before they are in place (and says what is
    # missing); a real run stops here naming them. A prepared benchmark no longer needs its raw images.
    _missing = missing_files(config, prepared=lambda b: os.path.exists(f"results/data/{b}/manifest.json"))
    if _missing and not _dry_run():
        raise ConfigError("config: " + "; ".join(_missing))
except (ConfigError, LayerError) as err:
    raise WorkflowError(str(err)) from None
for _m in _missing:
    print(f"intact: MISSING (a real run would stop here): {_m}", file=sys.stderr)
DRY_RUN_MISSING = bool(_missing)


def weights_input(name):
    """The weights file of backbone ``name`` as a job input; none in a dry run where it is still missing
    (the grid is listed, the message above names the file)."""
    path = weights_path(config, name)
    return [] if DRY_RUN_MISSING and not os.path.isfile(path) else path



STUDIES = expand_studies(config)


def package_code(*modules):
    """Source files of the package as inputs of the aggregation rules: when that code changes, tables and
    figures are rebuilt (mtime) without retraining anything (training rules do not list code)."""
    return [os.path.join(workflow.basedir, "src", "intact", m) for m in modules]


AGGREGATION_CODE = package_code("metrics.py", "results.py")
REPORT_CODE = package_code("report/tables.py", "report/plots.py", "report/studies.py", "studies.py")


def one_of(names):
    """A regex matching exactly these names (nothing if empty): restricts a rule to some config entries."""
    return "|".join(map(re.escape, names)) or "(?!)"


PRETRAINED_BACKBONES = [n for n, b in config["backbones"].items() if b["weights"] == "pretrain"]
EXTERNAL_BACKBONES = [n for n, b in config["backbones"].items() if b["weights"] != "pretrain"]
IMAGE_BENCHMARKS = [n for n, b in config["benchmarks"].items() if b["type"] in IMAGE_TYPES]
DIGITS_BENCHMARKS = [n for n, b in config["benchmarks"].items() if b["type"] not in IMAGE_TYPES]


wildcard_constraints:
    benchmark=r"[A-Za-z0-9_\-]+",
    backbone=r"[A-Za-z0-9_\-]+",
    method=NAME_PATTERN,
    seed=r"\d+",
    task=r"\d+",


def num_tasks(benchmark):
    return benchmark_config(config, benchmark).num_tasks


_RUN_CONFIGS = {}


def run_config(wildcards):
    """The resolved run settings (a plain dict): a params entry, so a changed setting reruns the run.
    Resolved once per run (not per task job): a paper grid has thousands of jobs."""
    key = (wildcards.benchmark, wildcards.method, int(wildcards.seed))
    if key not in _RUN_CONFIGS:
        _RUN_CONFIGS[key] = resolve_run(config, *key).to_dict()
    return _RUN_CONFIGS[key]


def as_dict(obj):
    return plain_config(obj)  # unset optional keys left out: existing jobs' params stay as they were


def manifest(wildcards):
    return f"results/data/{wildcards.benchmark}/manifest.json"


def backbone_name(benchmark):
    return config["benchmarks"][benchmark]["backbone"]


def backbone_weights(wildcards):
    """The frozen backbone of the run's benchmark: pretrained by the pipeline or a user's local file."""
    name = backbone_name(wildcards.benchmark)
    if weights_path(config, name) == "pretrain":
        return f"results/backbones/{name}.safetensors"
    return weights_input(name)


def backbone_info(wildcards):
    return f"results/backbones/{backbone_name(wildcards.benchmark)}.json"


def previous_task(wildcards):
    """Everything task t needs from task t-1: its trainable state and cumulative hypercube."""
    t = int(wildcards.task)
    if t == 0 or not METHODS[parse_method_name(wildcards.method).base].loads_previous_state:
        return {}
    w = wildcards
    prev = f"{run_dir(w.benchmark, w.method, w.seed)}/task{t - 1}"
    return {"state": f"{prev}/state.safetensors", "hypercube": f"{prev}/hypercube.safetensors"}


def run_tasks(wildcards, name):
    """``name`` in every task folder of the run."""
    w = wildcards
    return [f"{run_dir(w.benchmark, w.method, w.seed)}/task{t}/{name}" for t in range(num_tasks(w.benchmark))]


TASK_FILES = ["state.safetensors", "hypercube.safetensors", "train.json", "eval.json"]


def run_outputs(benchmark, methods, seeds):
    """Every artifact of the runs. Task files are listed too (not only R.csv), so that a deleted task
    folder is redone - Snakemake would otherwise treat it as a disposable intermediate."""
    runs = expand(RUN_DIR, benchmark=benchmark, method=methods, seed=seeds)
    tasks = range(num_tasks(benchmark))
    return [f"{r}/{f}" for r in runs for f in ("R.csv", "metrics.json")] + [
        f"{r}/task{t}/{f}" for r in runs for t in tasks for f in TASK_FILES
    ]


def all_targets():
    r = config["run"]
    targets = []
    for b in r["benchmarks"]:
        targets += run_outputs(b, r["methods"], r["seeds"])
        targets += [f.format(benchmark=b) for f in DEFAULT_RUN_REPORT.values()] + [f"results/figures/{b}/domains.png"]
    return targets


def metrics_files(benchmark, methods, seeds):
    return expand(f"{RUN_DIR}/metrics.json", benchmark=benchmark, method=methods, seed=seeds)


def study_outputs(study, benchmark):
    """The report files of one study (see workflow/rules/studies.smk)."""
    return [f.format(benchmark=benchmark) for f in report_files(study, STUDIES[study].spec).values()]


def study_targets(study):
    """Everything a study produces, for every benchmark of `run.benchmarks` (task files included)."""
    s = STUDIES[study]
    targets = []
    for b in config["run"]["benchmarks"]:
        targets += run_outputs(b, s.methods, s.seeds) + study_outputs(study, b)
        if TRACKING.enabled:
            targets += tracking_markers(b, s.methods, s.seeds)
    return targets

def stored_reports(wildcards=None):
    """Every table and figure whose runs' metrics are present: what `snakemake reports` rebuilds from a
    results/ tree copied off a cluster (no checkpoints, no task states, nothing to retrain)."""
    targets = []
    for b in config["run"]["benchmarks"]:
        if all(os.path.exists(f) for f in metrics_files(b, config["run"]["methods"], config["run"]["seeds"])):
            targets += [f.format(benchmark=b) for f in DEFAULT_RUN_REPORT.values()]
        for name, s in STUDIES.items():
            if all(os.path.exists(f) for f in metrics_files(b, s.methods, s.seeds)):
                targets += study_outputs(name, b)
    return targets


def query_cache_input(wildcards):
    """The benchmark's stored query cache, for runs that read it (a backbone and optim.feature_cache)."""
    run = run_config(wildcards)
    if not METHODS[run["base"]].uses_backbone or not run["optim"].get("feature_cache", True):
        return {}
    return {"query": f"results/cache/{wildcards.benchmark}/{backbone_name(wildcards.benchmark)}/query.json"}


def query_cache_optim(wildcards):
    """The optim settings the cache depends on: the benchmark's (amp decides the precision)."""
    optim = {**config["optim"], **config["benchmarks"][wildcards.benchmark].get("overrides", {}).get("optim", {})}
    return {"batch_size": optim["eval_batch_size"], "amp": optim["amp"]}
