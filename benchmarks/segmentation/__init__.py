"""Segmentation protocols run through mmsegmentation: a linear head and Segmenter."""
