"""What `weights=<file>` does to a training run: a fine-tune of a released (or exported) backbone.

- `architecture`: the backbone and embedding size the file holds, taken for the run unless `backbone=` names one;
- `imprint`: class centres started at the loaded backbone's class means (weight imprinting);
- `l2sp`: a pull of the backbone toward the loaded weights (L2-SP) in place of weight decay toward zero;
- the head-only phase and the backbone's lr scale and frozen BatchNorm live in the module's step and optimizer.

Which of them a fine-tune uses by default is in configs/model/default.yaml (`${if_weights:...}`), chosen by the
measurements of docs/finetune.md.
"""
