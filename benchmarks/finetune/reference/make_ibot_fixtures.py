"""Write the fine-tuning parity fixtures from iBOT's official fine-tuning code.

    python -m benchmarks.finetune.reference.make_ibot_fixtures /path/to/ibot [--commit SHA]

The checkout (bytedance/ibot, kept outside this repository) is imported and run unmodified
under this project's torch / timm (the stand-ins for what they no longer ship:
``official_ibot.py``). Three fixtures land in benchmarks/finetune/fixtures/, with their
sha256 in MANIFEST.json:

- ``ibot_param_groups.json``: for ViT-S/16, ViT-B/16 and ViT-L/16 built as ``run.sh
  imagenet_cls`` plus each README command builds them, every parameter's layer id, lr scale,
  weight decay and group, from ``create_optimizer`` / ``get_parameter_groups`` with
  ``LayerDecayValueAssigner``, the groups in the optimizer's order, and every argument the
  official parser gives for that command;
- ``ibot_schedules.json``: ``utils.cosine_scheduler`` per step for the README's ImageNet
  recipes (at a few steps per epoch) and for the warm-up variants the function has;
- ``ibot_transforms.json``: ``run_class_finetuning.build_transform`` (train and eval) of the
  README's ImageNet flags at 224 px and of the 32 px branch, applied to deterministic test images
  with python's, numpy's and torch's generators seeded per image: a digest of each output;
- ``ibot_train_steps.json`` + ``ibot_train_steps.npz``: four steps of
  ``engine_for_finetuning.train_one_epoch`` on a small official ViT (mixup / cutmix, label
  smoothing, drop path, layer decay, AdamW, the lr / wd schedules, timm's ModelEma): the loss,
  lr, wd and grad norm of each step, per-parameter digests after each step, the drop-path keep
  masks and mixed targets drawn; the npz holds the initial weights, the batches and the weights
  after the last step.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import io
import json
import platform
import subprocess
from functools import partial
from pathlib import Path

import numpy as np
import torch

from benchmarks.finetune.reference import official_ibot

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
FIXTURES = HERE.parent / "fixtures"

GENERATOR = "benchmarks/finetune/reference/make_ibot_fixtures.py"
# run.sh imagenet_cls's flags, then each README command's (later flags win in argparse)
RUN_SH_IMAGENET = ["--epochs", "100", "--warmup_epochs", "20", "--layer_decay", "0.65", "--mixup", "0.8",
                   "--cutmix", "1.0", "--layer_scale_init_value", "0.0", "--disable_rel_pos_bias", "--abs_pos_emb",
                   "--use_cls", "--imagenet_default_mean_and_std", "--data_path", "data/imagenet"]
README = {
    "vit_small": ["--epochs", "200", "--drop_path", "0.1", "--layer_decay", "0.75"],
    "vit_base": ["--epochs", "100", "--drop_path", "0.2", "--layer_decay", "0.65"],
    "vit_large": ["--epochs", "50", "--drop_path", "0.4", "--layer_decay", "0.75", "--batch_size", "64",
                  "--enable_deepspeed", "--warmup_epochs", "5", "--update_freq", "2"],
}
STEPS_PER_EPOCH = {"vit_small": 5, "vit_base": 3, "vit_large": 4}  # small, for the schedule fixture
# the small ViT of the training-step fixture (official VisionTransformer, iBOT's fine-tuning flags)
TINY = dict(img_size=32, patch_size=8, embed_dim=32, depth=3, num_heads=2, mlp_ratio=4, qkv_bias=True,
            num_classes=10, drop_path_rate=0.3, use_mean_pooling=False, init_values=0.0, use_abs_pos_emb=True,
            use_rel_pos_bias=False, init_scale=0.001)
STEP = dict(batch=8, batches=4, init_seed=0, data_seed=1, draw_seed=2, lr=5e-3, min_lr=1e-6, epochs=2,
            warmup_epochs=1, weight_decay=0.05, weight_decay_end=0.1, layer_decay=0.75, mixup=0.8, cutmix=1.0,
            mixup_prob=1.0, mixup_switch_prob=0.5, mixup_mode="batch", smoothing=0.1, ema_decay=0.9)
# the recipe's step (one batch per update, no clipping: --clip_grad's default), gradient
# accumulation (--update_freq 2, as the README's ViT-L command) with --clip_grad 1.0, and the
# argparse default head (mean pooling + fc_norm; run.sh passes --use_cls)
SCENARIOS = {"recipe": dict(update_freq=1, max_norm=None, use_mean_pooling=False),
             "accumulate_clip": dict(update_freq=2, max_norm=1.0, use_mean_pooling=False),
             "mean_pooling": dict(update_freq=1, max_norm=None, use_mean_pooling=True)}


# --enable_deepspeed makes the parser import deepspeed (not installed here); with it the script
# calls the same get_parameter_groups (with the same skip list and assigner) and hands the
# groups to DeepSpeed's AdamW instead of create_optimizer's torch AdamW
PARSED_WITHOUT = ("--enable_deepspeed",)


def official_argv(arch: str) -> list[str]:
    return ["--model", arch, *RUN_SH_IMAGENET, *(a for a in README[arch] if a not in PARSED_WITHOUT)]


def quiet():
    """The official functions print their groups and schedules; keep the generator's output short."""
    return contextlib.redirect_stdout(io.StringIO())


# ----------------------------------------------------------------------------- parameter groups
def param_groups(off, arch: str) -> dict:
    args = official_ibot.official_args(off.checkout, official_argv(arch))
    model = getattr(off.modeling, arch)(
        img_size=args.input_size, num_classes=1000, drop_rate=args.drop, drop_path_rate=args.drop_path,
        attn_drop_rate=args.attn_drop_rate, use_mean_pooling=args.use_mean_pooling, init_scale=args.init_scale,
        use_rel_pos_bias=args.rel_pos_bias, use_abs_pos_emb=args.abs_pos_emb,
        use_learned_abs_pos_emb=args.learned_abs_pos_emb, init_values=args.layer_scale_init_value)
    depth = model.get_num_layers()
    assigner = off.optim_factory.LayerDecayValueAssigner(
        [args.layer_decay ** (depth + 1 - i) for i in range(depth + 2)])
    skip = model.no_weight_decay()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        optimizer = off.optim_factory.create_optimizer(args, model, skip_list=skip,
                                                       get_num_layer=assigner.get_layer_id,
                                                       get_layer_scale=assigner.get_scale)
    printed = buf.getvalue()
    names = json.loads(printed[printed.index("{"):printed.rindex("}") + 1])  # its "Param groups = {...}"
    by_tensor = {id(p): n for n, p in model.named_parameters()}
    groups, params = [], {}
    for (gname, gnames), group in zip(names.items(), optimizer.param_groups):
        if [by_tensor[id(p)] for p in group["params"]] != gnames["params"]:
            raise SystemExit(f"{arch}: optimizer group {gname} does not hold the printed parameters")
        groups.append({"name": gname, "lr_scale": group["lr_scale"], "weight_decay": group["weight_decay"],
                       "params": gnames["params"]})
        for n in gnames["params"]:
            params[n] = {"group": gname, "lr_scale": group["lr_scale"], "weight_decay": group["weight_decay"]}
    rows = [{"name": n, "shape": list(p.shape), "layer_id": assigner.get_layer_id(n), **params[n]}
            for n, p in model.named_parameters()]
    defaults = {k: optimizer.defaults[k] for k in ("lr", "weight_decay", "eps", "betas")}
    parsed = {k: v for k, v in vars(args).items() if isinstance(v, (int, float, str, bool, list, type(None)))}
    return {"argv": official_argv(arch), "official_args": parsed,
            "readme_flags_not_parsed": [a for a in README[arch] if a in PARSED_WITHOUT],
            "layer_decay": args.layer_decay, "weight_decay": args.weight_decay,
            "depth": depth, "assigner_values": assigner.values, "skip_list": sorted(skip),
            "optimizer": type(optimizer).__name__, "optimizer_defaults": defaults, "groups": groups,
            "parameters": rows}


# ----------------------------------------------------------------------------- schedules
def schedule_cases(off) -> list[dict]:
    cases = []
    for arch, niter in STEPS_PER_EPOCH.items():
        a = official_ibot.official_args(off.checkout, official_argv(arch))
        wd_end = a.weight_decay if a.weight_decay_end is None else a.weight_decay_end
        cases.append({"name": f"{arch}_lr", "source": f"README {arch} command, run_class_finetuning.main",
                      "call": dict(base_value=a.lr, final_value=a.min_lr, epochs=a.epochs, niter_per_ep=niter,
                                   warmup_epochs=a.warmup_epochs, warmup_steps=a.warmup_steps)})
        cases.append({"name": f"{arch}_wd", "source": f"README {arch} command, run_class_finetuning.main",
                      "call": dict(base_value=a.weight_decay, final_value=wd_end, epochs=a.epochs,
                                   niter_per_ep=niter)})
    cases += [
        {"name": "warmup_steps_override", "source": "--warmup_steps replaces warmup_epochs * niter_per_ep",
         "call": dict(base_value=1e-3, final_value=1e-6, epochs=3, niter_per_ep=7, warmup_epochs=1,
                      warmup_steps=4)},
        {"name": "start_warmup_value", "source": "the function's start_warmup_value (run_class_finetuning "
                                                 "never passes it: its warm-up starts at 0, --warmup_lr is unused)",
         "call": dict(base_value=5e-4, final_value=1e-5, epochs=4, niter_per_ep=5, warmup_epochs=1,
                      start_warmup_value=1e-6)},
        {"name": "no_warmup", "source": "warmup_epochs 0",
         "call": dict(base_value=2e-3, final_value=0.0, epochs=2, niter_per_ep=6, warmup_epochs=0)},
        {"name": "rising_wd", "source": "a weight decay that grows (--weight_decay_end above --weight_decay)",
         "call": dict(base_value=0.04, final_value=0.4, epochs=3, niter_per_ep=4)},
    ]
    for case in cases:
        with quiet():
            case["values"] = [float(v) for v in off.utils.cosine_scheduler(**case["call"])]
    return cases


# ----------------------------------------------------------------------------- transforms
TRANSFORM_SEEDS = tuple(range(12))
TRANSFORM_CASES = {
    "imagenet_224": ["--model", "vit_small", *RUN_SH_IMAGENET, *README["vit_small"]],
    "small_32": ["--model", "vit_small", *RUN_SH_IMAGENET, "--input_size", "32"],
}


def transform_cases(checkout: Path) -> dict:
    """Each case's official train and eval transforms on TRANSFORM_SEEDS images. A draw that
    makes RandAugment posterize to 0 bits (magnitude 10 under ``inc1``) fails under Pillow >= 11
    (the official code's Pillow gave a black image); that seed is recorded as skipped."""
    import random

    from benchmarks.finetune.reference.fixture_files import synthetic_photo, tensor_digest

    runner = official_ibot.load_runner(checkout)
    out = {}
    for name, argv in TRANSFORM_CASES.items():
        args = official_ibot.official_args(checkout, argv)
        with quiet():
            train, evaluation = runner.build_transform(True, args), runner.build_transform(False, args)
        rows = []
        for seed in TRANSFORM_SEEDS:
            row = {"seed": seed}
            for split, transform in (("train", train), ("eval", evaluation)):
                random.seed(seed)
                np.random.seed(seed)
                torch.manual_seed(seed)
                try:
                    row[split] = tensor_digest(transform(synthetic_photo(seed)))
                except ValueError as err:  # Pillow >= 11: posterize to 0 bits
                    row[split] = {"skipped": str(err)}
            rows.append(row)
        out[name] = {"argv": argv, "train_transform": repr(train), "eval_transform": repr(evaluation),
                     "images": rows}
    return out


# ----------------------------------------------------------------------------- training steps
class _Recorder:
    """Wraps the official loss scaler and criterion to see each step from outside: the loss the
    criterion returned (every micro-batch), and at every optimizer update the grad norm the scaler
    returned, the groups' lr / weight decay and the weights after the update."""

    def __init__(self, scaler, criterion, model, optimizer):
        self.scaler, self.criterion, self.model, self.optimizer = scaler, criterion, model, optimizer
        self.losses, self.updates = [], []

    def loss(self, output, target):
        value = self.criterion(output, target)
        self.losses.append(float(value.detach()))
        return value

    def __call__(self, *args, update_grad=True, **kwargs):
        norm = self.scaler(*args, update_grad=update_grad, **kwargs)
        if update_grad:
            self.updates.append({"grad_norm": float(norm),
                                 "group_lr": [float(g["lr"]) for g in self.optimizer.param_groups],
                                 "group_weight_decay": [float(g["weight_decay"]) for g in self.optimizer.param_groups],
                                 "digest": digest(self.model)})
        return norm

    def state_dict(self):
        return self.scaler.state_dict()


DIGEST_INDICES = (0, 7, -1)


def digest(model) -> dict:
    """Per parameter: sum, sum of |x| and three entries (first, eighth, last), not a hash."""
    out = {}
    for n, p in model.named_parameters():
        flat = p.detach().double().flatten()
        out[n] = [float(flat.sum()), float(flat.abs().sum())] + [float(flat[i % flat.numel()])
                                                                  for i in DIGEST_INDICES]
    return out


def _half_exact(t: torch.Tensor) -> torch.Tensor:
    """Rounded to float16 values, so the npz stores the exact inputs in half the bytes."""
    return t.half().float()


def tiny_model_and_batches(off, use_mean_pooling: bool = False):
    """The official ViT at TINY with seeded weights, and the seeded batches (both float16-exact).
    The two heads draw the same numbers (the norms are initialised to ones and zeros): the
    mean-pooling model's weights are the class-token model's with ``norm.*`` named ``fc_norm.*``."""
    s = STEP
    torch.manual_seed(s["init_seed"])
    model = off.modeling.VisionTransformer(norm_layer=partial(torch.nn.LayerNorm, eps=1e-6),
                                           **{**TINY, "use_mean_pooling": use_mean_pooling})
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(_half_exact(p))
    g = torch.Generator().manual_seed(s["data_seed"])
    images = _half_exact(torch.randn(s["batches"], s["batch"], 3, TINY["img_size"], TINY["img_size"], generator=g))
    labels = torch.randint(0, TINY["num_classes"], (s["batches"], s["batch"]), generator=g)
    return model, images, labels


def train_steps(off, scenario: str) -> tuple[dict, dict]:
    """One official epoch of STEP["batches"] batches under SCENARIOS[scenario]."""
    from timm.data import Mixup
    from timm.loss import SoftTargetCrossEntropy
    from timm.utils import ModelEma

    s, sc = STEP, SCENARIOS[scenario]
    model, images, labels = tiny_model_and_batches(off, sc["use_mean_pooling"])
    shared = tiny_model_and_batches(off)[0].state_dict()
    renamed = {("fc_norm." + k[5:] if sc["use_mean_pooling"] and k.startswith("norm.") else k): v
               for k, v in shared.items()}
    mine = model.state_dict()
    if set(mine) != set(renamed) or any(not torch.equal(mine[k], renamed[k]) for k in mine):
        raise SystemExit(f"{scenario}: the initial weights are not the shared ones (renamed)")
    updates = s["batches"] // sc["update_freq"]  # num_training_steps_per_epoch
    args = argparse.Namespace(opt="adamw", weight_decay=s["weight_decay"], lr=s["lr"], opt_eps=1e-8, opt_betas=None,
                              momentum=0.9)
    depth = model.get_num_layers()
    assigner = off.optim_factory.LayerDecayValueAssigner(
        [s["layer_decay"] ** (depth + 1 - i) for i in range(depth + 2)])
    with quiet():
        optimizer = off.optim_factory.create_optimizer(args, model, skip_list=model.no_weight_decay(),
                                                       get_num_layer=assigner.get_layer_id,
                                                       get_layer_scale=assigner.get_scale)
        lr_values = off.utils.cosine_scheduler(s["lr"], s["min_lr"], s["epochs"], updates,
                                               warmup_epochs=s["warmup_epochs"], warmup_steps=-1)
        wd_values = off.utils.cosine_scheduler(s["weight_decay"], s["weight_decay_end"], s["epochs"], updates)
    mixup = Mixup(mixup_alpha=s["mixup"], cutmix_alpha=s["cutmix"], cutmix_minmax=None, prob=s["mixup_prob"],
                  switch_prob=s["mixup_switch_prob"], mode=s["mixup_mode"], label_smoothing=s["smoothing"],
                  num_classes=TINY["num_classes"])
    ema = ModelEma(model, decay=s["ema_decay"], device="", resume="")
    rec = _Recorder(off.utils.NativeScalerWithGradNormCount(), SoftTargetCrossEntropy(), model, optimizer)
    masks, targets, restore = _watch_draws(off, mixup)
    np.random.seed(s["draw_seed"])
    torch.manual_seed(s["draw_seed"])
    loader = [(images[i], labels[i]) for i in range(s["batches"])]
    try:
        with quiet():
            off.engine.train_one_epoch(model, rec.loss, loader, optimizer, torch.device("cpu"), 0, rec,
                                       max_norm=sc["max_norm"], model_ema=ema, mixup_fn=mixup, start_steps=0,
                                       lr_schedule_values=lr_values, wd_schedule_values=wd_values,
                                       num_training_steps_per_epoch=updates, update_freq=sc["update_freq"])
    finally:
        restore()
    groups = [{"lr_scale": grp["lr_scale"], "weight_decay_base": bool(grp["weight_decay"] > 0),
               "params": [n for n, p in model.named_parameters() if any(p is q for q in grp["params"])]}
              for grp in optimizer.param_groups]
    data = {**sc, "lr_schedule": [float(v) for v in lr_values], "wd_schedule": [float(v) for v in wd_values],
            "groups": groups, "micro_batches": [
                {"loss": rec.losses[i], "drop_path_keep": masks[i], "mixed_target": targets[i]}
                for i in range(s["batches"])],
            "updates": rec.updates, "ema_digest": digest(ema.ema)}
    arrays = {f"{scenario}/final/{n}": p.detach().numpy() for n, p in model.state_dict().items()}
    return data, arrays


def shared_arrays(off) -> dict:
    model, images, labels = tiny_model_and_batches(off)
    arrays = {"images": images.half().numpy(), "labels": labels.numpy()}
    arrays.update({f"initial/{n}": v.half().numpy() for n, v in model.state_dict().items()})
    return arrays


def _watch_draws(off, mixup):
    """Record, per step, every drop-path keep mask (in call order) and the mixed targets, by
    wrapping the two functions the official model and Mixup call (results unchanged)."""
    masks: list[list[list[int]]] = []
    targets: list[list[list[float]]] = []
    real_drop_path, real_call = off.modeling.drop_path, type(mixup).__call__

    def drop_path(x, drop_prob=0.0, training=False, *a, **k):
        out = real_drop_path(x, drop_prob, training, *a, **k)
        if training and drop_prob > 0:
            masks[-1].append((out.flatten(1).abs().sum(1) > 0).int().tolist())
        return out

    def call(self, x, target):
        masks.append([])
        x, mixed = real_call(self, x, target)
        targets.append(mixed.tolist())
        return x, mixed

    def restore():
        off.modeling.drop_path = real_drop_path
        type(mixup).__call__ = real_call

    off.modeling.drop_path = drop_path
    type(mixup).__call__ = call
    return masks, targets, restore


# ----------------------------------------------------------------------------- provenance / writing
def git_blob_sha1(path: Path) -> str:
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def checkout_commit(path: Path, given: str | None) -> str:
    try:
        found = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
                               check=True).stdout.strip()
        top = subprocess.run(["git", "-C", str(path), "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, check=True).stdout.strip()
        found = found if Path(top).resolve() == path else None
    except (subprocess.CalledProcessError, FileNotFoundError):
        found = None
    if given and found and given != found:
        raise SystemExit(f"--commit {given} but {path} is at {found}")
    if not (given or found):
        raise SystemExit(f"{path} is not a git work tree: pass --commit (40 hex characters)")
    return given or found


def provenance(args, what: dict) -> dict:
    import numpy
    import timm

    blobs = {f: git_blob_sha1(args.official / f) for f in official_ibot.OFFICIAL_FILES}
    return {"repository": official_ibot.REPOSITORY, "commit": args.commit, "generator": GENERATOR,
            "command": f"python {GENERATOR} <checkout of bytedance/ibot at {args.commit}> --commit {args.commit}",
            "official_files": blobs, "hyperparameters": what,
            "environment": {"python": platform.python_version(), "torch": torch.__version__, "timm": timm.__version__,
                            "numpy": numpy.__version__, "platform": platform.platform(),
                            "torch_threads": torch.get_num_threads(),
                            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")},
            "stand_ins": "see benchmarks/finetune/reference/official_ibot.py (torch._six, tensorboardX, "
                         "timm optimizers that left timm, CUDA-only calls on a CPU)"}


def _numbers(tree) -> list[float]:
    """Every number of a JSON tree, in order (booleans left out)."""
    if isinstance(tree, bool) or tree is None or isinstance(tree, str):
        return []
    if isinstance(tree, (int, float)):
        return [float(tree)]
    items = tree.values() if isinstance(tree, dict) else tree
    return [x for item in items for x in _numbers(item)]


def report_drift(path: Path, data: dict) -> None:
    """Before overwriting: the largest |new - committed| over the numbers (provenance aside), so a
    run on another machine shows how far its numbers are from the committed ones."""
    if not path.is_file():
        return
    old = json.loads(path.read_text())
    new = json.loads(json.dumps(data))
    a = _numbers({k: v for k, v in new.items() if k != "provenance"})
    b = _numbers({k: v for k, v in old.items() if k != "provenance"})
    if len(a) != len(b):
        print(f"{path.name}: {len(a)} numbers now, {len(b)} in the committed file")
        return
    print(f"{path.name}: max |new - committed| = {max((abs(x - y) for x, y in zip(a, b)), default=0.0):.3g}")


def write_json(path: Path, data: dict) -> None:
    report_drift(path, data)
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {path}")


def write_manifest(out: Path, names: list[str], commit: str) -> None:
    entries = {n: hashlib.sha256((out / n).read_bytes()).hexdigest() for n in sorted(names)}
    write_json(out / "MANIFEST.json", {"generator": GENERATOR, "official_commit": commit, "sha256": entries})


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("official", type=Path, help=f"a checkout of {official_ibot.REPOSITORY} "
                                                    f"(commit {official_ibot.COMMIT}), outside this repository")
    parser.add_argument("--commit", default=None, help="the checkout's commit when it is not a git work tree")
    parser.add_argument("--out", type=Path, default=FIXTURES)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    args.official = args.official.resolve()
    if args.official.is_relative_to(ROOT):
        parser.error("check the official code out outside this repository")
    args.commit = checkout_commit(args.official, args.commit)
    torch.set_num_threads(args.threads)
    off = official_ibot.load(args.official)
    args.out.mkdir(parents=True, exist_ok=True)

    groups = {arch: param_groups(off, arch) for arch in README}
    write_json(args.out / "ibot_param_groups.json",
               {"provenance": provenance(args, {"run_sh_imagenet_cls": RUN_SH_IMAGENET, "readme": README}),
                "models": groups})
    write_json(args.out / "ibot_schedules.json",
               {"provenance": provenance(args, {"steps_per_epoch": STEPS_PER_EPOCH}), "cases": schedule_cases(off)})
    write_json(args.out / "ibot_transforms.json",
               {"provenance": provenance(args, {"cases": TRANSFORM_CASES, "seeds": list(TRANSFORM_SEEDS),
                                                "image": "fixture_files.synthetic_photo(seed)"}),
                "cases": transform_cases(args.official)})
    arrays, scenarios = shared_arrays(off), {}
    for name in SCENARIOS:
        scenarios[name], more = train_steps(off, name)
        arrays.update(more)
    np.savez_compressed(args.out / "ibot_train_steps.npz", **arrays)
    print(f"wrote {args.out / 'ibot_train_steps.npz'}")
    data = {"provenance": provenance(args, {"model": TINY, "step": STEP, "scenarios": SCENARIOS}),
            "model": TINY, "norm_eps": 1e-6, "settings": STEP, "digest_indices": list(DIGEST_INDICES),
            "arrays": "ibot_train_steps.npz", "scenarios": scenarios}
    write_json(args.out / "ibot_train_steps.json", data)
    write_manifest(args.out, ["ibot_param_groups.json", "ibot_schedules.json", "ibot_transforms.json",
                              "ibot_train_steps.json", "ibot_train_steps.npz"], args.commit)


if __name__ == "__main__":
    main()
