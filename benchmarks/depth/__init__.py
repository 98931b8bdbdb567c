"""Monocular depth from frozen features: a linear head (DINOv3's ``eval/depth`` recipe for NYU Depth
v2; DINOv2's linear4 variant as a preset), protocol ``depth_linear``; and Probe3D's DPT probe of
binned depth, protocol ``depth_dpt``."""
