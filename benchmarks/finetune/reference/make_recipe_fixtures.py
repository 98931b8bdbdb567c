"""Write the parity fixtures of the DeiT-style (iBOT transfer and semi-supervised) and SynCLR
fine-tuning recipes from the official code.

    python -m benchmarks.finetune.reference.make_recipe_fixtures --ibot /path/to/ibot \\
        --deit /path/to/deit --synclr /path/to/syn-rep-learn

The checkouts (bytedance/ibot, facebookresearch/deit, google-research/syn-rep-learn) stay outside
this repository. The official definitions are read from their files and run unmodified (a class or
function taken out of a script whose other imports are not needed: ``official_definition``);
timm's ``create_scheduler`` is the one the official scripts import. Three fixtures land in
benchmarks/finetune/fixtures/, their sha256 in MANIFEST.json (``made_by``):

- ``deit_schedules.json``: for each transfer / semi-supervised command of ``run.sh`` (+ the
  README's flags), the official ``get_args_parser`` defaults, the lr after eval_cls.py's
  ``x batch x 8 / 512``, and the lr each epoch trains at: timm's scheduler from
  ``create_scheduler(args, optimizer)``, read before each epoch and stepped with
  ``lr_scheduler.step(epoch)`` after it, as eval_cls.py's loop; plus short variants (12 epochs,
  with and without warm-up) that reach the cosine's end; and each parameter's weight decay in
  eval_cls.py's optimizer (timm's ``create_optimizer`` on iBOT's ``vit_small``);
- ``ra_sampler.json``: the indices each process draws from ``RASampler`` (iBOT's two copies and
  DeiT's ``samplers.py``) for a few data-set sizes, process counts and epochs, cut to whole
  batches as the loaders' ``drop_last``;
- ``synclr_schedules.json``: MAE's ``lr_sched.adjust_learning_rate`` as ``main_finetune.py``'s
  ``train_one_epoch`` calls it (before every ``accum_iter``-th iteration, at
  ``iter / len(loader) + epoch``) for EVALUATE.md's command at a few iterations an epoch, with and
  without accumulation; and ``util/datasets.build_transform``'s eval transform at 224 px (the
  normalisation mean / std, the Resize size and interpolation); and each parameter's lr scale and
  weight decay from ``util/lr_decay.param_groups_lrd`` on the ViT-B/16 it builds.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import math
from pathlib import Path

import torch

from benchmarks.finetune.reference.make_ibot_fixtures import (checkout_commit, git_blob_sha1, report_drift,
                                                             write_json)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
FIXTURES = HERE.parent / "fixtures"
GENERATOR = "benchmarks/finetune/reference/make_recipe_fixtures.py"
REPOSITORIES = {"ibot": "https://github.com/bytedance/ibot", "deit": "https://github.com/facebookresearch/deit",
                "synclr": "https://github.com/google-research/syn-rep-learn"}
FILES = {"ibot": ("run.sh", "evaluation/README.md", "evaluation/eval_cls.py", "evaluation/semi_supervised/eval_cls.py",
                  "models/vision_transformer.py"),
         "deit": ("samplers.py", "main.py"),
         "synclr": ("SynCLR/eval/EVALUATE.md", "SynCLR/eval/main_finetune.py", "SynCLR/eval/util/lr_sched.py",
                    "SynCLR/eval/util/datasets.py", "SynCLR/eval/util/lr_decay.py", "SynCLR/eval/models_vit.py")}
GPUS = 8  # run.sh / the README run on 8 GPUs; eval_cls.py scales the lr by batch x GPUs / 512
# run.sh's eval_cls.py flags per command (--data_set / --data_path left out: the parser accepts
# CIFAR / IMNET / image_folder only, and the data set does not enter the schedule); the ViT-S
# iNat lrs are the README's note; the semi-supervised command is the README's.
COMMANDS = {
    "cifar_cls": ["--batch-size", "96", "--lr", "7.5e-6", "--epochs", "1000"],
    "cifar10_cls": ["--batch-size", "96", "--lr", "7.5e-6", "--epochs", "1000"],
    "flwrs_cls": ["--batch-size", "96", "--lr", "7.5e-6", "--epochs", "1000"],
    "cars_cls": ["--batch-size", "96", "--lr", "7.5e-5", "--epochs", "1000"],
    "inat_cls": ["--batch-size", "96", "--lr", "7.5e-6", "--epochs", "360", "--reprob", "0.1"],
    "inat19_cls": ["--batch-size", "96", "--lr", "7.5e-6", "--epochs", "360", "--reprob", "0.1"],
    "inat_cls_vit_small": ["--batch-size", "96", "--lr", "5e-5", "--epochs", "360", "--reprob", "0.1"],
    "inat19_cls_vit_small": ["--batch-size", "96", "--lr", "2.5e-5", "--epochs", "360", "--reprob", "0.1"],
    "imagenet_semi_cls": ["--epochs", "1000", "--lr", "5e-6"],
    "short_warmup": ["--batch-size", "96", "--lr", "5e-4", "--epochs", "12", "--min-lr", "1e-6"],
    "short_no_warmup": ["--batch-size", "96", "--lr", "5e-4", "--epochs", "12", "--warmup-epochs", "0"],
}
# the script whose parser reads each command (run.sh imagenet_semi_cls runs the semi-supervised copy)
SCRIPT = {"imagenet_semi_cls": "evaluation/semi_supervised/eval_cls.py"}
RA_CASES = [dict(n=1000, world=1, batch=64, epochs=[0, 3]), dict(n=1000, world=2, batch=64, epochs=[0, 3]),
            dict(n=1000, world=8, batch=64, epochs=[0, 3]), dict(n=300, world=1, batch=32, epochs=[7]),
            dict(n=50000, world=8, batch=768, epochs=[0, 1])]
SYNCLR_FLAGS = ["--batch_size", "128", "--seed", "0", "--model", "vit_base_patch16", "--epochs", "100",
                "--warmup_epochs", "20", "--blr", "5e-5", "--layer_decay", "0.65", "--weight_decay", "0.05",
                "--drop_path", "0.1", "--reprob", "0.25", "--mixup", "0.8", "--cutmix", "1.0", "--dist_eval",
                "--nb_classes", "1000", "--num_workers", "10", "--cls_token", "--crop_pct", "0.95", "--model_ema",
                "--model_ema_eval", "--model_ema_decay", "0.9999"]
SYNCLR_LOOPS = [dict(loader_len=7, accum_iter=1), dict(loader_len=14, accum_iter=2)]


def official_definition(path: Path, name: str, namespace: dict):
    """The top-level class or function ``name`` of an official file, executed as written in
    ``namespace`` (the names it uses), without running the rest of the file."""
    source = path.read_text()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
            exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), namespace)
            return namespace[name]
    raise SystemExit(f"{path} defines no {name}")


def deit_schedules(ibot: Path) -> dict:
    from timm.scheduler import create_scheduler

    out = {}
    for name, flags in COMMANDS.items():
        script = SCRIPT.get(name, "evaluation/eval_cls.py")
        parser_fn = official_definition(ibot / script, "get_args_parser", {"argparse": argparse})
        args = argparse.ArgumentParser(parents=[parser_fn()]).parse_args(flags)
        args.lr = args.lr * args.batch_size * GPUS / 512.0  # eval_cls.py main()
        optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=args.lr)
        scheduler, _ = create_scheduler(args, optimizer)
        lrs = []
        for epoch in range(args.epochs):  # eval_cls.py: train the epoch, then lr_scheduler.step(epoch)
            lrs.append(optimizer.param_groups[0]["lr"])
            scheduler.step(epoch)
        out[name] = {"script": script, "flags": flags, "lr": args.lr,
                     "min_lr": args.min_lr, "warmup_lr": args.warmup_lr,
                     "warmup_epochs": args.warmup_epochs, "epochs": args.epochs, "batch_size": args.batch_size,
                     "gpus": GPUS, "repeated_aug": args.repeated_aug, "sched": args.sched, "epoch_lr": lrs}
    return out


def transfer_weight_decay(ibot: Path) -> dict:
    """Each parameter's weight decay in eval_cls.py's optimizer: timm's ``create_optimizer(args,
    model)`` on iBOT's ``vit_small`` (run.sh AVGPOOL=0) with the 100-way head eval_cls.py sets."""
    import importlib

    from timm.optim import create_optimizer

    from benchmarks.finetune.reference.official_ibot import official_on_path

    official_on_path(ibot)  # models/ imports the checkout's top-level utils by bare name
    models = importlib.import_module("models")
    if not Path(models.__file__).resolve().is_relative_to(ibot):
        raise SystemExit(f"models was imported from {models.__file__}, not from {ibot}")
    parser_fn = official_definition(ibot / "evaluation/eval_cls.py", "get_args_parser", {"argparse": argparse})
    args = argparse.ArgumentParser(parents=[parser_fn()]).parse_args(COMMANDS["cifar_cls"])
    model = models.vit_small(patch_size=16, drop_path_rate=args.drop_path, use_mean_pooling=0)
    model.head = torch.nn.Linear(model.embed_dim, 100)
    optimizer = create_optimizer(args, model)
    names = {id(p): n for n, p in model.named_parameters()}
    return {"opt": args.opt, "weight_decay": args.weight_decay,
            "has_no_weight_decay": hasattr(model, "no_weight_decay"),
            "params": {names[id(p)]: g["weight_decay"] for g in optimizer.param_groups for p in g["params"]}}


def ra_sampler(ibot: Path, deit: Path) -> dict:
    namespace = {"torch": torch, "math": math, "dist": torch.distributed}
    samplers = {"ibot/evaluation/eval_cls.py": official_definition(ibot / "evaluation/eval_cls.py", "RASampler",
                                                                    dict(namespace)),
                "ibot/evaluation/semi_supervised/eval_cls.py": official_definition(
                    ibot / "evaluation/semi_supervised/eval_cls.py", "RASampler", dict(namespace)),
                "deit/samplers.py": official_definition(deit / "samplers.py", "RASampler", dict(namespace))}
    cases = []
    for case in RA_CASES:
        per = case["batch"] // case["world"]
        for epoch in case["epochs"]:
            drawn = {}
            for source, cls in samplers.items():
                ranks = []
                for rank in range(case["world"]):
                    s = cls(range(case["n"]), num_replicas=case["world"], rank=rank, shuffle=True)
                    s.set_epoch(epoch)
                    order = list(iter(s))
                    ranks.append(order[:len(order) // per * per])  # the loader's drop_last
                drawn[source] = ranks
            first = drawn["ibot/evaluation/eval_cls.py"]
            if any(v != first for v in drawn.values()):
                raise SystemExit(f"the official RASamplers disagree on {case} epoch {epoch}")
            row = {**{k: v for k, v in case.items() if k != "epochs"}, "epoch": epoch, "agree": sorted(drawn)}
            if case["n"] <= 1000:
                row["ranks"] = first
            else:
                row["ranks_sha256"] = [hashlib.sha256(json.dumps(r).encode()).hexdigest() for r in first]
                row["ranks_len"] = [len(r) for r in first]
                row["ranks_head"] = [r[:12] for r in first]
            cases.append(row)
    return {"cases": cases}


def synclr(checkout: Path) -> dict:
    import PIL
    from timm.data import create_transform
    from torchvision import transforms

    folder = checkout / "SynCLR/eval"
    parser_fn = official_definition(folder / "main_finetune.py", "get_args_parser", {"argparse": argparse})
    adjust = official_definition(folder / "util/lr_sched.py", "adjust_learning_rate", {"math": math})
    loops = []
    for loop in SYNCLR_LOOPS:
        args = argparse.ArgumentParser(parents=[parser_fn()]).parse_args(SYNCLR_FLAGS)
        args.accum_iter = loop["accum_iter"]
        eff = args.batch_size * args.accum_iter * GPUS
        args.lr = args.blr * eff / 256 if args.lr is None else args.lr  # main_finetune.py main()
        optimizer = torch.optim.AdamW([{"params": [torch.nn.Parameter(torch.zeros(1))], "lr_scale": 1.0},
                                       {"params": [torch.nn.Parameter(torch.zeros(1))], "lr_scale": 0.65 ** 3}])
        lrs, scaled = [], []
        for epoch in range(args.epochs):
            for it in range(loop["loader_len"]):
                if it % args.accum_iter == 0:  # main_finetune.train_one_epoch
                    adjust(optimizer, it / loop["loader_len"] + epoch, args)
                    lrs.append(optimizer.param_groups[0]["lr"])
                    scaled.append(optimizer.param_groups[1]["lr"])
        loops.append({**loop, "effective_batch": eff, "lr": args.lr, "blr": args.blr, "min_lr": args.min_lr,
                      "epochs": args.epochs, "warmup_epochs": args.warmup_epochs, "lr_scale_1": 0.65 ** 3,
                      "step_lr": lrs, "step_lr_scaled": scaled})
    build = official_definition(folder / "util/datasets.py", "build_transform",
                                {"create_transform": create_transform, "transforms": transforms, "PIL": PIL})
    args = argparse.ArgumentParser(parents=[parser_fn()]).parse_args(SYNCLR_FLAGS)
    t = build(False, args).transforms
    norm = [s for s in t if isinstance(s, transforms.Normalize)][0]
    resize = [s for s in t if isinstance(s, transforms.Resize)][0]
    ev = {"mean": list(norm.mean), "std": list(norm.std), "resize": resize.size,
          "interpolation": resize.interpolation.value, "input_size": args.input_size, "crop_pct": args.crop_pct,
          "inception_norm": args.inception_norm}
    return {"flags": SYNCLR_FLAGS, "loops": loops, "eval_transform": ev, "param_groups": synclr_groups(folder, args)}


def synclr_groups(folder: Path, args) -> dict:
    """Each parameter's lr scale and weight decay from MAE's ``util/lr_decay.param_groups_lrd`` on
    ``models_vit.vit_base_patch16`` built as ``main_finetune.py`` builds it for EVALUATE.md's flags."""
    import importlib

    from benchmarks.finetune.reference.official_ibot import official_on_path

    official_on_path(folder)
    models_vit = importlib.import_module("models_vit")
    if not Path(models_vit.__file__).resolve().is_relative_to(folder):
        raise SystemExit(f"models_vit was imported from {models_vit.__file__}, not from {folder}")
    namespace: dict = {}
    official_definition(folder / "util/lr_decay.py", "get_layer_id_for_vit", namespace)
    groups_fn = official_definition(folder / "util/lr_decay.py", "param_groups_lrd", namespace)
    model = models_vit.__dict__[args.model](num_classes=args.nb_classes, drop_path_rate=args.drop_path,
                                            global_pool=args.global_pool)
    groups = groups_fn(model, args.weight_decay, no_weight_decay_list=model.no_weight_decay(),
                       layer_decay=args.layer_decay)
    names = {id(p): n for n, p in model.named_parameters()}
    return {"global_pool": args.global_pool, "layer_decay": args.layer_decay,
            "params": {names[id(p)]: [g["lr_scale"], g["weight_decay"]] for g in groups for p in g["params"]}}


def provenance(args, commits: dict, names: tuple, what: dict) -> dict:
    import timm

    files = {f"{k}/{f}": git_blob_sha1(getattr(args, k) / f) for k in names for f in FILES[k]}
    checkouts = " ".join(f"--{k} <checkout of {REPOSITORIES[k]} at {commits[k]}>" for k in names)
    return {"repositories": {k: REPOSITORIES[k] for k in names}, "commits": {k: commits[k] for k in names},
            "generator": GENERATOR, "command": f"python {GENERATOR} {checkouts}", "official_files": files,
            "hyperparameters": what,
            "environment": {"torch": torch.__version__, "timm": timm.__version__}}


def write_manifest(out: Path, names: list[str], commits: dict) -> None:
    """Add these files to MANIFEST.json (the other generator's entries stay)."""
    path = out / "MANIFEST.json"
    data = json.loads(path.read_text())
    for n in names:
        data["sha256"][n] = hashlib.sha256((out / n).read_bytes()).hexdigest()
        data.setdefault("made_by", {})[n] = {"generator": GENERATOR, "commits": commits}
    data["sha256"] = dict(sorted(data["sha256"].items()))
    report_drift(path, data)
    path.write_text(json.dumps(data, indent=1) + "\n")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    for key, repo in REPOSITORIES.items():
        parser.add_argument(f"--{key}", type=Path, required=True, help=f"a checkout of {repo}, outside this repository")
    parser.add_argument("--out", type=Path, default=FIXTURES)
    args = parser.parse_args(argv)
    commits = {}
    for key in REPOSITORIES:
        setattr(args, key, getattr(args, key).resolve())
        if getattr(args, key).is_relative_to(ROOT):
            parser.error("check the official code out outside this repository")
        commits[key] = checkout_commit(getattr(args, key), None)
    torch.set_num_threads(1)
    write_json(args.out / "deit_schedules.json",
               {"provenance": provenance(args, commits, ("ibot",), {"commands": COMMANDS, "gpus": GPUS}),
                "commands": deit_schedules(args.ibot), "vit_small_weight_decay": transfer_weight_decay(args.ibot)})
    write_json(args.out / "ra_sampler.json",
               {"provenance": provenance(args, commits, ("ibot", "deit"), {"cases": RA_CASES}),
                **ra_sampler(args.ibot, args.deit)})
    write_json(args.out / "synclr_schedules.json",
               {"provenance": provenance(args, commits, ("synclr",), {"loops": SYNCLR_LOOPS, "gpus": GPUS}),
                **synclr(args.synclr)})
    write_manifest(args.out, ["deit_schedules.json", "ra_sampler.json", "synclr_schedules.json"], commits)


if __name__ == "__main__":
    main()
