"""How the workflow's processes start and log, not what they compute: warm local execution and job logging.

- :mod:`intact.runtime.warm`: a job's client side (``hand_off``, the first call of every workflow script) and
  the workflow's side (start, adopt and stop a warm parent; ``intact warm``);
- :mod:`intact.runtime.warm_server`: the warm parent, which forks a fresh child per job;
- :mod:`intact.runtime.protocol`: the messages between a job's client, the parent and the job's child;
- :mod:`intact.runtime.warm_snakemake`: ``python -m snakemake`` started from a warm parent (the test kit's);
- :mod:`intact.runtime.joblog`: a job's stdout/stderr to its Snakemake log file.

Only the workflow (Snakefile, ``workflow/rules/runtime.smk``, ``workflow/scripts``), ``intact.cli`` and
``intact.testing`` import this package; no science module does (docs/design.md, section 8). A warm job's
outputs are a cold job's, bit for bit (tests/test_warm_workflow.py).
"""
