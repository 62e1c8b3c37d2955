"""Snakemake adapter: one search's choice from its validation-split metrics (checkpoint tune_select)."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from intact.io import write_record
from intact.runtime.joblog import job
from intact.tune import choose

with job(snakemake) as params:
    choice = choose(params.study, snakemake.wildcards.benchmark, snakemake.wildcards.tuned,
                    list(snakemake.input.metrics), params.config_hashes)
    choice = write_record(snakemake.output.choice, choice)  # sealed: read_choice refuses an edited one
    print(f"{snakemake.wildcards.tuned} on {snakemake.wildcards.benchmark}: chose {choice['chosen']['final_name']} "
          f"(validation AA {choice['chosen']['val_aa_mean']:.2f} over seeds {choice['selection_seeds']})")
