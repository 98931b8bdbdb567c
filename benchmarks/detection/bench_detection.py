"""Cost of one Cascade Mask R-CNN training iteration at 800 x 1333 on this CPU, side by side:
the detection protocol's ViT-S/16 and ViT-B/16 detectors (iBOT's heads, official widths) and
mmdet 3.3's own ``cascade-mask-rcnn_r50_fpn_1x_coco.py`` (random weights), batch 1, one thread.

    OMP_NUM_THREADS=1 python -m benchmarks.detection.bench_detection [--models vit_s,vit_b,r50] [--iters 1]

Each model runs in its own process (peak resident memory is per process): one untimed warm-up
iteration at 320 x 512, then ``--iters`` timed iterations (forward, backward, optimizer step) at
800 x 1333 (padded to 800 x 1344) with 5 ground-truth boxes and masks; then the backbone alone
(forward + backward of the sum of its outputs) on the same input, for the backbone's share. Times
are wall-clock and CPU seconds of the process (on a shared machine the CPU seconds are the steadier
number); the share is of CPU seconds; peak memory is the process's peak resident set.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

SIZE = (800, 1333)
MODELS = ("vit_s", "vit_b", "r50")
ARCH = {"vit_s": ("vit_small_patch16_224", "ibot_vit_s16"), "vit_b": ("vit_base_patch16_224", "ibot_vit_b16")}


def build(name: str):
    """(detector, optim wrapper) of one model, random weights."""
    from mmdet.registry import MODELS as REGISTRY
    from mmdet.utils import register_all_modules
    from mmengine.config import Config, ConfigDict
    from mmengine.optim import build_optim_wrapper

    register_all_modules(init_default_scope=True)
    if name == "r50":
        import mmdet
        from pathlib import Path

        cfg = Config.fromfile(str(Path(mmdet.__file__).parent / ".mim" / "configs" / "cascade_rcnn"
                                  / "cascade-mask-rcnn_r50_fpn_1x_coco.py"))
        cfg.model.backbone.init_cfg = None  # random weights: nothing to download
        detector = REGISTRY.build(cfg.model)
        detector.init_weights()
        return detector, build_optim_wrapper(detector, cfg.optim_wrapper)
    from benchmarks.detection.mmdet_config import model_config, optim_wrapper
    from benchmarks.detection.mmdet_modules import handed_over, register_modules
    from harness.models.backbone import create_backbone
    from harness.protocol_info import build_protocol

    register_modules()
    arch, preset = ARCH[name]
    cfg = build_protocol("detection", preset, {"amp": False}).cfg
    vit = create_backbone(arch)
    with handed_over(name, vit):
        detector = REGISTRY.build(ConfigDict(model_config(cfg, name, [vit.embed_dim] * 4, 80)))
    return detector, build_optim_wrapper(detector, ConfigDict(optim_wrapper(cfg)))


def batch(h: int, w: int, seed: int = 0):
    """One normalised image padded to 32 and its data sample with 5 boxes and masks."""
    import numpy as np
    import torch
    from mmdet.structures import DetDataSample
    from mmdet.structures.mask import BitmapMasks
    from mmengine.structures import InstanceData

    g = torch.Generator().manual_seed(seed)
    ph, pw = -(-h // 32) * 32, -(-w // 32) * 32
    image = torch.zeros(1, 3, ph, pw)
    image[..., :h, :w] = torch.randn(1, 3, h, w, generator=g)
    x0 = torch.randint(0, w // 2, (5,), generator=g).float()
    y0 = torch.randint(0, h // 2, (5,), generator=g).float()
    boxes = torch.stack([x0, y0, x0 + w // 4, y0 + h // 4], 1)
    masks = np.zeros((5, h, w), np.uint8)
    for i, (a, b, c, d) in enumerate(boxes.int().tolist()):
        masks[i, b:d, a:c] = 1
    sample = DetDataSample(metainfo={"img_shape": (h, w), "ori_shape": (h, w), "pad_shape": (ph, pw),
                                     "batch_input_shape": (ph, pw), "scale_factor": (1.0, 1.0)})
    sample.gt_instances = InstanceData(bboxes=boxes, labels=torch.randint(0, 80, (5,), generator=g),
                                       masks=BitmapMasks(masks, h, w))
    return image, [sample]


def iteration(detector, wrapper, image, samples) -> tuple[float, float]:
    """(wall s, CPU s of this process) of one training iteration."""
    t0, c0 = time.perf_counter(), time.process_time()
    losses = detector(image, samples, mode="loss")
    loss, _ = detector.parse_losses(losses)
    wrapper.update_params(loss)
    return time.perf_counter() - t0, time.process_time() - c0


def backbone_seconds(detector, image) -> tuple[float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    sum(o.float().sum() for o in detector.backbone(image)).backward()
    detector.zero_grad(set_to_none=True)
    return time.perf_counter() - t0, time.process_time() - c0


def run_one(name: str, iters: int) -> dict:
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    detector, wrapper = build(name)
    detector.train()
    iteration(detector, wrapper, *batch(320, 512))
    image, samples = batch(*SIZE)
    wall, cpu = min(iteration(detector, wrapper, image, samples) for _ in range(iters))
    backbone_wall, backbone_cpu = backbone_seconds(detector, image)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"model": name, "s_per_iter": wall, "cpu_s_per_iter": cpu, "backbone_s": backbone_wall,
            "backbone_cpu_s": backbone_cpu, "backbone_share": backbone_cpu / cpu, "peak_rss_mb": peak_mb,
            "params_m": sum(p.numel() for p in detector.parameters()) / 1e6, "input": list(SIZE)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--iters", type=int, default=1)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(run_one(args.child, args.iters)))
        return 0
    print(f"{'model':8} {'wall s/iter':>11} {'CPU s/iter':>10} {'backbone CPU s':>14} {'share':>6} "
          f"{'peak MB':>8} {'params M':>9}")
    for name in args.models.split(","):
        proc = subprocess.run([sys.executable, "-m", "benchmarks.detection.bench_detection", "--child", name,
                               "--iters", str(args.iters)], capture_output=True, text=True)
        if proc.returncode:
            print(f"{name}: failed\n{proc.stderr[-2000:]}")
            return 1
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"{name:8} {r['s_per_iter']:11.1f} {r['cpu_s_per_iter']:10.1f} {r['backbone_cpu_s']:14.1f} "
              f"{r['backbone_share']:6.0%} {r['peak_rss_mb']:8.0f} {r['params_m']:9.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
