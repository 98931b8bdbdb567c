"""Import iBOT's fine-tuning code (bytedance/ibot ``evaluation/classification_layer_decay/``)
from a checkout outside this repository and run it, unmodified, under this project's
torch / timm on a CPU.

The official files were written for torch 1.7 / a 2021 timm. What they import that no longer
exists is provided here as stand-ins registered in ``sys.modules`` before the import; what a
CPU lacks is made a no-op. Each stand-in is listed with why it cannot change a number:

- ``torch._six`` (removed from torch): ``utils.py`` takes ``inf`` from it, for the inf-norm
  branch of ``get_grad_norm_`` (the recipe uses the 2-norm); ``math.inf`` is the same value.
- ``tensorboardX``: ``utils.TensorboardLogger`` only; no logger is built here.
- optimizers that left or were renamed in timm (``timm.optim.novograd.NovoGrad``,
  ``timm.optim.nadam.Nadam``, ``timm.optim.radam.RAdam``): ``optim_factory`` imports them for
  its ``--opt`` branches; the recipe's optimizer is torch's AdamW, so each stand-in refuses to be
  built.
- ``torch.cuda.synchronize`` (called after every step) is a no-op without CUDA.
- ``torch.cuda.amp.GradScaler`` disables itself without CUDA, and a disabled scaler's
  ``state_dict()`` is empty, while ``train_one_epoch`` reads ``state_dict()["scale"]``; the
  stand-in is the same disabled scaler (scale, unscale and update are identities, ``step`` is
  ``optimizer.step()``) whose state reports scale 1.0. ``torch.cuda.amp.autocast`` without
  CUDA disables itself (float32), as it is.

For the transforms (the speed benchmark): Pillow >= 11 refuses ``posterize`` to 0 bits, which
RandAugment's ``inc1`` reaches at magnitude 10; with the Pillow of the official code it gave a
black image. :func:`posterize_zero_bits_black` makes an official transform do that.

Everything else is the official code and the installed timm (``Mixup``, ``drop_path``,
``trunc_normal_``, ``ModelEma``, ``SoftTargetCrossEntropy``) and torch (``AdamW``).
"""
from __future__ import annotations

import math
import sys
import types
from pathlib import Path

FOLDER = "evaluation/classification_layer_decay"
# what the generator and the benchmark run, relative to the checkout
OFFICIAL_FILES = (f"{FOLDER}/optim_factory.py", f"{FOLDER}/utils.py", f"{FOLDER}/engine_for_finetuning.py",
                  f"{FOLDER}/modeling_finetune.py", f"{FOLDER}/run_class_finetuning.py", "loader.py")
# bytedance/ibot's last commit (the README's commands and the files above)
COMMIT = "da316d82636a7a7356835ef224b13d5f3ace0489"
REPOSITORY = "https://github.com/bytedance/ibot"


def _module(name: str, **attrs) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    return mod


class _OptimizerUnavailable:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("this optimizer left timm; the fine-tuning recipes use torch's AdamW")


# (module, name) that optim_factory imports and the installed timm no longer has
_GONE_OPTIMIZERS = (("timm.optim.novograd", "NovoGrad"), ("timm.optim.nadam", "Nadam"), ("timm.optim.radam", "RAdam"))


class _SummaryWriterUnavailable:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("tensorboardX is not installed; no official logger is built here")


def _install_stand_ins() -> None:
    import torch

    sys.modules.setdefault("torch._six", _module("torch._six", inf=math.inf, string_classes=(str,)))
    sys.modules.setdefault("tensorboardX", _module("tensorboardX", SummaryWriter=_SummaryWriterUnavailable))
    import importlib

    for module, name in _GONE_OPTIMIZERS:
        try:
            mod = importlib.import_module(module)
        except ImportError:
            mod = sys.modules[module] = _module(module)
        if not hasattr(mod, name):
            setattr(mod, name, _OptimizerUnavailable)
    if not torch.cuda.is_available():
        torch.cuda.synchronize = lambda *a, **k: None
        torch.cuda.amp.GradScaler = _CpuScaler


class _CpuScaler:
    """torch's GradScaler disabled, as ``torch.cuda.amp.GradScaler()`` is without CUDA, but
    with a state that holds the scale ``train_one_epoch`` logs."""

    def __init__(self, *args, **kwargs):
        import torch

        self._inner = torch.amp.GradScaler("cpu", enabled=False)

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def state_dict(self):
        return {"scale": 1.0}


def official_on_path(*folders: Path) -> None:
    """The official folders first on ``sys.path``, the last given first of all (they live outside
    this repository and import each other by bare name)."""
    for path in map(str, folders):
        if path in sys.path:
            sys.path.remove(path)
        sys.path.insert(0, path)


def load(checkout: Path) -> types.SimpleNamespace:
    """The official modules, imported from ``checkout`` (a bytedance/ibot tree):
    ``optim_factory``, ``utils``, ``engine`` (engine_for_finetuning), ``modeling``
    (modeling_finetune). The folder goes first on ``sys.path`` because the files import each
    other by bare name (``import utils``), and the checkout's root has a ``utils.py`` of its own."""
    checkout = Path(checkout).resolve()
    folder = checkout / FOLDER
    if not (folder / "engine_for_finetuning.py").is_file():
        raise SystemExit(f"{checkout} is not a checkout of {REPOSITORY} (no {FOLDER}/engine_for_finetuning.py)")
    _install_stand_ins()
    official_on_path(checkout, folder)
    import importlib

    mods = {key: importlib.import_module(name) for key, name in
            (("optim_factory", "optim_factory"), ("utils", "utils"), ("engine", "engine_for_finetuning"),
             ("modeling", "modeling_finetune"))}
    for mod in mods.values():
        if not Path(mod.__file__).resolve().is_relative_to(folder):
            raise SystemExit(f"{mod.__name__} was imported from {mod.__file__}, not from {folder}")
    return types.SimpleNamespace(**mods, checkout=checkout)


def load_runner(checkout: Path):
    """``run_class_finetuning`` (argument parser, ``build_transform``), imported by its package
    path as ``run.sh`` runs it from the checkout's root."""
    import importlib

    load(checkout)
    return importlib.import_module("run_class_finetuning")


def official_args(checkout: Path, argv: list[str]):
    """The official argument namespace for ``argv`` (the README / run.sh flags), from the
    script's own parser."""
    runner = load_runner(checkout)
    saved = sys.argv
    sys.argv = ["run_class_finetuning.py", *argv]
    try:
        args, _ = runner.get_args()
    finally:
        sys.argv = saved
    return args


def _posterize(img, bits_to_keep, **kwargs):
    """timm's posterize, except 0 bits kept: a black image, as Pillow < 11 gave."""
    from PIL import Image
    from timm.data import auto_augment

    if int(bits_to_keep) <= 0:
        return Image.new(img.mode, img.size)
    return auto_augment.posterize(img, bits_to_keep, **kwargs)


def posterize_zero_bits_black(transform) -> None:
    """Point every RandAugment posterize op of ``transform`` (a torchvision Compose) at
    :func:`_posterize`."""
    from timm.data import auto_augment

    for step in getattr(transform, "transforms", []):
        for op in getattr(step, "ops", []):
            if getattr(op, "aug_fn", None) is auto_augment.posterize:
                op.aug_fn = _posterize
