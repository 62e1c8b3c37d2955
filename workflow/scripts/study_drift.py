"""Snakemake adapter: the MLP drift experiment (appendix "Evolution of Internal Drift")."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

import torch

from intact.experiments.drift_report import study_drift
from intact.runtime.joblog import job

with job(snakemake) as params:
    torch.set_num_threads(snakemake.threads)
    o = snakemake.output
    summary = study_drift(params.experiments["drift"], o.figure, o.csv, o.md, o.R, o.summary)
    print({m: summary[m]["final_drift"] for m in ("finetune", "lwf", "intact")})
