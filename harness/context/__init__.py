"""Context rows: the models a leaderboard shows beside the methods so that a number can be read.

- ``chance``: what guessing scores; each protocol states it from its evaluation data
  (`chance.ChanceModel`), no weights.
- ``pixels``: the raw-pixel baseline, a "backbone" whose features are the normalised pixels
  of each patch (`pixels.PixelBackbone`), no weights.
- ``random_init``: the architecture at its seeded initialisation (`ModelHandle.random_init`);
  the row every pretrained model's delta is taken against.
- ``supervised``: the same architecture trained with the labels of a classification train
  split on the methods' step budget (`supervised.train_supervised`), cached as a checkpoint.

A record's ``model.context`` names which of these it measured (None for a method's or an
imported checkpoint's model); `context_kind` reads it, also from records written before the
field existed.
"""
from __future__ import annotations

CONTEXT_KINDS = ("chance", "pixels", "random_init", "supervised")


def context_kind(model: dict) -> str | None:
    """The context kind of a record's ``model`` block, or None for a method's model. Records
    without the field: a random init is recognised by its method, as reports always did."""
    if "context" in model:
        return model["context"]
    return "random_init" if model.get("method") == "random_init" else None
