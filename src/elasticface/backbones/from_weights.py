"""The one road from a weights file to a backbone: read the file, tell its architecture, build it, load it.

Training (`weights=`), eval.py, elasticface-embed and elasticface-export all take it, so a file that one of them
opens opens the same way in the others. The file is read once (a caller that read it to resolve its config passes
the tensors on), and the backbone is built once: training hands the result to the module instead of building a
second one to copy into.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

from hydra.utils import instantiate
from torch import Tensor, nn

from elasticface.backbones.build import build_backbone
from elasticface.backbones.weights import LoadReport, infer_backbone, layout_of, load_backbone_weights, read_state_dict

log = logging.getLogger(__name__)


def backbone_from_weights(path: str, backbone: str | Mapping[str, Any] | None = None,
                          embedding_size: int | None = None, strict: bool = True,
                          state: tuple[dict[str, Tensor], str] | None = None,
                          say: Callable[[str], None] | None = None) -> tuple[nn.Module, LoadReport]:
    """The backbone `path` holds, built and loaded (strictly unless `strict=False`), and what was loaded.

    backbone: the architecture, a name or a backbone config (`model.backbone`, with its `_target_`); None reads it
    off the file's tensors and says which it chose (`say`, else the log). embedding_size: None takes the file's.
    state: what read_state_dict returned for `path`, when the caller has read it already.
    """
    state = state if state is not None else read_state_dict(path)
    layout = layout_of(state[0])
    spec: dict[str, Any] = dict(backbone) if isinstance(backbone, Mapping) else ({"name": backbone} if backbone else {})
    if not spec.get("name") and "_target_" not in spec:
        spec["name"] = infer_backbone(state[0], path)
        (say or log.info)(f"{path}: architecture inferred from its tensors: {spec['name']} ({layout}); "
                          "name it with backbone=<option> to skip the guess")
    spec["embedding_size"] = embedding_size or layout.embedding_size or spec.get("embedding_size") or 512
    model = instantiate(spec) if "_target_" in spec else build_backbone(**spec)
    report = load_backbone_weights(model, path, strict=strict, state=state)
    return model, report
