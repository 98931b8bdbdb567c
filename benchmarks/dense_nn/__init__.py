"""Dense nearest-neighbour retrieval: patch-level k-NN segmentation on frozen features."""
