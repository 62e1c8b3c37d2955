"""Snakemake adapter: the toy experiment (Fig. 2)."""
import torch

from intact.experiments.toy import study_toy
from intact.joblog import log_to

with log_to(snakemake.log[0], snakemake.rule):
    torch.set_num_threads(snakemake.threads)
    o = snakemake.output
    print(study_toy({"experiments": snakemake.params.experiments}, o.figure, o.csv, o.md, o.summary))
