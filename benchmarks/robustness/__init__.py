"""Robustness of a linear ImageNet classifier on shifted validation sets (iBOT Table 8; bytedance/ibot
``analysis/``): protocol ``robustness``."""
