"""A feature grid too coarse for a protocol's number to say much: the protocol declares its
minimum (cells on the short side) and why; a grid below it is kept, and its record and the
console say so (``ProtocolResult.flags``, a record's ``flags``)."""
from __future__ import annotations


def coarse_grid_flag(protocol: str, grid: tuple[int, int], minimum: int, why: str, model: str, stride: int,
                     input_hw: tuple[int, int] | None = None) -> str | None:
    """One sentence when ``grid`` (h, w cells) has fewer than ``minimum`` cells on its short side;
    None otherwise."""
    h, w = grid
    if min(h, w) >= minimum:
        return None
    at = f" on {input_hw[1]}x{input_hw[0]} inputs" if input_hw else ""
    return (f"{protocol}: the feature grid of model {model} is {w}x{h} cells (stride {stride}{at}), below the "
            f"protocol's minimum of {minimum} cells a side ({why}); the number is kept but says little: use larger "
            f"inputs or a model of a smaller stride")
