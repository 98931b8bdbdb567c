"""Surface normals from frozen features: Probe3D's DPT probe (El Banani et al., CVPR 2024;
github.com/mbanani/probe3d), protocol ``normals_dpt``."""
