"""Evaluation protocols. Importing this package registers the built-in protocols;
the mmseg-based ones import mmsegmentation only when they run."""
from benchmarks import dense_nn, knn, linear_probe, seg_linear, segmenter  # noqa: F401
