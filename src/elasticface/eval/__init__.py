"""Tools built on a trained model: eval.py's run, IJB-B/C and embedding extraction (the verification
protocol they report lives in `elasticface.metrics`; writing a model for other tools is `elasticface.export`)."""
