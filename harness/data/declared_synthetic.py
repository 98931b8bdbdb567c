"""SynthScenes data sets that protocols declare for themselves (``synthetic`` in a protocol's
declaration): where each lives in the cache and how it is made. A suite names one as
``{synth:<protocol>}``; it is generated at first use with the suite's SynthScenes preset and seed."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

from harness.data.synthetic import default_root
from harness.errors import ConfigError

TEMPLATE = re.compile(r"\{synth:([a-z][a-z0-9_]*)\}")


def declared_generator(protocol: str):
    """The ``generate`` function of the module ``protocol`` declares as its SynthScenes maker."""
    from harness.registry import declaration

    d = declaration(protocol)
    if d is None:
        raise ConfigError(f"{{synth:{protocol}}}: no protocol {protocol!r} is registered")
    if d.synthetic is None:
        raise ConfigError(f"{{synth:{protocol}}}: protocol {protocol!r} declares no SynthScenes data set of its own "
                          f"(its declaration has no `synthetic` module); use {{synth}} and its folders")
    return getattr(importlib.import_module(d.synthetic), "generate")


def declared_root(protocol: str, preset: str = "small", seed: int = 0) -> Path:
    """Where ``protocol``'s own SynthScenes data set lives: beside SynthScenes in the cache."""
    base = default_root(preset, seed)
    return base.parent / f"{base.name}-{protocol}"


def generate_declared(protocol: str, preset: str = "small", seed: int = 0, progress: bool = True) -> Path:
    """Make (or find, generated earlier) ``protocol``'s own SynthScenes data set."""
    generate = declared_generator(protocol)
    return Path(generate(declared_root(protocol, preset, seed), preset=preset, seed=seed, progress=progress))


def fill_declared(template: str, preset: str | None, seed: int | None, progress: bool = True) -> str:
    """``template`` with each ``{synth:<protocol>}`` replaced by that data set's folder (generated
    on first use); a template without one is returned as it is."""
    names = TEMPLATE.findall(template)
    if names and preset is None:
        raise ConfigError(f"{template!r} refers to {{synth:{names[0]}}} but the suite has no synth section")
    for name in names:
        template = template.replace(f"{{synth:{name}}}", str(generate_declared(name, preset, seed or 0, progress)))
    return template
