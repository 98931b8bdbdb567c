"""Zero-shot keypoint correspondence on SPair-71k: frozen patch features matched by nearest
neighbour, PCK@0.1 of the target box, as Probe3D (mbanani/probe3d) evaluates it: protocol
``correspondence``."""
