"""The pretraining engine and its loggers."""
