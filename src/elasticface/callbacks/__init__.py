"""Lightning callbacks, one concern each."""
