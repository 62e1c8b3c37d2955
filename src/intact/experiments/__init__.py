"""The paper's non-prompt experiments, built on the same InTAct component: the 1-D toy (Fig. 2) and the
MLP drift experiment (appendix "Evolution of Internal Drift"). Settings: ``experiments:`` in config.yaml."""
