"""The class layer: class centres (full, sampled, sharded), the margin head, the cross-entropy (dense or
over class chunks, local or reduced across ranks), the step's statistics and the checkpoint gather/slice.

The LightningModule calls ``out = classifier(embeddings, labels)`` and logs what ``out`` carries.
"""

from elasticface.classifier.centers import FullFC, PartialFC
from elasticface.classifier.chunked import DEFAULT_CHUNK_SIZE, nontarget_lse
from elasticface.classifier.classifier import Classifier, ClassifierOutput
from elasticface.classifier.sharded import ShardedFC

__all__ = ["Classifier", "ClassifierOutput", "DEFAULT_CHUNK_SIZE", "FullFC", "PartialFC", "ShardedFC", "nontarget_lse"]
