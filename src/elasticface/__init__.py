"""ElasticFace research template: margin-based face recognition with Lightning, Hydra and timm."""

__version__ = "0.1.0"
