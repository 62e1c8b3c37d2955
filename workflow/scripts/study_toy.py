"""Snakemake adapter: the toy experiment (Fig. 2)."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

import torch

from intact.experiments.toy import study_toy
from intact.runtime.joblog import job

with job(snakemake) as params:
    torch.set_num_threads(snakemake.threads)
    o = snakemake.output
    print(study_toy(params.experiments["toy"], o.figure, o.csv, o.md, o.summary))
