"""The segmentation data sets the protocols accept, by name or alias, and how mmseg reads
each (its ``harness.data.segmentation.MmsegLayout``)."""
from __future__ import annotations

from harness.data.segmentation import MmsegLayout
from harness.errors import ConfigError

# Other names the protocols accept. synth_*: SynthScenes' copies of the layouts (any root with
# a SynthScenes meta.json is read with its own class names whatever the name used).
ALIASES = {"ade": "ade20k", "coco_stuff": "coco_stuff164k", "pascal_context_60": "pascal_context",
           "synth_ade": "ade20k", "synth_voc": "voc12aug"}


def mmseg_layout(name: str) -> MmsegLayout:
    """How mmseg reads the data set ``name`` (a name of ``harness.registry.DATASETS`` or an alias)."""
    from harness.registry import DATASETS

    key = ALIASES.get(name, name)
    layout = getattr(DATASETS.get(key), "mmseg", None) if key in DATASETS else None
    if layout is None:
        known = [n for n in DATASETS.names() if getattr(DATASETS.get(n), "mmseg", None) is not None]
        raise ConfigError(f"segmentation dataset {name!r} is unknown; choose one of "
                          f"{', '.join(known)} (aliases: {', '.join(sorted(ALIASES))})")
    return layout
