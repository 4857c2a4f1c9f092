"""launcher=slurm's launcher, made known to Hydra in every install.

Hydra instantiates a launcher only from the classes its scan of the `hydra_plugins` namespace found. A wheel
puts ours there (src/hydra_plugins/elasticface_slurm); an editable install (`pip install -e .`, the Makefile's)
serves it through an import hook that the scan cannot list, so it is added by name here.
"""

from __future__ import annotations


def register_slurm_launcher() -> None:
    from hydra.core.plugins import Plugins
    from hydra.plugins.launcher import Launcher

    from hydra_plugins.elasticface_slurm.slurm_launcher import SlurmLauncher

    if isinstance(SlurmLauncher, type) and issubclass(SlurmLauncher, Launcher):  # not without the `cluster` extra
        Plugins.instance().class_name_to_class.setdefault(f"{SlurmLauncher.__module__}.SlurmLauncher", SlurmLauncher)
