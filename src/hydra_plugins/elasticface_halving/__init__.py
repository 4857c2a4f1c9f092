"""Every multirun's sweeper: Hydra's basic one, with successive halving when `halving.eta` is set."""
