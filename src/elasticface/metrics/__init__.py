"""Verification metrics on face embeddings: the 10-fold protocol and its torchmetrics Metric used during
training (`verification`), and the ROC / TAR@FAR reading of IJB-B/C tables (`roc`)."""
