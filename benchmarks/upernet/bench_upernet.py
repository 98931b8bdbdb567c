"""Time and peak memory of one ``upernet`` training iteration at 512 x 512, side by side with
mmseg 1.2.2's own ``configs/mae/mae-base_upernet_8xb2-amp-160k_ade20k-512x512.py`` model at the same
input size and batch, each in a fresh process (peak RSS is per process), in one run:

    python benchmarks/upernet/bench_upernet.py --batch 1 --iters 2 --threads 1

An iteration is what the runner does per step: ``model.loss`` (UPerHead + auxiliary FCNHead) on
a random batch with 150-class labels, backward, and the optimizer step (AdamW with layer decay: our
constructor; mmseg's LayerDecayOptimizerConstructor for its MAE model), in fp32 on the CPU (the
configs' fp16 needs a GPU); SyncBN reverted to BatchNorm as on one process. The first iteration
is a warm-up and is not timed (with ``--iters 2`` or more). Both the wall-clock and the process CPU
time are printed: on a shared machine the CPU time of a one-thread run is the steadier of the two.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

MODELS = ("ours_vit_s16", "ours_vit_b16", "mmseg_mae_b16")
MMSEG_CONFIG = "mae/mae-base_upernet_8xb2-amp-160k_ade20k-512x512.py"


def _ours(name: str):
    from mmengine.optim import build_optim_wrapper
    from mmseg.registry import MODELS as MM

    from benchmarks.upernet import mmseg_parts, runner
    from benchmarks.upernet.protocol import UperNet
    from harness.models.backbone import create_backbone

    preset = "ibot_vit_s16" if name == "ours_vit_s16" else "ibot_vit_b16"
    cfg = UperNet.from_preset(preset, {"amp": False}).cfg
    vit = create_backbone("vit_small_patch16_224" if preset == "ibot_vit_s16" else "vit_base_patch16_224")
    mmseg_parts.register()
    with mmseg_parts.handed_over("bench", vit):
        model_cfg = runner.model_config(cfg, "bench", vit.embed_dim, [4.0, 2.0, 1.0, 0.5], 150, norm="syncbn")
        model = MM.build(model_cfg)
    sched = runner.schedule_config(cfg)
    return model, build_optim_wrapper(model, sched["optim_wrapper"])


def _mmseg_mae():
    import mmseg
    from mmengine.config import Config
    from mmengine.optim import build_optim_wrapper
    from mmseg.registry import MODELS as MM

    cfg = Config.fromfile(str(Path(mmseg.__file__).parent / ".mim" / "configs" / MMSEG_CONFIG))
    cfg.model.pretrained = None
    model = MM.build(cfg.model)
    cfg.optim_wrapper.type = "OptimWrapper"  # AmpOptimWrapper: fp16 needs a GPU
    cfg.optim_wrapper.pop("loss_scale", None)
    return model, build_optim_wrapper(model, cfg.optim_wrapper)


def one(name: str, batch: int, iters: int) -> dict:
    import torch
    from mmengine.model import revert_sync_batchnorm
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    from mmseg.utils import register_all_modules

    register_all_modules()
    torch.manual_seed(0)
    model, optim = _mmseg_mae() if name == "mmseg_mae_b16" else _ours(name)
    model = revert_sync_batchnorm(model).train()
    params = sum(p.numel() for p in model.parameters())
    rss_built = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    x = torch.randn(batch, 3, 512, 512)
    samples = []
    for _ in range(batch):
        s = SegDataSample(metainfo=dict(img_shape=(512, 512), pad_shape=(512, 512), ori_shape=(512, 512)))
        s.gt_sem_seg = PixelData(data=torch.randint(0, 150, (1, 512, 512)))
        samples.append(s)
    times, cpu = [], []
    for _ in range(iters):
        t, c = time.perf_counter(), time.process_time()
        loss, _ = model.parse_losses(model.loss(x, samples))
        optim.update_params(loss)
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    timed, cpu = (times[1:], cpu[1:]) if iters > 1 else (times, cpu)
    return {"model": name, "batch": batch, "params_M": round(params / 1e6, 2),
            "s_per_iter": round(sum(timed) / len(timed), 2), "cpu_s_per_iter": round(sum(cpu) / len(cpu), 2),
            "timed_iters": len(timed),
            "peak_rss_MB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "rss_after_build_MB": round(rss_built)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=2,
                    help="2: the configs' per-GPU batch (1 fails: BatchNorm after the 1x1 pool)")
    ap.add_argument("--iters", type=int, default=2,
                    help="iterations per model; with more than one, the first is a warm-up and not timed")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--one", choices=MODELS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    if args.one:
        print(json.dumps(one(args.one, args.batch, args.iters)))
        return
    rows = []
    for name in args.models:
        out = subprocess.run([sys.executable, __file__, "--one", name, "--batch", str(args.batch), "--iters",
                              str(args.iters), "--threads", str(args.threads)], capture_output=True, text=True)
        if out.returncode:
            raise SystemExit(f"{name} failed:\n{out.stderr[-3000:]}")
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    by = {r["model"]: r for r in rows}
    if "ours_vit_b16" in by and "mmseg_mae_b16" in by:
        ratio = by["ours_vit_b16"]["cpu_s_per_iter"] / by["mmseg_mae_b16"]["cpu_s_per_iter"]
        wall = by["ours_vit_b16"]["s_per_iter"] / by["mmseg_mae_b16"]["s_per_iter"]
        mem = by["ours_vit_b16"]["peak_rss_MB"] / by["mmseg_mae_b16"]["peak_rss_MB"]
        print(f"ours ViT-B/16 / mmseg MAE-B UperNet: CPU time x{ratio:.3f} (wall x{wall:.3f}), peak RSS x{mem:.3f} "
              f"(batch {args.batch}, {args.threads} thread(s), CPU)")


if __name__ == "__main__":
    main()
