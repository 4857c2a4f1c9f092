"""The project's Hydra plugins, made known to Hydra in every install: launcher=slurm's launcher, every
multirun's sweeper (successive halving) and the Optuna searches' sweeper (with pruning).

Hydra instantiates a plugin only from the classes its scan of the `hydra_plugins` namespace found. A wheel puts
ours there (src/hydra_plugins/elasticface_*); an editable install (`pip install -e .`, the Makefile's) serves them
through an import hook that the scan cannot list, so they are added by name here.
"""

from __future__ import annotations


def register_plugins() -> None:
    from hydra.core.plugins import Plugins
    from hydra.plugins.launcher import Launcher

    from hydra_plugins.elasticface_halving.halving_sweeper import HalvingSweeper, register
    from hydra_plugins.elasticface_optuna import optuna_sweeper
    from hydra_plugins.elasticface_slurm.slurm_launcher import SlurmLauncher

    known = Plugins.instance().class_name_to_class
    if isinstance(SlurmLauncher, type) and issubclass(SlurmLauncher, Launcher):  # not without the `cluster` extra
        known.setdefault(f"{SlurmLauncher.__module__}.SlurmLauncher", SlurmLauncher)
    known.setdefault(f"{HalvingSweeper.__module__}.HalvingSweeper", HalvingSweeper)
    register()  # hydra/sweeper=halving in the config store
    known.setdefault(f"{optuna_sweeper.__name__}.OptunaSweeper", optuna_sweeper.OptunaSweeper)
    optuna_sweeper.register()  # hydra/sweeper=optuna and hydra/sweeper/pruner=...
