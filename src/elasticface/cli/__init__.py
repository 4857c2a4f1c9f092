"""Every command's entry point, one file per command, each a few lines over a library function.

Two argument styles, each for what its commands do:

- the jobs, `elasticface-train` (train.py) and `elasticface-eval` (eval.py), are Hydra apps: they compose a
  run from the config tree (groups, overrides, sweeps with -m, a run directory with its logs);
- the file tools, `elasticface-embed`, `-export`, `-convert`, `-report`, `-align`, `-compare`, `-toy-2d`,
  `-lfw-split` and `-cfp-split`, are argparse commands: files in, files out, no config tree, no run directory,
  `--help` without importing torch. Embed and export also take the jobs' `key=value` style (`weights=last.ckpt`;
  `arguments.key_value_args`), so the model file is given the same way everywhere.

The config tree lives at the top level of the repository (`configs/`) and is shipped inside the wheel as
`elasticface/configs/`; `elasticface.utils.config.config_dir` finds whichever this copy of the package has, so
the commands work from any working directory, installed or not.
"""
