# InTAct experiment pipeline. Default target: `snakemake --cores 2` (or `make run`).
# Rules are thin; all logic lives in the `intact` package (src/intact).

import os
import sys

from snakemake.utils import min_version

min_version("8.0")

# The `intact` package is imported from this checkout's src/, here and in every job (runtime.smk gives
# the jobs the same path), so the code that runs is the code you see. The copy a wheel ships inside the package
# (intact/workflow: setup.py) imports the installed package, two folders up.
_SRC = os.path.join(workflow.basedir, "src")
if not os.path.isdir(_SRC):
    _SRC = os.path.dirname(os.path.dirname(workflow.basedir))
sys.path.insert(0, _SRC)

from intact.layering import LayerError, workflow_config

# the config, layered once (docs/configuration.md, "Config files"): config.yaml, each --configfile with its
# `extends:` resolved, then --config, each file read by the package's one YAML loader, bounded (its size, what its
# YAML aliases expand to: Snakemake's merge walks every mapping an alias repeats) and with no key twice in one
# mapping, before Snakemake reads config.yaml. A --configfile has been read on the command line already, by
# Snakemake's own loader (which knows no `extends:`, keeps the last of two equal keys, and expands a mapping alias
# bomb before this line runs): Snakemake's merge is replaced by this one below, and checked at validation
# (common.smk), before any job.
try:
    LAYERED_CONFIG = workflow_config(["config.yaml", *workflow.config_settings.configfiles],
                                     workflow.config_settings.config)
except LayerError as err:
    raise WorkflowError(str(err)) from None


configfile: "config.yaml"


config.clear()
config.update(LAYERED_CONFIG)


include: "workflow/rules/common.smk"
include: "workflow/rules/runtime.smk"  # how jobs start: their PYTHONPATH, the warm parent (onstart/onsuccess/onerror)
include: "workflow/rules/scheduler.smk"  # one re-scheduling timer at a time, not a chain per finished job
include: "workflow/rules/data.smk"
include: "workflow/rules/images.smk"
include: "workflow/rules/rehearsal.smk"
include: "workflow/rules/backbone.smk"
include: "workflow/rules/cache.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/studies.smk"
include: "workflow/rules/tune.smk"
include: "workflow/rules/tracking.smk"
include: "workflow/rules/paper.smk"
include: "workflow/rules/experiments.smk"


rule all:
    default_target: True
    input:
        PLAN.all_targets(),
