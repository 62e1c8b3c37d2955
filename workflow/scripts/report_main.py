"""Snakemake adapter: the default run's table (CSV + Markdown) and AA-evolution plot of a benchmark."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from intact.runtime.joblog import log_to
from intact.report.plots import aa_evolution_plot
from intact.report.tables import summarize_runs, to_markdown, write_table
from intact.results import load_metrics

with log_to(snakemake.log[0], snakemake.rule):
    runs = load_metrics(snakemake.input.metrics)
    summary = summarize_runs(runs, snakemake.params.methods)
    title = f"{snakemake.wildcards.benchmark} ({runs['eval_split'].iloc[0]} split)"
    write_table(summary, to_markdown(summary, title=title), snakemake.output.csv, snakemake.output.md)
    aa_evolution_plot(runs, snakemake.output.plot, snakemake.params.methods, title=f"AA evolution - {snakemake.wildcards.benchmark}")
