"""Reading YAML files: libyaml's parser when PyYAML was built with it (several times faster than
the pure-Python one, which a run's dozens of config, preset and table files notice), with the same
safe constructor, so both give the same objects (tests/test_yaml_io.py holds them equal on every
shipped YAML file)."""
from __future__ import annotations

from typing import Any

import yaml

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> Any:
    """``yaml.safe_load(text)``, parsed by libyaml when available; errors are yaml.YAMLError."""
    return yaml.load(text, Loader=SAFE_LOADER)
