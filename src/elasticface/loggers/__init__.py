"""Lightning loggers set up as dashboards: run names and sweep groups, W&B summaries and tables,
TensorBoard's HPARAMS tab."""
