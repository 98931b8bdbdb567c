"""Nearest-neighbour retrieval on frozen features (iBOT Table 16, following DINO): image
retrieval on revisited Oxford and Paris (``image_retrieval``) and copy detection on Copydays
(``copy_detection``)."""
