"""Detection: Cascade Mask R-CNN on COCO through mmdet 3.3.0 (iBOT Table 6), on any model read as a
multi-level backbone. declaration.py (what it reports), protocol.py (how), config.py, mmdet_*.py,
synthetic.py, presets/, parity/, README.md (its page) and tests/; the COCO reader is
harness.data.coco_instances. Keep this file free of imports: the registry reads declaration.py
without importing torch."""
