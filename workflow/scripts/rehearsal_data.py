"""Snakemake adapter: a rehearsal's synthetic image tree (intact.rehearsal.make_tree)."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from intact.rehearsal import make_tree
from intact.runtime.joblog import job

with job(snakemake) as params:
    info = make_tree(params.tree, snakemake.output.tree)
    print(f"{info['files']} files for {len(info['tasks'])} tasks of {info['type']}")
