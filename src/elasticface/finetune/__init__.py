"""What `weights=<file>` does to a training run: a fine-tune of a released (or exported) backbone, in one room.

- `config`: the recipe weights= selects (configs/finetune/recipe.yaml) and `resolve`, every check and rewrite of
  the config a fine-tune makes (each part's value, the architecture the file holds: `architecture`), once;
- `phases`: `FineTuning`, the callback that changes training: imprinted centres (`imprint`), the head-only phase
  (`head_only`), frozen BatchNorm, the backbone's lr scale, L2-SP (`l2sp`), WiSE-FT's mix after the last step
  (`wise`).

The file becomes a backbone by the one road every command takes (backbones/from_weights.py); the loaded weights'
accuracy before the first step is a baseline like raw pixels (callbacks/baselines.py). Which parts a fine-tune uses
by default is configs/finetune/recipe.yaml, chosen by the measurements of docs/finetune.md.
"""
