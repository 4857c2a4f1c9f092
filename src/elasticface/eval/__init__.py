"""Evaluation: the verification protocol, IJB-B/C, embedding extraction and export."""
