"""Snakemake adapter: the main table (CSV + Markdown) and the AA-evolution plot of a benchmark."""
from intact.joblog import log_to
from intact.report.plots import aa_evolution_plot
from intact.report.tables import summarize_runs, write_table
from intact.results import load_metrics

NOTE = ("AA: mean accuracy over all tasks after the last task. Forgetting (max-final): mean over tasks of "
        "the best accuracy after learning the task minus the final one. Forgetting (one-step): CODA-Prompt's "
        "mean drop per new task. Certificate: worst-case |logit drift| of the head over the previous hypercube "
        "after the last task. Mean ± std over seeds.")

with log_to(snakemake.log[0], snakemake.rule):
    runs = load_metrics(snakemake.input.metrics)
    summary = summarize_runs(runs, snakemake.params.methods)
    title = f"{snakemake.wildcards.benchmark}: {runs['eval_split'].iloc[0]} split"
    write_table(summary, snakemake.output.csv, snakemake.output.md, title=title, note=NOTE)
    aa_evolution_plot(runs, snakemake.output.plot, snakemake.params.methods, title=f"AA evolution - {snakemake.wildcards.benchmark}")
