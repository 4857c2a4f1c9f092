"""Every private Lightning name the package uses still exists in the installed version.

utils/lightning_private.py is the one module that touches them; an upgrade that moves one fails here,
naming it, instead of deep inside a resumed run.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
import pytorch_lightning as pl

from elasticface.utils.lightning_private import CHECKED_AGAINST, PRIVATE_NAMES

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "elasticface"


def _instances() -> dict[str, object]:
    """Objects whose private attributes are set in __init__ (so not visible on the class)."""
    from pytorch_lightning.callbacks import ModelCheckpoint

    trainer = pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu", devices=1)
    return {"Trainer": trainer, "_FitLoop": trainer.fit_loop, "_LoggerConnector": trainer._logger_connector,
            "LightningModule": pl.LightningModule(),
            "ModelCheckpoint": ModelCheckpoint(every_n_train_steps=3)}


@pytest.mark.parametrize("module_name, owner, attribute", PRIVATE_NAMES,
                         ids=[f"{o}.{a}" if a else f"{m}.{o}" for m, o, a in PRIVATE_NAMES])
def test_private_lightning_name_still_exists(module_name, owner, attribute):
    where = f"(utils/lightning_private.py was checked against pytorch-lightning {CHECKED_AGAINST}, " \
            f"installed: {pl.__version__}; re-read the new source and update that module)"
    module = importlib.import_module(module_name)
    if attribute is None:
        assert hasattr(module, owner), f"{module_name}.{owner} is gone {where}"
        return
    if owner.startswith("instance:"):
        target = _instances()[owner.split(":", 1)[1]]
    else:
        assert hasattr(module, owner), f"{module_name}.{owner} is gone {where}"
        target = getattr(module, owner)
    assert hasattr(target, attribute), f"{module_name}.{owner}.{attribute} is gone {where}"


def test_no_private_lightning_use_outside_its_module():
    """A private name (leading underscore) imported from Lightning, or a `._name` reached on a trainer,
    loop or logger, anywhere but utils/lightning_private.py."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "lightning_private.py":
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
                    "pytorch_lightning", "lightning_fabric", "lightning"):
                offenders += [f"{path.relative_to(PACKAGE)}:{node.lineno} {a.name}" for a in node.names
                              if a.name.startswith("_")]
            if isinstance(node, ast.Attribute) and node.attr in {a for _, _, a in PRIVATE_NAMES if a}:
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno} .{node.attr}")
    assert not offenders, "private Lightning API used outside utils/lightning_private.py: " + ", ".join(offenders)
