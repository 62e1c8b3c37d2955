# Helpers shared by the rules: config validation at start-up, run resolution, path builders.
# Which files a target consists of is intact.plan's business (PLAN below); rules only name its lists.
import os
import re
import sys
from argparse import Namespace

from intact.config import (
    ConfigError, backbone_config, benchmark_config, benchmark_optim, missing_data, missing_weights, prepared_by,
    resolver, tracking_config, validate_config, weights_path,
)
from intact.data.image_config import prepare_settings
from intact.io import sha256_file_cached
from intact.methods import METHODS
from intact.migrate import unmigrated
from intact.naming import NAME_PATTERN, parse_method_name
from intact.settings import recorded
from intact.settings.experiments import experiments_params, missing_experiment_inputs
from intact.paths import QUERY_CACHE, RUN_DIR, RUN_KEY, run_dir, run_of, task_dir
from intact.plan import DEFAULT_RUN_REPORT, DOMAINS_FIGURE, Plan, merge_runs, report_files
from intact.protocols import reads_prepared_images
from intact.rehearsal import TREE as REHEARSAL_TREE, WEIGHTS as REHEARSAL_WEIGHTS, made_backbones, synthetic_benchmarks, tree_params
from intact.rehearsal import settings as rehearsal_settings
from intact.report.settings import default_points, report_settings
from intact.tune import read_choice
from intact.sources import source_files

try:
    # a job's own process (a cluster job, Snakemake's --mode remote/subprocess) parses this file again: its
    # workflow checked the same config before submitting it, and checking every run against its backbone
    # builds each external ViT (on the meta device, importing torch and timm: ~3 s a job on a paper config)
    VALIDATED_RUNS = validate_config(config, check_files=False, check_runs=workflow.is_main_process)
    TRACKING = tracking_config(config)
    # weights and raw data: a dry run lists the grid before they are in place and says what is missing (or a
    # weights file that does not fit its model, read from its header), and for which targets; a real run stops
    # before its first job if a job it runs needs one of them (refuse_missing_inputs, called in onstart:
    # runtime.smk). A prepared benchmark no longer needs its images.
    MISSING_WEIGHTS = missing_weights(config, check_fit=workflow.is_main_process)
    # (a job's own process checks neither: it imports no benchmark type the job does not use, issue 43)
    MISSING_DATA = missing_data(config, prepared=lambda b: os.path.exists(f"results/data/{b}/manifest.json")) \
        if workflow.is_main_process else {}
    # an experiment's own files (experiments.drift.mnist_path), which its rule study_<name> reads
    MISSING_EXPERIMENT_INPUTS = missing_experiment_inputs(config) if workflow.is_main_process else {}
except ConfigError as err:
    raise WorkflowError(str(err)) from None
#: a results tree 0.1 wrote, not migrated: a dry run says so, a real run stops before its first job (onstart)
UNMIGRATED = unmigrated(".") if workflow.is_main_process else None
if UNMIGRATED:
    UNMIGRATED = (f"{UNMIGRATED}: run `intact migrate results` first (`--dry-run` lists what it changes; "
                  "CHANGELOG.md, 0.2.0), or move results/ away")
    print(f"intact: NOT MIGRATED (a real run stops before its first job): {UNMIGRATED}", file=sys.stderr)


PLAN = Plan(config)
STUDIES = PLAN.studies


def needed_by(users):
    """'needed by: <targets> (e.g. run <run>); not by: <targets>', from target -> the runs that need a file."""
    needed = [t for t, runs in users.items() if runs]
    example = next((runs[0] for runs in users.values() if runs), None)
    text = f"needed by: {', '.join(needed) or 'no target'}" + (f" (e.g. run {example})" if example else "")
    return text + f"; not by: {', '.join(t for t in users if t not in needed) or 'none'}"


if MISSING_WEIGHTS:
    _BY_TARGET = {t: PLAN.backbones(runs) for t, runs in PLAN.target_runs().items()}
    for _name, _message in MISSING_WEIGHTS.items():
        _users = {t: backbones.get(_name, []) for t, backbones in _BY_TARGET.items()}
        print(f"intact: MISSING (a real run whose jobs train on it stops before the first): {_message} - "
              f"{needed_by(_users)}", file=sys.stderr)
for _bench, _messages in MISSING_DATA.items():
    for _message in _messages:
        print(f"intact: MISSING (a real run that prepares benchmark {_bench!r} stops before the first job): "
              f"{_message}", file=sys.stderr)
for _name, _messages in MISSING_EXPERIMENT_INPUTS.items():
    for _message in _messages:
        print(f"intact: MISSING (a real run of study_{_name} stops before its first job): {_message}", file=sys.stderr)

#: set once the run has started for real (onstart): jobs added after the start (a checkpoint's) see a missing
#: weights file as a missing input, which Snakemake refuses naming it
STARTED = []


def weights_input(name):
    """The weights file of backbone ``name`` as a job input; none while it is missing before the start, so
    that a dry run lists the grid (the lines above name the file; refuse_missing_inputs stops a real run)."""
    path = weights_path(config, name)
    return [] if name in MISSING_WEIGHTS and not STARTED else path


def weights_sha256(name):
    """The sha256 of backbone ``name``'s weights file (cached by its path, size and mtime), None while it is
    missing: a params entry of describe_backbone, so that a file replaced by another with an older mtime (`tar x`,
    `cp -p`, `rsync -t`), which the mtime trigger misses, is described again and reruns what trained on it."""
    path = weights_path(config, name)
    return sha256_file_cached(path) if os.path.isfile(path) else None


#: the rules whose jobs read a backbone's weights file (their input functions: weights_input)
READS_WEIGHTS = ("train_task", "query_cache", "describe_backbone")


def job_backbone(job):
    """The backbone whose weights file a job reads (its ``backbone`` wildcard, else its run's), or None."""
    if job.rule.name not in READS_WEIGHTS:
        return None
    return job.wildcards.backbone if "backbone" in job.wildcards.keys() else typed_run(job.wildcards).backbone.name


def refuse_missing_inputs(dag):
    """Called when a run starts for real (onstart): stop it, naming them, if a job it will run needs a weights
    file, a data root or an experiment's file that is not there, or a weights file that does not fit its model
    (only those: a target that trains nothing on a missing backbone runs),
    or if results/ is a tree 0.1 wrote, not migrated (UNMIGRATED)."""
    problems = {}
    for job in dag.needrun_jobs():
        name = job_backbone(job)
        if name in MISSING_WEIGHTS:
            problems.setdefault(MISSING_WEIGHTS[name], f"{job.rule.name} {dict(job.wildcards.items())}")
        if job.rule.name in ("prepare_data", "prepare_images"):
            for message in MISSING_DATA.get(job.wildcards.benchmark, []):
                problems.setdefault(message, f"{job.rule.name} of {job.wildcards.benchmark!r}")
        for message in MISSING_EXPERIMENT_INPUTS.get(job.rule.name.removeprefix("study_"), []):
            problems.setdefault(message, job.rule.name)
    if problems:
        raise WorkflowError("config: " + "; ".join(f"{m} (needed by job {j}, and maybe more)" for m, j in problems.items()))
    if UNMIGRATED:
        raise WorkflowError(UNMIGRATED)
    STARTED.append(True)


def script_code(script):
    """The package files that workflow/scripts/<script> runs, as inputs of an aggregation rule: when that
    code changes, its tables and figures are rebuilt (mtime) without retraining anything (training rules
    list no code). Derived from the script's imports (intact.sources), so the list cannot go stale; an
    input function, so that a job that does not need it (a cluster task job) never computes it."""
    return lambda wildcards: source_files(os.path.join(workflow.basedir, "workflow", "scripts", script))


def one_of(names):
    """A regex matching exactly these names (nothing if empty): restricts a rule to some config entries."""
    return "|".join(map(re.escape, names)) or "(?!)"


# a rehearsal's synthetic benchmarks and tiny backbones (intact.rehearsal: their rules in rehearsal.smk)
REHEARSAL_BENCHMARKS, REHEARSAL_BACKBONES = synthetic_benchmarks(config), made_backbones(config)


def synthetic_tree(wildcards):
    """A rehearsal's synthetic tree of the benchmark, an input of preparing it ([] for real data)."""
    return REHEARSAL_TREE.format(benchmark=wildcards.benchmark) if wildcards.benchmark in REHEARSAL_BENCHMARKS else []


PRETRAINED_BACKBONES = [n for n in config["backbones"] if weights_path(config, n) == "pretrain"]
EXTERNAL_BACKBONES = [n for n in config["backbones"] if n not in PRETRAINED_BACKBONES]
# the declaration of its type says which of prepare_images / prepare_data builds a benchmark (parallel_prepare); a
# job's own process runs the one rule its --allowed-rules names, so it reads no declaration (intact.config.prepared_by)
PARALLEL_BENCHMARKS, SERIAL_BENCHMARKS = prepared_by(config, load=workflow.is_main_process)


wildcard_constraints:
    benchmark=r"[A-Za-z0-9_\-]+",
    backbone=r"[A-Za-z0-9_\-]+",
    method=NAME_PATTERN,
    seed=r"\d+",
    task=r"\d+",


_RUN_CONFIGS = {}
#: (benchmark, method, seed) -> the run's settings: the run validation resolved, at that seed, else resolved here
RESOLVE = resolver(config, VALIDATED_RUNS)


def _resolved(wildcards):
    """(typed run, plain settings, config hash) of the job's run, once per run (not per task job: a paper grid has
    thousands of jobs), from RESOLVE."""
    key = (wildcards.benchmark, wildcards.method, int(wildcards.seed))
    if key not in _RUN_CONFIGS:
        run = RESOLVE(*key)
        _RUN_CONFIGS[key] = (run, run.to_dict(), run.hash())
    return _RUN_CONFIGS[key]


def typed_run(wildcards):
    """The job's run (intact.settings.RunConfig): what the input functions read."""
    return _resolved(wildcards)[0]


def run_config(wildcards):
    """The resolved run settings (a plain dict): a params entry, so a changed setting reruns the run."""
    return _resolved(wildcards)[1]


def run_hash(wildcards):
    """The run's config hash as the config gives it now: what every record of the run must carry (a record of
    another configuration is refused where it is read: intact.results.read_run)."""
    return _resolved(wildcards)[2]


_REPORT_SETTINGS = []


def report_params(wildcards=None):
    """What the paper's tables and figures read of the config (intact.report.settings.ReportSettings, recorded), from
    the runs validation resolved, built once: a params entry, so that a change which alters them rebuilds them."""
    if not _REPORT_SETTINGS:
        _REPORT_SETTINGS.append(recorded(report_settings(config, RESOLVE)))
    return _REPORT_SETTINGS[0]


def study_defaults(study):
    """Study ``study``'s report's params entry ``defaults``: the sensitivity study's default point on the job's
    benchmark (intact.report.settings.default_points); None for the other studies."""
    def defaults(wildcards):
        if study != "sensitivity":
            return None
        return default_points(RESOLVE, wildcards.benchmark, STUDIES[study].spec)
    return defaults


def manifest(wildcards):
    return f"results/data/{wildcards.benchmark}/manifest.json"


def backbone_name(wildcards):
    """The job's backbone: the query cache's own wildcard, else the run's (its benchmark's, or the one a
    per-method or protocol layer names: intact.protocols)."""
    name = getattr(wildcards, "backbone", None)
    return name if name else typed_run(wildcards).backbone.name


def backbone_weights(wildcards):
    """The frozen backbone of the job: pretrained by the pipeline or a user's local file."""
    name = backbone_name(wildcards)
    if weights_path(config, name) == "pretrain":
        return f"results/backbones/{name}.safetensors"
    return weights_input(name)


def backbone_info(wildcards):
    return f"results/backbones/{backbone_name(wildcards)}.json"


def previous_task(wildcards):
    """Everything task t needs from task t-1: its trainable state and cumulative hypercube."""
    t = int(wildcards.task)
    if t == 0 or not METHODS[parse_method_name(wildcards.method).base].loads_previous_state:
        return {}
    prev = task_dir(wildcards.benchmark, wildcards.method, wildcards.seed, t - 1)
    return {"state": f"{prev}/state.safetensors", "hypercube": f"{prev}/hypercube.safetensors"}


def run_tasks(name):
    """An input function: ``name`` in every task folder of the job's run."""
    return lambda w: PLAN.task_files(w.benchmark, w.method, w.seed, name)


def run_metrics(methods, seeds):
    """An input function: ``metrics.json`` of each (method, seed) run on the job's benchmark."""
    return lambda w: PLAN.metrics_files(w.benchmark, methods, seeds)


def stored_run_hashes(wildcards, input):
    """A params entry: the folder of each run whose ``metrics.json`` is among the job's ``input.metrics`` -> its
    config hash as the config gives it now, which the job checks every stored run against (intact.results.read_run):
    a run of an older config that Snakemake kept (a results tree copied without .snakemake, `--touch`) is refused,
    not shown or chosen as current."""
    folders = [os.path.dirname(p) for p in input.metrics]
    return {f: run_hash(Namespace(**run_of(f))) for f in folders}


def r_csv(metrics):
    """An input function: ``R.csv`` beside each ``metrics.json`` that the input function ``metrics`` lists. What
    reads a run checks both against its task records (intact.results.read_run), so an edited or truncated
    R.csv reruns it, as an edited metrics.json does."""
    return lambda w: [f"{os.path.dirname(p)}/R.csv" for p in metrics(w)]


def when_requested(targets, *args):
    """An input function for a target rule's list of files, ``targets(*args)``: a plain list is made into
    Snakemake's file objects when the Snakefile is parsed, in every process (each ``snakemake`` call, each
    cluster job's own parse), whether or not the rule is requested - about 0.2 s for the studies' thousands
    of files on config.yaml; a function runs only when the rule is in the DAG."""
    return lambda wildcards: targets(*args)


def stored_reports(wildcards=None):
    """Every table and figure whose runs' metrics are present: what `snakemake reports` rebuilds from a
    results/ tree copied off a cluster (no checkpoints, no task states, nothing to retrain)."""
    return PLAN.stored_reports(os.path.exists)


def query_cache_input(wildcards):
    """The benchmark's query cache, for runs that read it (a backbone, optim.feature_cache and the
    images as prepared)."""
    run = typed_run(wildcards)
    if not (METHODS[run.base].uses_backbone and run.optim.feature_cache and reads_prepared_images(run.optim)):
        return {}
    return {"query": QUERY_CACHE.format(benchmark=wildcards.benchmark, backbone=backbone_name(wildcards))}


def query_cache_optim(wildcards):
    """The optim settings the cache depends on: the benchmark's (amp decides the precision)."""
    optim = benchmark_optim(config, wildcards.benchmark)
    return {"batch_size": optim.eval_batch_size, "amp": optim.amp}


TUNE = PLAN.tune


def tune_chosen(benchmark, tuned):
    """The run name a search chose: read from its checkpoint record (Snakemake waits for it)."""
    choice = checkpoints.tune_select.get(benchmark=benchmark, tuned=tuned).output.choice
    return read_choice(choice)["chosen"]["final_name"]


def tune_search_metrics(wildcards):
    """``metrics.json`` of every point of one search, on the validation split, over the selection seeds."""
    return PLAN.metrics_files(wildcards.benchmark, TUNE.search(wildcards.tuned).val_names, TUNE.selection_seeds)


def tune_report_metrics(wildcards):
    """``metrics.json`` of the chosen points and the baselines on the test split (after every choice)."""
    b = wildcards.benchmark
    runs = merge_runs([{b: TUNE.baseline_runs()}, PLAN.tune_final_runs(tune_chosen)])
    return [f"{run_dir(b, m, s)}/metrics.json" for m, seeds in runs.get(b, {}).items() for s in seeds]


def tune_targets(wildcards):
    """Everything target study_tune produces (intact.plan.Plan.tune_targets), after every choice."""
    return PLAN.tune_targets(tune_chosen)
