"""Video object segmentation by label propagation on DAVIS-2017 (DINO / iBOT Table 16)."""
