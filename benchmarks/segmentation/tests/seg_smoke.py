"""CPU checks of the segmentation protocols on SynthScenes, for the tests (test_seg.py beside it)
and by hand from the repository root (README.md):

    PYTHONPATH=benchmarks/segmentation/tests python -c "from seg_smoke import smoke; smoke(None, 'voc')"
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from harness.models.handle import ModelHandle


def smoke(checkpoint: str | Path | ModelHandle | None, layout: Literal["ade", "voc"] = "ade", *,
          protocol: str = "seg_linear", preset: str = "small", iters: int | None = None,
          lrs: list[float] | None = None, work_root: str | Path | None = None) -> float:
    """CPU check on SynthScenes: the protocol's ``synth`` preset on a checkpoint file or a built
    model (or on the random-init ``vit_cpu_tiny`` when ``checkpoint`` is None); prints and returns
    the mIoU of the best lr."""
    from harness.data.synthetic import default_root, generate
    from harness.paths import home
    from harness.registry import PROTOCOLS

    root = generate(default_root(preset, 0), preset=preset, seed=0, progress=False)
    if isinstance(checkpoint, ModelHandle):
        model = checkpoint
    else:
        model = (ModelHandle.from_checkpoint(checkpoint) if checkpoint
                 else ModelHandle.random_init("vit_cpu_tiny", seed=0))
    values: dict[str, Any] = {"dataset": f"synth_{layout}"}
    if iters is not None:
        values["iters"] = iters
    if lrs is not None:
        values["lrs"] = list(lrs)
    proto = PROTOCOLS.get(protocol).from_preset("synth", values)
    work = Path(work_root) if work_root else home() / "mmseg-smoke"
    proto.cfg.work_dir = str(work / model.cache_key[:16] / f"{protocol}-{proto.fingerprint()}")
    results = proto.run(model, root)
    best = next(r for r in results if r.variant.get("lr") == "best")
    check_per_image(best)
    label = "random init" if checkpoint is None else model.meta.get("spec") or f"checkpoint {checkpoint}"
    print(f"[smoke] {protocol} on SynthScenes-{preset} ({layout} layout), {label}: "
          f"mIoU {best.metrics['mIoU']:.2f} (lr {best.params['best_lr']:g}, {proto.cfg.iters} iters)")
    return float(best.metrics["mIoU"])


def check_per_image(result) -> None:
    """A seg result keeps its validation images' areas, whose sums give back its mIoU and aAcc as
    mmseg rounds them (harness.per_image; the bootstrap interval of a one-seed seg cell)."""
    import numpy as np

    from harness.per_image import read_per_image

    stats = read_per_image(result.per_image)
    ones = np.ones((1, stats.images))
    checked = [m for m in ("mIoU", "aAcc", "mAcc") if m in result.metrics and m in stats.metrics]
    assert "mIoU" in checked, (result.metrics, stats.metrics)
    for metric in checked:
        got = round(float(stats.metric_of_weights(ones, metric)[0]), 2)
        assert got == round(float(result.metrics[metric]), 2), (metric, got, result.metrics[metric])
