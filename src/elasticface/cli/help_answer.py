"""`python train.py --help` answered here rather than by Hydra: the same template (configs/train.yaml, eval.yaml:
`hydra.help.template`, its resolvers in cli/help.py) rendered from the composed config. Hydra's own `--help` first
lists every group of the config tree for template variables these templates do not use: 5 of the 6 s it took.
"""

from __future__ import annotations

import string
import sys
from collections.abc import Sequence

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from elasticface.cli.compose import compose_config
from elasticface.utils.errors import BadValue


def _first_values(overrides: list[str]) -> list[str]:
    """The overrides with each sweep's first value (`-m --help head=arcface,cosface`: the help for arcface)."""
    return [f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}" if o.is_sweep_override() else o.input_line
            for o in OverridesParser.create().parse_overrides(overrides)]


#: the flags of a `--help` command line that `answer_help` answers; with any other, Hydra answers it
OWN_HELP_FLAGS = ("--help", "-h", "--resolve", "-m", "--multirun")


def answer_help(config_name: str, argv: Sequence[str] | None = None) -> None:
    """`--help [overrides]`: print the app's help as Hydra would (the help template of the config the overrides
    compose) and exit 0; any other command line returns. Hydra's `--help` first lists every group of the config
    tree for its own template variables ($APP_CONFIG_GROUPS, ...), which these templates do not use: 5 of the 6 s
    the help took. A template that uses them, or a command line with another flag (`--config-dir`, `--hydra-help`),
    is left to Hydra. An override that does not compose is a user's mistake (BadValue)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if ("--help" not in argv and "-h" not in argv) or any(a.startswith("-") and a not in OWN_HELP_FLAGS for a in argv):
        return
    try:
        cfg = compose_config(config_name, _first_values([a for a in argv if not a.startswith("-")]),
                             return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        template = string.Template(cfg.hydra.help.template)
    except (HydraException, OmegaConfBaseException) as err:
        raise BadValue(f"the command line does not compose: {str(err).splitlines()[0]}") from None
    if not set(template.get_identifiers()) <= {"CONFIG"}:
        return
    if "CONFIG" in template.get_identifiers():  # eval.yaml's own, Hydra's `$CONFIG`: the config without hydra
        job = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
        print(template.substitute(CONFIG=OmegaConf.to_yaml(job, resolve="--resolve" in argv)))
    else:
        print(template.substitute())
    raise SystemExit(0)
