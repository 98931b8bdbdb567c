"""Built-in pretraining methods; importing a module registers it (``@register_method``)."""
from pathlib import Path as _Path

from methods import dino  # noqa: F401

for _name in ("ibot", "synclr", "cribo"):  # modules written by other hands may not exist yet
    if (_Path(__file__).parent / f"{_name}.py").is_file():
        __import__(f"methods.{_name}")
