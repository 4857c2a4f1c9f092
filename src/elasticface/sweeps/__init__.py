"""What a sweep does beyond launching its jobs: successive halving's rounds (halving.py)."""
