"""ssl-bench: an evaluation-first benchmark harness for self-supervised ViTs."""

__version__ = "0.1.0"
