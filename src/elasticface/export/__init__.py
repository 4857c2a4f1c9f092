"""Writers of a trained model for use outside this package: ONNX, TorchScript, and the backbone's plain
state_dict in insightface's layout. Every writer checks what it wrote against the PyTorch model.

The command is `elasticface-export` (`src/elasticface/cli/export.py`).
"""

from elasticface.export.check import ExportMismatchError
from elasticface.export.embedding_model import embedding_only, load_backbone_for_export, load_for_export
from elasticface.export.onnx import export_onnx
from elasticface.export.pth import export_pth
from elasticface.export.torchscript import export_torchscript

__all__ = ["ExportMismatchError", "embedding_only", "export_onnx", "export_pth", "export_torchscript",
           "load_backbone_for_export", "load_for_export"]
