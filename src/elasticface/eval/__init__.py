"""Tools built on a trained model: eval.py's run, IJB-B/C, embedding extraction and export (the
verification protocol they report lives in `elasticface.metrics`)."""
