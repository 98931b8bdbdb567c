"""Evaluation protocols, grouped by family; harness.registry imports the modules that
register the built-in ones (the mmseg-based ones import mmsegmentation only when they run)."""
