"""Each method's full pretraining step against a same-run anchor, and where the step's time goes.

    python -m experiments.pretrain_step_bench [--methods dino,ibot] [--steps 8] [--warmup 3] [--set K=V]

For every registered method with a configs/methods/<name>_cpu.yaml:

- full step: the real `harness.training.engine.Trainer` on SynthScenes-small with the preset's
  settings (its `num_workers`, so data loading and augmentation run as in training),
  `--warmup` steps, then `--steps` timed ones; a step is the wall time from the end of one
  optimisation to the end of the next (data wait, forward, loss, backward, clipping,
  AdamW, EMA, logging);
- anchor: a plain timm VisionTransformer of the backbone's shape (the preset's arch with any
  `--set backbone.*` override) on the same crops as ready-made tensors (the number and
  sizes of the crops of the method's own collated batch, one forward per crop size),
  forward + backward + AdamW; measured right before and right after the method (the mean),
  so both share the machine's load;
- ratio = full step / anchor step (target <= 1.3);
- profile: shares of the full step spent waiting for data (and the loop's own work), in
  the forward of the backbones' transformer blocks (student and teacher), of the heads
  (every part of student and teacher but the backbone), in the rest of the forward
  (patch embedding, masking, loss), in the backward, the gradient clipping, the optimizer
  step and the end-of-step update (EMA teacher, centres, queues).

The profile is generic: hooks on the backbones' blocks and wrappers around the Trainer's
calls; no method carries timing code. On a shared machine compare ratios within one run.
"""
from __future__ import annotations

import os

# as the ssl-bench entry point: passive OpenMP waiting, set before torch is imported
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import importlib  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import defaultdict  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from timm.models.vision_transformer import VisionTransformer  # noqa: E402

import harness.training.engine as engine  # noqa: E402
from harness.models.backbone import ViTBackbone, arch_kwargs_for  # noqa: E402
from harness.config import apply_overrides, load_config  # noqa: E402
from harness.training.engine import Trainer, global_batches, load_pretrain_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# architecture keys a plain timm VisionTransformer accepts
TIMM_ARCH_KEYS = ("img_size", "patch_size", "embed_dim", "depth", "num_heads", "mlp_ratio", "reg_tokens",
                  "init_values", "no_embed_class")
PHASES = ("data", "blocks", "heads", "fwd_rest", "backward", "clip", "optimizer", "end_of_step")


class StepProfiler:
    """Wall time per phase of a Trainer's steps, from hooks and wrappers (nothing in the
    method changes: the same calls run in the same order)."""

    def __init__(self, trainer: Trainer):
        self.trainer = trainer
        self.step_ends: list[float] = []
        self.rows: list[dict[str, float]] = []
        self._cur: dict[str, float] = defaultdict(float)
        self._undo: list = []
        self._start = 0.0

    def _add(self, phase: str, seconds: float) -> None:
        self._cur[phase] += seconds

    def _timed(self, fn, phase: str):
        def run(*a, **kw):
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self._add(phase, time.perf_counter() - t)
        return run

    def _hook(self, module: torch.nn.Module, phase: str) -> None:
        started: list[float] = []
        self._undo.append(module.register_forward_pre_hook(lambda *_: started.append(time.perf_counter())))
        self._undo.append(module.register_forward_hook(
            lambda *_: self._add(phase, time.perf_counter() - started.pop())))

    def __enter__(self) -> "StepProfiler":
        tr = self.trainer
        for m in tr.method.modules():
            if isinstance(m, ViTBackbone):
                for block in m.blocks:
                    self._hook(block, "blocks")
        # heads: every part of student and teacher but the backbone (DINO / iBOT heads,
        # SynCLR's projector and predictor, CrIBo's heads)
        for side in (getattr(tr.method, "student", None), getattr(tr.method, "teacher", None)):
            if isinstance(side, torch.nn.ModuleDict):
                for key, part in side.items():
                    if key != "backbone":
                        self._hook(part, "heads")
        # A step runs from the method's forward to its end-of-step update; the time between
        # one step's end and the next forward is the data wait (and the loop's own work).
        forward, end_of_step = tr.model, tr.method.on_step_end

        def step_start(*a, **kw):
            t0 = time.perf_counter()
            if self.step_ends:
                self._add("data", t0 - self.step_ends[-1])
            self._start = t0
            try:
                return forward(*a, **kw)
            finally:
                self._add("forward", time.perf_counter() - t0)

        def step_end(*a, **kw):
            t = time.perf_counter()
            out = end_of_step(*a, **kw)
            t1 = time.perf_counter()
            self._add("end_of_step", t1 - t)
            self._add("optimise", t1 - self._start)
            if self.step_ends:
                self._cur["step"] = t1 - self.step_ends[-1]
                self.rows.append(dict(self._cur))
            self.step_ends.append(t1)
            self._cur = defaultdict(float)
            return out
        tr.model, tr.method.on_step_end = step_start, step_end
        tr.scaler.step = self._timed(tr.scaler.step, "optimizer")
        self._clip = engine.clip_per_parameter
        engine.clip_per_parameter = self._timed(self._clip, "clip")
        return self

    def __exit__(self, *exc) -> None:
        engine.clip_per_parameter = self._clip
        for h in self._undo:
            h.remove()

    def summary(self, skip: int) -> dict[str, float]:
        """Mean seconds per step of each phase over the steps after the first `skip`."""
        rows = self.rows[skip:]
        mean = {k: sum(r.get(k, 0.0) for r in rows) / len(rows)
                for k in ("step", "data", "forward", "blocks", "heads", "optimise", "clip", "optimizer", "end_of_step")}
        mean["fwd_rest"] = mean["forward"] - mean["blocks"] - mean["heads"]
        mean["backward"] = mean["optimise"] - mean["forward"] - mean["clip"] - mean["optimizer"] - mean["end_of_step"]
        return mean


def crop_shapes(trainer: Trainer) -> dict[tuple[int, int], int]:
    """Images per crop size in one collated batch of the method: {(h, w): count}."""
    ds, t = trainer.dataset, trainer.cfg.train
    if hasattr(ds, "set_epoch"):
        ds.set_epoch(0)
    idx = global_batches(trainer.method, ds, 0, t.batch_size, t.seed)[0]
    batch = trainer.method.collate([ds[i] for i in idx])
    shapes: dict[tuple[int, int], int] = defaultdict(int)

    def visit(x) -> None:
        if torch.is_tensor(x):
            if x.is_floating_point() and x.dim() == 4 and x.shape[1] == 3:
                shapes[tuple(x.shape[2:])] += x.shape[0]
        elif isinstance(x, dict):
            for v in x.values():
                visit(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                visit(v)
    visit(batch)
    return dict(shapes)


def anchor_kwargs(backbone) -> dict:
    """The plain timm ViT's shape: the method's backbone preset with its `backbone.*` overrides."""
    kw = arch_kwargs_for(backbone.arch, **backbone.overrides())
    return {k: v for k, v in kw.items() if k in TIMM_ARCH_KEYS}


def anchor_step_s(kw: dict, shapes: dict[tuple[int, int], int], steps: int, warmup: int) -> float:
    """Seconds per step of a plain timm ViT of shape `kw` on ready-made crops: one forward per
    crop size, backward, AdamW."""
    torch.manual_seed(0)
    model = VisionTransformer(**kw, num_classes=0, dynamic_img_size=True).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    crops = [torch.randn(n, 3, h, w) for (h, w), n in shapes.items()]
    times = []
    for s in range(warmup + steps):
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = sum(model(x).pow(2).mean() for x in crops)
        loss.backward()
        opt.step()
        if s >= warmup:
            times.append(time.perf_counter() - t)
    return sum(times) / len(times)


def bench_method(name: str, data_root: Path, steps: int, warmup: int, overrides: dict,
                 settings: list[str] | None = None) -> dict:
    cfg_path = ROOT / "configs" / "methods" / f"{name}_cpu.yaml"
    if not cfg_path.is_file():
        return {"method": name, "skipped": f"no {cfg_path.relative_to(ROOT)}"}
    raw = apply_overrides(load_config(cfg_path), settings)
    source = raw.pop("_source_", str(cfg_path))
    raw["data"] = {"root": str(data_root)}
    train = raw.setdefault("train", {})
    # +1: the first step's start (loader start-up) is not a full step; warm-up steps follow it
    train.update({"max_steps": warmup + steps + 1, "log_every": 10**6, "checkpoint_every": 10**6, **overrides})
    cfg = load_pretrain_config(raw, source)
    with tempfile.TemporaryDirectory(prefix=f"step-bench-{name}-") as work:
        trainer = Trainer(cfg, Path(work), source, progress=False)
        shapes = crop_shapes(trainer)
        shape = anchor_kwargs(cfg.backbone)
        before = anchor_step_s(shape, shapes, steps, warmup)
        with StepProfiler(trainer) as prof:
            trainer.train()
        # the anchor on both sides of the method: both see the same average load
        anchor = (before + anchor_step_s(shape, shapes, steps, warmup)) / 2
    m = prof.summary(skip=warmup)
    bs = cfg.train.batch_size
    return {"method": name, "arch": cfg.backbone.arch, "anchor_shape": shape, "batch": bs,
            "workers": cfg.train.num_workers,
            "crops": " + ".join(f"{n // bs}x{h}" + ("" if h == w else f"x{w}") for (h, w), n in shapes.items()),
            "anchor_s": anchor, "step_s": m["step"], "img_s": bs / m["step"], "anchor_img_s": bs / anchor,
            "ratio": m["step"] / anchor, **{f"{p}_share": m[p] / m["step"] for p in PHASES}}


def run(methods: list[str] | None = None, steps: int = 8, warmup: int = 3, preset: str = "small",
        overrides: dict | None = None, log=print, settings: list[str] | None = None) -> list[dict]:
    importlib.import_module("methods")  # registers the built-in methods
    from harness.data.synthetic import default_root, generate
    from harness.registry import METHODS

    root = generate(default_root(preset, 0), preset=preset, seed=0, progress=False)
    out = []
    for name in methods or sorted(METHODS.names()):
        try:
            r = bench_method(name, root, steps, warmup, overrides or {}, settings)
        except Exception as e:  # one broken method must not hide the others' numbers
            r = {"method": name, "error": f"{type(e).__name__}: {e}"}
        out.append(r)
        log(format_row(r))
    return out


HEADER = ("| method | crops / image | batch, workers | anchor s/step (img/s) | full step s/step (img/s) | ratio "
          "| data+loop | fwd: blocks | fwd: heads | fwd: rest (loss, masking) | backward | clip | AdamW "
          "| EMA, queues |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def format_row(r: dict) -> str:
    if "skipped" in r or "error" in r:
        return f"| {r['method']} | {r.get('skipped') or r.get('error')} |" + " |" * 12
    shares = " | ".join(f"{100 * r[p + '_share']:.0f}%" for p in PHASES)
    return (f"| {r['method']} | {r['crops']} | {r['batch']}, {r['workers']} | {r['anchor_s']:.3f} "
            f"({r['anchor_img_s']:.0f}) "
            f"| {r['step_s']:.3f} ({r['img_s']:.0f}) | {r['ratio']:.2f}x | {shares} |")


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default=None, help="comma list (default: every registered method)")
    ap.add_argument("--steps", type=int, default=8, help="timed steps per method")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps before them")
    ap.add_argument("--batch", type=int, default=None, help="override train.batch_size")
    ap.add_argument("--num-workers", type=int, default=None,
                    help="override train.num_workers (0: augmentation in the step, so the profile shows its cost)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                    help="override a preset setting, as `ssl-bench pretrain --set` "
                         "(e.g. method.crops.local_crops_number=2); repeatable")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    overrides = {"batch_size": args.batch} if args.batch else {}
    if args.num_workers is not None:
        overrides["num_workers"] = args.num_workers
    print(f"load average {os.getloadavg()}, torch {torch.__version__}, {args.threads} threads")
    print(HEADER, flush=True)
    rows = run(args.methods.split(",") if args.methods else None, args.steps, args.warmup, overrides=overrides,
               log=lambda line: print(line, flush=True), settings=args.settings)
    print(f"load average at the end {os.getloadavg()}")
    return rows


if __name__ == "__main__":
    main()
