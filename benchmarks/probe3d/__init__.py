"""Probe3D's dense probes (El Banani et al., CVPR 2024; github.com/mbanani/probe3d): surface
normals and binned depth from four frozen blocks through a DPT-style head."""
