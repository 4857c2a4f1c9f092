"""hydra/sweeper=optuna (hparams_search=elastic_optuna): Optuna searches whose jobs a pruner can stop."""
