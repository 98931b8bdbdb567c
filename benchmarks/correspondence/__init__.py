"""Zero-shot correspondence of frozen patch features, as Probe3D (mbanani/probe3d) evaluates it:
SPair-71k keypoints matched by nearest neighbour, PCK@0.1 of the target box (protocol
``correspondence``), and NAVI multiview points matched with the ratio test, recall within 1/2/5 cm
and 5/25/50 px and by relative rotation (protocol ``correspondence_navi``)."""
