"""Built-in pretraining methods; importing a module registers it (``@register_method``)."""
from methods import cribo, dino, ibot, synclr  # noqa: F401
