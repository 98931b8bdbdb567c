"""Unsupervised object discovery: LOST's box from a ViT's last-block keys, scored by CorLoc."""
