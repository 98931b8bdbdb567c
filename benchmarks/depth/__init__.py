"""Monocular depth with a linear head on frozen patch features (DINOv3's ``eval/depth`` recipe
for NYU Depth v2; DINOv2's linear4 variant as a preset): protocol ``depth_linear``."""
