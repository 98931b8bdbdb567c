"""Built-in pretraining methods; importing a module registers it (``@register_method``)."""
from pathlib import Path as _Path

from methods import dino, ibot, synclr  # noqa: F401

if (_Path(__file__).parent / "cribo.py").is_file():  # written separately; absent in some checkouts
    from methods import cribo  # noqa: F401
