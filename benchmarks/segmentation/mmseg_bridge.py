"""Everything that touches mmsegmentation: harness ViT weights -> mmseg's
``VisionTransformer``, the data sets as mmseg reads them, the mmengine config of one run
and its run, and the learning-rate sweep.

The segmentation protocols are CrIBo's (Tables 2 and 3), which run mmsegmentation 1.x's
Segmenter configs through mmengine's Runner; so do these, with the configs generated here
from the protocols' dataclass settings (benchmarks/segmentation/config.py) instead of Python
config files. Sources of every default: benchmarks/segmentation/config.py and docs/protocols/segmentation.md.

Weights: the key map is CrIBo's ``segmentation/tools/model_converters/dinovit2mmseg.py`` (a DINO /
timm-named ViT into mmseg 1.x names), written here as an explicit table so that every key
is accounted for: a key the table does not know is an error instead of a silently
ignored entry, and loading into the mmseg model is strict (CrIBo's and mmseg's
``init_weights`` load with ``strict=False``, which loads nothing for a wrong prefix).

    norm.*                      -> ln1.*                        (final norm)
    patch_embed.proj.*          -> patch_embed.projection.*
    blocks.i.norm1/2.*          -> layers.i.ln1/2.*
    blocks.i.attn.qkv.weight    -> layers.i.attn.attn.in_proj_weight   (q, k, v stacked alike)
    blocks.i.attn.qkv.bias      -> layers.i.attn.attn.in_proj_bias
    blocks.i.attn.proj.*        -> layers.i.attn.attn.out_proj.*
    blocks.i.mlp.fc1.*          -> layers.i.ffn.layers.0.0.*
    blocks.i.mlp.fc2.*          -> layers.i.ffn.layers.1.*
    cls_token, pos_embed        -> unchanged (pos_embed resized to the crop's grid)

The mmseg backbone is configured to return what the protocols read in the harness: the
final-normed last-layer patch tokens (``final_norm=True``, ``out_indices=[depth-1]``,
``with_cls_token=True`` so the CLS token takes part in attention, then is dropped). The
test suite checks those features equal ``ViTBackbone.get_features(...).patches`` to 1e-5.

Only ``torch`` is imported at module level; everything that needs mmcv / mmengine /
mmseg is built inside functions (``register_mmseg_modules``, ``register_metric``, ...): the
rest of the harness never imports them, and a missing install surfaces as
:class:`MissingDependencyError` naming the install command.
"""
from __future__ import annotations

import contextlib
import csv
import logging
import math
import os
import pickle
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from benchmarks.segmentation import mmengine_log
from benchmarks.segmentation.layouts import MmsegLayout, mmseg_layout
from harness.models.checkpoints import state_mismatch
from harness.errors import CheckpointError, ConfigError, DataError, MissingDependencyError

if TYPE_CHECKING:
    from benchmarks.segmentation.config import SegConfig

log = logging.getLogger(__name__)

INSTALL_COMMAND = "bash scripts/install_mmcv.sh"
MMSEG_VERSION = "1.2.2"


# ============================================================================ weights
# (timm-name pattern, mmseg-name template); applied to the name after an optional
# "backbone." prefix is stripped.
_KEY_MAP: tuple[tuple[str, str], ...] = (
    (r"cls_token", "cls_token"),
    (r"pos_embed", "pos_embed"),
    # the trained table of a checkpoint imported at another size (harness.models.backbone.ARCH_KEYS)
    (r"pos_embed_native", "pos_embed_native"),
    (r"patch_embed\.proj\.(weight|bias)", r"patch_embed.projection.\1"),
    (r"norm\.(weight|bias)", r"ln1.\1"),
    (r"blocks\.(\d+)\.norm([12])\.(weight|bias)", r"layers.\1.ln\2.\3"),
    (r"blocks\.(\d+)\.attn\.qkv\.(weight|bias)", r"layers.\1.attn.attn.in_proj_\2"),
    (r"blocks\.(\d+)\.attn\.proj\.(weight|bias)", r"layers.\1.attn.attn.out_proj.\2"),
    (r"blocks\.(\d+)\.mlp\.fc1\.(weight|bias)", r"layers.\1.ffn.layers.0.0.\2"),
    (r"blocks\.(\d+)\.mlp\.fc2\.(weight|bias)", r"layers.\1.ffn.layers.1.\2"),
)
_COMPILED = tuple((re.compile(p + r"\Z"), t) for p, t in _KEY_MAP)
# Keys of pretraining checkpoints that evaluation does not use (CrIBo's converter drops
# head*; mask_token is iBOT's student-only masked embedding).
_DROPPED = re.compile(r"(head\.|head_|mask_token\Z)")


def map_key(key: str) -> str | None:
    """mmseg name of a timm/DINO name; None for keys evaluation drops; error if unknown."""
    if key.startswith("backbone."):
        key = key[len("backbone."):]
    if _DROPPED.match(key):
        return None
    for pattern, template in _COMPILED:
        if pattern.match(key):
            return pattern.sub(template, key)
    raise CheckpointError(
        f"backbone key {key!r} has no mmseg VisionTransformer counterpart; the mmseg protocols "
        f"support plain ViTs (CLS token, absolute position embeddings, no register tokens, "
        f"no fc_norm). Expected keys like cls_token, pos_embed, patch_embed.proj.*, "
        f"blocks.i.{{norm1,attn.qkv,attn.proj,norm2,mlp.fc1,mlp.fc2}}.*, norm.*")


def convert_state_dict(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """timm / DINO-layout ViT state dict -> mmseg ``VisionTransformer`` state dict."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        new = map_key(key)
        if new is None:
            continue
        if new in out:
            raise CheckpointError(f"two checkpoint keys map to {new!r} (one is {key!r}); is the "
                                  f"'backbone.' prefix present on only some keys?")
        out[new] = value
    return out


def describe_vit(state_dict: dict[str, torch.Tensor]) -> dict:
    """Architecture read off a timm-named ViT state dict (everything but the head count)."""
    sd = {k[len("backbone."):] if k.startswith("backbone.") else k: v for k, v in state_dict.items()}
    required = ("cls_token", "pos_embed", "patch_embed.proj.weight", "norm.weight")
    missing = [k for k in required if k not in sd]
    if missing:
        raise CheckpointError(f"not a ViT state dict with a CLS token and a final norm: missing {missing}")
    if "reg_token" in sd:
        raise CheckpointError("register tokens are not supported by mmseg's VisionTransformer")
    depth = 1 + max((int(m.group(1)) for k in sd if (m := re.match(r"blocks\.(\d+)\.", k))), default=-1)
    if depth == 0:
        raise CheckpointError("no transformer blocks (blocks.i.*) in the state dict")
    embed_dim = sd["cls_token"].shape[-1]
    patch = sd["patch_embed.proj.weight"].shape[-1]
    n_pos = sd["pos_embed"].shape[1]
    side = math.isqrt(n_pos - 1)
    if side * side != n_pos - 1:
        raise CheckpointError(f"pos_embed holds {n_pos} tokens: expected 1 (CLS) + a square grid; "
                              f"checkpoints without a CLS position (no_embed_class) are not supported")
    hidden = sd["blocks.0.mlp.fc1.weight"].shape[0]
    return {
        "embed_dims": int(embed_dim),
        "num_layers": int(depth),
        "patch_size": int(patch),
        "mlp_ratio": hidden / embed_dim,
        "qkv_bias": "blocks.0.attn.qkv.bias" in sd,
        "pos_grid": (side, side),
        "patch_bias": "patch_embed.proj.bias" in sd,
    }


def backbone_kwargs(state_dict: dict[str, torch.Tensor], num_heads: int, crop_size: int,
                    drop_path_rate: float) -> dict:
    """mmseg ``VisionTransformer`` settings equal to the harness ViT that ``state_dict`` is from.

    Matches Segmenter's mmseg configs (LN eps 1e-6, final_norm, CLS token, bicubic position
    resizing) with ``img_size`` = the crop, so the stored position embeddings are resized
    once, at load, to the crop's grid (as mmseg does for CrIBo's converted checkpoints).
    """
    arch = describe_vit(state_dict)
    mlp_ratio = arch["mlp_ratio"]
    if abs(mlp_ratio - round(mlp_ratio)) > 1e-9:
        raise CheckpointError(f"mlp ratio {mlp_ratio} is not an integer; mmseg's ViT needs one")
    if crop_size % arch["patch_size"]:
        raise CheckpointError(f"crop {crop_size} is not a multiple of the patch size {arch['patch_size']}")
    if arch["embed_dims"] % num_heads:
        raise CheckpointError(f"embed dim {arch['embed_dims']} is not divisible by {num_heads} heads")
    return dict(
        img_size=(crop_size, crop_size),
        patch_size=arch["patch_size"],
        in_channels=3,
        embed_dims=arch["embed_dims"],
        num_layers=arch["num_layers"],
        num_heads=num_heads,
        mlp_ratio=int(round(mlp_ratio)),
        out_indices=[arch["num_layers"] - 1],  # the last block's output ...
        final_norm=True,                       # ... after the final norm
        with_cls_token=True,
        output_cls_token=False,
        qkv_bias=arch["qkv_bias"],
        patch_bias=arch["patch_bias"],
        drop_rate=0.0,
        attn_drop_rate=0.0,
        drop_path_rate=drop_path_rate,
        norm_cfg=dict(type="LN", eps=1e-6, requires_grad=True),
        act_cfg=dict(type="GELU"),
        interpolate_mode="bicubic",
    )


def save_converted(state_dict: dict[str, torch.Tensor], path: Path) -> Path:
    """Write the converted weights as safetensors (no pickle) for the mmseg backbone to load."""
    from safetensors.torch import save_file

    from harness.io_utils import atomic_write

    converted = {k: v.detach().to("cpu").contiguous() for k, v in convert_state_dict(state_dict).items()}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda p: save_file(converted, str(p)))
    return path


def load_strict(module: torch.nn.Module, state: dict[str, torch.Tensor], source: str) -> None:
    """``load_state_dict`` that names missing / unexpected keys and shape mismatches."""
    problem = state_mismatch(module.state_dict(), state)
    if problem:
        raise CheckpointError(f"{source} does not fit the mmseg VisionTransformer: {problem}")
    module.load_state_dict(state, strict=True)


# ============================================================================ mmseg backbone (lazy)
_REGISTERED = False


def register_mmseg_modules() -> None:
    """Register ``SslBenchViT`` in mmseg's MODELS registry (idempotent)."""
    global _REGISTERED
    if _REGISTERED:
        return
    from mmseg.models.backbones import VisionTransformer
    from mmseg.registry import MODELS

    class SslBenchViT(VisionTransformer):
        """mmseg's ViT that loads harness weights strictly and can be frozen.

        ``weights``: safetensors file from :func:`save_converted`, loaded in
        ``init_weights`` (which mmengine's Runner calls before resuming, so a resumed run
        overwrites them with its own checkpoint). ``frozen``: no gradients (the forward runs
        under ``no_grad``), and ``frozen_mode`` says what ``train()`` does to it:

        - "train": the module follows ``train()`` as any other, CrIBo's behaviour: its
          FreezableVisionTransformer puts the frozen stages in eval mode once, at
          construction (segmentation/models/freezable_vision_transformer.py:291-326), and
          mmengine's loop calls ``model.train()`` before every iteration, which turns its
          DropPath back on -- the head trains on stochastic-depth features;
        - "eval": the module stays in eval mode whatever ``train()`` is called with:
          deterministic features.
        """

        def __init__(self, weights: str | None = None, frozen: bool = False, frozen_mode: str = "eval",
                     **kwargs):
            if frozen_mode not in ("train", "eval"):
                raise ValueError(f"frozen_mode must be 'train' or 'eval', found {frozen_mode!r}")
            super().__init__(**kwargs)
            self.weights = weights
            self.frozen = frozen
            self.frozen_mode = frozen_mode
            if frozen:
                for p in self.parameters():
                    p.requires_grad_(False)
                self.eval()

        def init_weights(self):
            if self.weights is None:  # mmseg's own random init
                return super().init_weights()
            _load_weights(self)

        def train(self, mode: bool = True):
            super().train(mode and not (self.frozen and self.frozen_mode == "eval"))
            return self

        def forward(self, inputs):
            if self.frozen:
                with torch.no_grad():
                    return super().forward(inputs)
            return super().forward(inputs)

    SslBenchViT.__module__ = __name__
    MODELS.register_module(name="SslBenchViT", module=SslBenchViT, force=True)
    globals()["SslBenchViT"] = SslBenchViT
    _REGISTERED = True


def _load_weights(vit) -> None:
    """``SslBenchViT.init_weights`` with weights: its safetensors file, loaded strictly, the
    position table resized to the configured grid."""
    from safetensors.torch import load_file

    state = load_file(vit.weights)
    native = state.pop("pos_embed_native", None)
    pos = state.get("pos_embed")
    if pos is not None and pos.shape != vit.pos_embed.shape:
        # resize once, from the trained grid, not from a table already resized at import
        pos = pos if native is None else native
        side = math.isqrt(pos.shape[1] - 1)
        grid = (vit.img_size[0] // vit.patch_size, vit.img_size[1] // vit.patch_size)
        # mmseg's resize (bicubic, align_corners=False, to the exact grid), the one
        # its init_weights applies to CrIBo's converted checkpoints.
        state["pos_embed"] = vit.resize_pos_embed(pos, grid, (side, side), vit.interpolate_mode)
    with torch.no_grad():
        load_strict(vit, state, vit.weights)
    vit._is_init = True


# ============================================================================ dependency
def require_mmseg() -> None:
    """Import the mmseg stack or raise :class:`MissingDependencyError` saying how to install it."""
    try:
        import mmcv
        import mmcv.ops  # noqa: F401  (needs the compiled extension)
        import mmengine  # noqa: F401
        import mmseg
        import mmseg.models  # noqa: F401
    except (ImportError, OSError) as exc:
        raise MissingDependencyError(
            f"the segmentation protocols need mmcv {'2.1.0'} with compiled ops, mmengine 0.10.7 and "
            f"mmsegmentation {MMSEG_VERSION}; importing them failed ({type(exc).__name__}: {exc}). "
            f"Install them with `{INSTALL_COMMAND}` (uses a prebuilt wheel from $MMCV_WHEEL_DIR "
            f"when set, else compiles mmcv, ~30 min on 2 cores)") from exc
    except AssertionError as exc:  # mmseg asserts the mmcv / mmengine version range on import
        raise MissingDependencyError(
            f"installed mmcv/mmengine do not fit mmsegmentation {MMSEG_VERSION} ({exc}); "
            f"run `{INSTALL_COMMAND} --force`") from exc
    if mmseg.__version__ != MMSEG_VERSION or not mmcv.__version__.startswith("2.1."):
        raise MissingDependencyError(
            f"found mmseg {mmseg.__version__} / mmcv {mmcv.__version__}, the protocols are pinned "
            f"to mmseg {MMSEG_VERSION} / mmcv 2.1.x; run `{INSTALL_COMMAND} --force`")



# ============================================================================ data sets
@dataclass
class ResolvedData:
    """Where the data is and how mmseg reads it (mmseg dataset dicts, without pipelines)."""

    spec: MmsegLayout
    root: Path
    classes: tuple[str, ...] | None  # SynthScenes class names (None: the mmseg dataset's own)
    train: list[dict]                # one dict per dataset concatenated for training
    val: dict
    train_lists: list[str]           # what was used, for the record

    @property
    def num_classes(self) -> int:
        return len(self.classes) if self.classes else self.spec.num_classes

    @property
    def is_synthetic(self) -> bool:
        return self.classes is not None


def _first_dir(root: Path, candidates: list[Path], marker: str, what: str) -> Path:
    if not root.exists():
        raise DataError(f"{what} root {root} does not exist")
    for c in candidates:
        if (c / marker).exists():
            return c
    raise DataError(f"no {what} layout under {root}: expected {marker} in one of "
                    f"{', '.join(str(c) for c in candidates)}")


def resolve_data(name: str, data_root: str | Path) -> ResolvedData:
    """Find the dataset folders under ``data_root`` (the real layouts or SynthScenes')."""
    from harness.data.io import find_synth_meta

    spec = mmseg_layout(name)
    root = Path(data_root).expanduser().resolve()
    common = dict(reduce_zero_label=spec.reduce_zero_label, img_suffix=".jpg",
                  seg_map_suffix=spec.seg_map_suffix)
    base, train, val, lists = _layout_splits(spec, root)
    _check_splits(spec, base, train + [val], common)
    meta = find_synth_meta(base, levels=2)
    classes = _synth_classes(name, spec, base, meta, train + [val])
    return ResolvedData(spec, base, classes, train, val, lists)


def _layout_splits(spec: MmsegLayout, root: Path) -> tuple[Path, list[dict], dict, list[str]]:
    """(dataset folder, train dataset dicts, val dataset dict, train lists used) of the layout."""
    from harness.data.segmentation import ADE20KSegmentation

    if spec.layout == "ade":
        base = ADE20KSegmentation._resolve_root(root)  # the harness readers' layout rules
        train = [dict(data_prefix=dict(img_path="images/training", seg_map_path="annotations/training"))]
        val = dict(data_prefix=dict(img_path="images/validation", seg_map_path="annotations/validation"))
        lists = ["images/training"]
    elif spec.layout == "voc":
        return _voc_splits(root)
    elif spec.layout == "context":
        base = _first_dir(root, [root, root / "VOC2010", root / "VOCdevkit" / "VOC2010"],
                          "SegmentationClassContext", "Pascal Context (VOC2010)")
        prefix = dict(img_path="JPEGImages", seg_map_path="SegmentationClassContext")
        train = [dict(data_prefix=prefix, ann_file="ImageSets/SegmentationContext/train.txt")]
        val = dict(data_prefix=dict(prefix), ann_file="ImageSets/SegmentationContext/val.txt")
        lists = ["train.txt"]
    else:
        base = _first_dir(root, [root, root / "coco_stuff164k"], "annotations/train2017", "COCO-Stuff 164k")
        train = [dict(data_prefix=dict(img_path="images/train2017", seg_map_path="annotations/train2017"))]
        val = dict(data_prefix=dict(img_path="images/val2017", seg_map_path="annotations/val2017"))
        lists = ["images/train2017"]
    return base, train, val, lists


def _voc_splits(root: Path) -> tuple[Path, list[dict], dict, list[str]]:
    from harness.data.segmentation import VOCSegmentation

    base = VOCSegmentation._resolve_root(root)
    sets = base / "ImageSets" / "Segmentation"
    if (sets / "aug.txt").is_file():
        # mmseg's pascal_voc12_aug.py (and CrIBo's): train.txt + aug.txt, concatenated.
        train = [dict(data_prefix=dict(img_path="JPEGImages", seg_map_path="SegmentationClass"),
                      ann_file="ImageSets/Segmentation/train.txt"),
                 dict(data_prefix=dict(img_path="JPEGImages", seg_map_path="SegmentationClassAug"),
                      ann_file="ImageSets/Segmentation/aug.txt")]
        lists = ["train.txt", "aug.txt"]
    elif (sets / "trainaug.txt").is_file():
        # The common single-list layout (and SynthScenes'): trainaug.txt over SegmentationClassAug.
        train = [dict(data_prefix=dict(img_path="JPEGImages", seg_map_path="SegmentationClassAug"),
                      ann_file="ImageSets/Segmentation/trainaug.txt")]
        lists = ["trainaug.txt"]
    else:
        raise DataError(f"Pascal VOC aug lists not found in {sets}: expected aug.txt (mmseg's "
                        f"tools/dataset_converters/voc_aug.py) or trainaug.txt")
    val = dict(data_prefix=dict(img_path="JPEGImages", seg_map_path="SegmentationClass"),
               ann_file="ImageSets/Segmentation/val.txt")
    return base, train, val, lists


def _check_splits(spec: MmsegLayout, base: Path, sets: list[dict], common: dict) -> None:
    """Complete each dataset dict (``common`` settings, data_root) and check its folders and list."""
    for d in sets:
        d.update(common, data_root=str(base))
        for key in ("img_path", "seg_map_path"):
            if not (base / d["data_prefix"][key]).is_dir():
                raise DataError(f"{spec.name}: folder {base / d['data_prefix'][key]} not found; "
                                f"the dataset is incomplete")
        if "ann_file" in d and not (base / d["ann_file"]).is_file():
            raise DataError(f"{spec.name}: split list {base / d['ann_file']} not found")


def _synth_classes(name: str, spec: MmsegLayout, base: Path, meta, sets: list[dict]) -> tuple[str, ...] | None:
    """SynthScenes' class names for the layout (None for a real dataset); set on every dataset dict."""
    classes = None
    if name.startswith("synth_") and not meta:
        raise DataError(f"dataset {name!r} is SynthScenes' {spec.name} layout, but {base} has no "
                        f"SynthScenes meta.json; generate one with `ssl-bench data synth --out DIR` "
                        f"or name the real dataset ({spec.name})")
    if meta:
        names = meta.get("classes", {}).get("ade20k" if spec.layout == "ade" else "voc")
        if not names or spec.layout not in ("ade", "voc"):
            raise DataError(f"{base} is a SynthScenes root but has no {spec.name} class list")
        classes = tuple(names)
        for d in sets:
            # mmseg's VOC/ADE dataset classes would remap SynthScenes' labels through their own
            # class lists; the generic dataset with SynthScenes' names reads them as written.
            d["metainfo"] = dict(classes=classes)
    return classes



# ============================================================================ mmengine config
def _world_size(launcher: str) -> int:
    if launcher == "slurm":
        return int(os.environ.get("SLURM_NTASKS", "1"))
    return int(os.environ.get("WORLD_SIZE", "1")) if launcher != "none" else 1


def resolve_launcher(launcher: str) -> str:
    if launcher != "auto":
        return launcher
    return "pytorch" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else "none"


def pipelines(cfg: SegConfig, data: ResolvedData) -> tuple[list[dict], list[dict]]:
    """mmseg's train / test pipelines for the dataset, at the configured crop."""
    scale = cfg.scale()
    crop = cfg.train_crop()
    train = [
        dict(type="LoadImageFromFile"),
        # reduce_zero_label comes from the dataset (mmseg's configs also repeat it here,
        # which mmseg 1.2.2 deprecates with a warning; the effect is the same)
        dict(type="LoadAnnotations"),
        dict(type="RandomResize", scale=scale, ratio_range=(0.5, 2.0), keep_ratio=True),
        dict(type="RandomCrop", crop_size=(crop, crop), cat_max_ratio=0.75),
        dict(type="RandomFlip", prob=0.5),
        dict(type="PhotoMetricDistortion"),
    ]
    if data.spec.pad_train:
        train.append(dict(type="Pad", size=(cfg.crop_size, cfg.crop_size)))
    train.append(dict(type="PackSegInputs"))
    test = [
        dict(type="LoadImageFromFile"),
        dict(type="Resize", scale=scale, keep_ratio=True),
        # annotations after Resize: the metric compares at the original size
        dict(type="LoadAnnotations"),
        dict(type="PackSegInputs"),
    ]
    return train, test


def build_mmseg_config(cfg: SegConfig, data: ResolvedData, *, backbone: dict, decode_head: dict,
                       lr: float, work_dir: Path, csv_path: Path, experiment: str,
                       validation_log: Path | None = None) -> "Any":
    """The whole mmengine config of one run (one learning rate).

    Validation runs every ``cfg.validation_interval()`` iterations and at the last one, as
    CrIBo's schedule configs (its train.py only calls ``runner.train()``; the last validation
    is its final number). Each validation is appended to ``validation_log`` (JSON lines).
    """
    from mmengine.config import Config

    launcher = resolve_launcher(cfg.launcher)
    world = _world_size(launcher)
    if cfg.batch_size % world:
        raise ConfigError(f"batch_size {cfg.batch_size} is not divisible by the {world} processes")
    train_set, val_set = _datasets(cfg, data)
    cuda = torch.cuda.is_available()

    d: dict[str, Any] = dict(
        default_scope="mmseg",
        work_dir=str(work_dir),
        experiment_name=experiment,
        launcher=launcher,
        resume=cfg.resume,
        load_from=None,
        randomness=dict(seed=cfg.seed),
        env_cfg=dict(cudnn_benchmark=cuda, mp_cfg=dict(mp_start_method="fork", opencv_num_threads=0),
                     dist_cfg=dict(backend="nccl" if cuda else "gloo")),
        log_level="INFO",
        log_processor=dict(by_epoch=False),
        vis_backends=[dict(type="LocalVisBackend")],
        visualizer=dict(type="SegLocalVisualizer", vis_backends=[dict(type="LocalVisBackend")],
                        name=f"vis_{experiment}"),
        model=_model(cfg, backbone, decode_head),
        **_schedule(cfg, lr),
        default_hooks=_default_hooks(cfg),
        **_dataloaders(cfg, world, train_set, val_set),
        # every validation rewrites the per-class table: the file left is the last one's
        val_evaluator=dict(type="SslBenchIoUMetric", iou_metrics=["mIoU"], csv_path=str(csv_path),
                           per_image_path=str(per_image_path(csv_path))),
        custom_hooks=[dict(type="SslBenchValidationLog",
                           path=str(validation_log or Path(work_dir) / VALIDATION_LOG))],
    )
    if backbone.get("type") == "SslBenchFeatureBackbone" and not backbone.get("frozen"):
        # a foreign model trained end to end may hold weights its features never reach (a
        # transformers pooler, a classifier left in place): DDP must not wait for their gradients
        d["model_wrapper_cfg"] = dict(type="MMDistributedDataParallel", find_unused_parameters=True)
    # yapf formatting of the dumped config costs seconds per checkpoint (mmengine stores the
    # config text in every checkpoint); the unformatted text is the same config.
    return Config(d, format_python_code=False)


def _datasets(cfg: SegConfig, data: ResolvedData) -> tuple[dict, dict]:
    """The train dataset (one, or a concatenation) and the val dataset, with their pipelines."""
    train_pipe, test_pipe = pipelines(cfg, data)
    dataset_type = "BaseSegDataset" if data.is_synthetic else data.spec.mmseg_type
    train_sets = [dict(type=dataset_type, pipeline=train_pipe, **d) for d in data.train]
    train_set = train_sets[0] if len(train_sets) == 1 else dict(type="ConcatDataset", datasets=train_sets)
    val_set = dict(type=dataset_type, pipeline=test_pipe, **data.val)
    return train_set, val_set


def _model(cfg: SegConfig, backbone: dict, decode_head: dict) -> dict:
    crop = (cfg.crop_size, cfg.crop_size)
    return dict(
        type="EncoderDecoder",
        data_preprocessor=dict(type="SegDataPreProcessor", mean=list(cfg.mean), std=list(cfg.std),
                               bgr_to_rgb=True, pad_val=0, seg_pad_val=255, size=crop),
        backbone=backbone,
        decode_head=decode_head,
        test_cfg=dict(mode="slide", crop_size=crop, stride=(cfg.stride(), cfg.stride())),
    )


def _schedule(cfg: SegConfig, lr: float) -> dict:
    """optim_wrapper, param_scheduler, train_cfg and val_cfg: Adam, poly decay, iteration-based."""
    return dict(
        optim_wrapper=dict(type="AmpOptimWrapper" if cfg.amp else "OptimWrapper",
                           optimizer=dict(type="Adam", lr=lr, weight_decay=cfg.weight_decay),
                           clip_grad=None),
        param_scheduler=[dict(type="PolyLR", eta_min=lr * cfg.eta_min_ratio, power=cfg.poly_power,
                              begin=0, end=cfg.iters, by_epoch=False)],
        train_cfg=dict(type="IterBasedTrainLoop", max_iters=cfg.iters,
                       val_interval=cfg.validation_interval()),
        val_cfg=dict(type="ValLoop"),
    )


def _default_hooks(cfg: SegConfig) -> dict:
    ckpt_every = cfg.checkpoint_interval or max(1, cfg.iters // 10)
    return dict(
        timer=dict(type="IterTimerHook"),
        logger=dict(type="LoggerHook", interval=cfg.log_interval, log_metric_by_epoch=False),
        param_scheduler=dict(type="ParamSchedulerHook"),
        checkpoint=dict(type="CheckpointHook", by_epoch=False, interval=ckpt_every,
                        max_keep_ckpts=1, save_last=True),
        sampler_seed=dict(type="DistSamplerSeedHook"),
    )


def _dataloaders(cfg: SegConfig, world: int, train_set: dict, val_set: dict) -> dict:
    """train_dataloader (the global batch split over ``world`` processes) and val_dataloader."""
    nw = cfg.num_workers
    return dict(
        train_dataloader=dict(batch_size=cfg.batch_size // world, num_workers=nw,
                              persistent_workers=nw > 0,
                              sampler=dict(type="InfiniteSampler", shuffle=True), dataset=train_set),
        val_dataloader=dict(batch_size=1, num_workers=nw, persistent_workers=nw > 0,
                            sampler=dict(type="DefaultSampler", shuffle=False), dataset=val_set),
    )


# ============================================================================ mmseg-side pieces
_METRIC_REGISTERED = False


PER_IMAGE_FILE = "per_image.json"


def per_image_path(csv_path: Path) -> Path:
    """Where a run's last validation keeps its per-image areas: beside its per-class CSV."""
    return Path(csv_path).with_name(PER_IMAGE_FILE)


def write_per_image(path: Path, results: list) -> None:
    """The ``per_image`` block (harness.per_image, kind ``areas``) of one validation: per image
    (in the dataset's order: mmengine's collect_results gathers the ranks' shares back into it)
    mmseg's intersection, union and label areas per class, whose sums over the images are what
    IoUMetric turns into mIoU (a class with an empty union left out of the mean), aAcc and mAcc (a
    class without ground-truth pixels left out)."""
    import numpy as np

    from harness.io_utils import atomic_write_json
    from harness.per_image import areas_block

    # mmseg's areas are float32 histograms of pixel counts: whole numbers, exact below 2**24 per image
    inter, union, label = (np.rint(np.stack([r[i].cpu().numpy() for r in results])).astype(np.int64)
                           for i in (0, 1, 3))
    atomic_write_json(path, areas_block(inter, union, label, count_absent_classes=False, extra_terms=0,
                                        accuracy_metric="aAcc", class_accuracy_metric="mAcc"))


def read_per_image_file(path: str | Path | None) -> dict | None:
    """The block a run's last validation wrote, or None when there is none (a run made before
    the file was kept) or it cannot be read."""
    import json

    if not path:
        return None
    try:
        block = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return block if isinstance(block, dict) else None


def register_metric() -> None:
    """``SslBenchIoUMetric``: mmseg's IoUMetric that also writes the per-class table as CSV and
    each validation image's areas (harness.per_image), for a bootstrap over the images."""
    global _METRIC_REGISTERED
    if _METRIC_REGISTERED:
        return
    import numpy as np
    from mmseg.evaluation import IoUMetric
    from mmseg.registry import METRICS

    class SslBenchIoUMetric(IoUMetric):
        def __init__(self, csv_path: str | None = None, per_image_path: str | None = None, **kwargs):
            super().__init__(**kwargs)
            self.csv_path = csv_path
            self.per_image_path = per_image_path

        def compute_metrics(self, results: list) -> dict:
            metrics = super().compute_metrics(results)
            if self.per_image_path:
                write_per_image(Path(self.per_image_path), results)
            if self.csv_path:
                inter, union, pred, label = (sum(r[i] for r in results) for i in range(4))
                iou = (inter / union).cpu().numpy()
                acc = (inter / label).cpu().numpy()
                rows = [("class", "IoU", "Acc", "pixels")]
                for name, i, a, n in zip(self.dataset_meta["classes"], iou, acc, label.cpu().numpy()):
                    rows.append((name, _pct(i), _pct(a), int(n)))
                Path(self.csv_path).parent.mkdir(parents=True, exist_ok=True)
                with open(self.csv_path, "w", newline="") as f:
                    csv.writer(f).writerows(rows)
            return metrics

    def _pct(x) -> str:
        return "" if np.isnan(x) else f"{100 * float(x):.2f}"

    METRICS.register_module(name="SslBenchIoUMetric", module=SslBenchIoUMetric, force=True)
    _register_validation_log()
    _METRIC_REGISTERED = True


VALIDATION_LOG = "validations.jsonl"


def _register_validation_log() -> None:
    """``SslBenchValidationLog``: a hook that keeps every validation's metrics by iteration.

    In memory on every rank (the evaluator hands all ranks the same metrics) and, on the
    main process, appended to a JSON-lines file, so that a resumed run still knows the
    validations of the interrupted runs before it.
    """
    import json

    from mmengine.dist import is_main_process
    from mmengine.hooks import Hook
    from mmengine.registry import HOOKS

    class SslBenchValidationLog(Hook):
        priority = "VERY_LOW"

        def __init__(self, path: str):
            self.path = Path(path)
            self.history: dict[int, dict[str, float]] = {}

        def after_val_epoch(self, runner, metrics=None) -> None:
            values = {k: round(float(v), 2) for k, v in (metrics or {}).items()
                      if isinstance(v, (int, float)) or getattr(v, "ndim", None) == 0}
            self.history[int(runner.iter)] = values
            if is_main_process():
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.path, "a") as f:
                    f.write(json.dumps({"iter": int(runner.iter), "metrics": values}) + "\n")

    HOOKS.register_module(name="SslBenchValidationLog", module=SslBenchValidationLog, force=True)


def read_validation_log(path: Path) -> dict[int, dict[str, float]]:
    """{iteration: metrics} from a validation log (a later line for the same iteration wins)."""
    import json

    out: dict[int, dict[str, float]] = {}
    if Path(path).is_file():
        for line in Path(path).read_text().splitlines():
            if line.strip():
                entry = json.loads(line)
                out[int(entry["iter"])] = entry["metrics"]
    return out


def _history_buffer_getattr(obj, name: str):
    """``getattr`` as mmengine's checkpoints need it, and nothing more.

    ``HistoryBuffer.__getstate__`` pickles its statistics methods, which pickle writes as
    ``getattr(HistoryBuffer, "min")`` etc. Allow-listing the real ``builtins.getattr`` would
    let a checkpoint fetch any attribute of any object it can build; this one only hands
    out HistoryBuffer's registered statistics methods.
    """
    from mmengine.logging.history_buffer import HistoryBuffer

    allowed = {"min", "max", "current", "mean", *HistoryBuffer._statistics_methods}
    if obj is HistoryBuffer and isinstance(name, str) and name in allowed:
        return getattr(HistoryBuffer, name)
    raise pickle.UnpicklingError(
        f"getattr({obj!r}, {name!r}) is not allowed when loading an mmengine checkpoint")


def weights_only_globals() -> list:
    """What mmengine's checkpoints hold besides tensors, for torch's weights-only unpickler.

    mmengine 0.10.7 calls ``torch.load`` without ``weights_only``; torch >= 2.6 then refuses
    its checkpoints (message-hub history buffers holding numpy arrays and scalars, and their
    statistics methods). Allowing exactly these -- scoped to our runs, see
    :func:`mmengine_checkpoint_loading` -- keeps weights-only loading on.
    """
    import numpy as np
    from mmengine.logging.history_buffer import HistoryBuffer

    try:
        from numpy._core import multiarray as ma
    except ImportError:  # numpy < 2
        from numpy.core import multiarray as ma
    allowed: list = [HistoryBuffer, np.ndarray, np.dtype, ma._reconstruct, ma.scalar]
    # numpy >= 1.25 rebuilds a dtype through its class (numpy.dtypes.Float64DType, ...)
    allowed += sorted({type(np.dtype(t)) for t in ("float64", "float32", "float16", "int64", "int32",
                                                   "int16", "int8", "uint8", "bool")}, key=str)
    # checkpoints written under numpy 1.x name these numpy.core.multiarray.*
    allowed += [(ma._reconstruct, "numpy.core.multiarray._reconstruct"),
                (ma.scalar, "numpy.core.multiarray.scalar")]
    allowed += [(_history_buffer_getattr, "builtins.getattr"),
                (_history_buffer_getattr, "__builtin__.getattr")]
    return allowed


@contextlib.contextmanager
def mmengine_checkpoint_loading():
    """Scoped allow-list for torch's weights-only loading of mmengine checkpoints."""
    with torch.serialization.safe_globals(weights_only_globals()):
        yield



# ============================================================================ one run, the sweep
def run_one(cfg: SegConfig, data: ResolvedData, *, backbone: dict, decode_head: dict, lr: float,
            work_dir: Path, tag: str) -> dict:
    """Train one learning rate, validating as CrIBo's schedules do.

    Returns {lr, metrics, validations, reported_iter, csv, validation_log, work_dir, iters}:
    ``metrics`` are the last validation's (at ``iters``), ``validations`` every
    (iteration, mIoU) in order.
    """
    from mmengine.dist import is_main_process

    work_dir.mkdir(parents=True, exist_ok=True)
    csv_path = work_dir / "per_class_iou.csv"
    log_path = work_dir / VALIDATION_LOG
    if cfg.resume:
        earlier = read_validation_log(log_path)
    else:
        earlier = {}
        if is_main_process():
            log_path.unlink(missing_ok=True)
            per_image_path(csv_path).unlink(missing_ok=True)  # never an earlier run's images
    # A learning rate whose last validation an interrupted run logged is done: read it back
    # (mmengine would first replay the whole data loader to find nothing left to train). A run
    # made before the per-image areas were kept resumes to validate once more and write them.
    if not (cfg.iters in earlier and csv_path.is_file() and per_image_path(csv_path).is_file()):
        experiment = f"{tag}_lr{lr:g}_{uuid.uuid4().hex[:6]}"
        mm_cfg = build_mmseg_config(cfg, data, backbone=backbone, decode_head=decode_head, lr=lr,
                                    work_dir=work_dir, csv_path=csv_path, experiment=experiment,
                                    validation_log=log_path)
        with mmengine_log.run_log() as quiet:  # mmengine's console output -> the run's log file
            runner = quiet.build_runner(mm_cfg)
            with mmengine_checkpoint_loading():
                runner.train()
                hook = next(h for h in runner.hooks if type(h).__name__ == "SslBenchValidationLog")
                if cfg.iters not in hook.history:
                    # resumed from the last checkpoint of a run whose final validation did not finish
                    runner.val()
        earlier.update(hook.history)
        mmengine_log_file = quiet.log_file
    else:
        mmengine_log_file = None
    history = dict(sorted(earlier.items()))
    return {"lr": lr, "metrics": dict(history[cfg.iters]), "reported_iter": cfg.iters,
            "validations": [[it, m.get("mIoU")] for it, m in history.items()],
            "csv": str(csv_path), "validation_log": str(log_path), "work_dir": str(work_dir),
            "iters": cfg.iters, "mmengine_log": mmengine_log_file, "per_image": str(per_image_path(csv_path))}


def prepare_data(cfg: SegConfig, data_root: str | Path) -> ResolvedData:
    """Import the mmseg stack, register the harness's mmseg pieces and find the data: what every
    run needs before its backbone is configured."""
    require_mmseg()
    import mmseg.datasets  # noqa: F401  (registers datasets, transforms)
    import mmseg.evaluation  # noqa: F401
    import mmseg.models  # noqa: F401

    register_mmseg_modules()
    register_metric()
    return resolve_data(cfg.dataset, data_root)


def run_sweep(cfg: SegConfig, data: ResolvedData, work_dir: str | Path, *, backbone: dict,
              decode_head: dict, head: str) -> list[dict]:
    """Every lr of ``cfg.lrs`` with one mmseg backbone and head config, one dict per lr (the
    same sweep whichever backbone: mmseg's ViT or a feature-contract backbone)."""
    from mmengine.dist import is_main_process

    work_dir = Path(work_dir)
    out = []
    for lr in cfg.lrs:
        log.info("%s on %s: lr %g, %d iterations", head, cfg.dataset, lr, cfg.iters)
        res = run_one(cfg, data, backbone=backbone, decode_head=decode_head, lr=lr,
                      work_dir=work_dir / f"lr{lr:g}", tag=f"{head}_{data.spec.name}")
        res.update(dataset=data.spec.name, num_classes=data.num_classes, train_lists=data.train_lists,
                   synthetic=data.is_synthetic)
        if is_main_process():
            mmengine_log.run_line(head, cfg.dataset, lr, res["metrics"], cfg.iters, res["mmengine_log"])
        out.append(res)
    return out


def run_seg_protocol(backbone_state_dict: dict[str, torch.Tensor], arch_kwargs: dict, cfg: SegConfig,
                     data_root: str | Path, work_dir: str | Path, *, head: str,
                     frozen: bool) -> list[dict]:
    """The protocol on a ViT's weights, as mmseg's VisionTransformer: every lr of ``cfg.lrs``,
    one dict per lr.

    ``arch_kwargs`` needs ``num_heads`` (the rest is read off the state dict). ``head``:
    "linear" (FCNHead, num_convs=0) or "mask" (SegmenterMaskTransformerHead).
    """
    data = prepare_data(cfg, data_root)
    work_dir = Path(work_dir)
    weights = save_converted(backbone_state_dict, work_dir / "backbone_mmseg.safetensors")
    backbone = backbone_config(backbone_state_dict, arch_kwargs, cfg, frozen=frozen, weights=weights)
    decode_head = head_config(head, backbone["embed_dims"], backbone["num_heads"], data.num_classes)
    return run_sweep(cfg, data, work_dir, backbone=backbone, decode_head=decode_head, head=head)


def vit_mismatch(backbone_state_dict: dict[str, torch.Tensor]) -> str | None:
    """Why mmseg's VisionTransformer cannot compute a ViT with these weights (register tokens,
    layer scale, SwiGLU, no CLS position, a fractional MLP ratio), or None when it can."""
    try:
        convert_state_dict(backbone_state_dict)
        mlp_ratio = describe_vit(backbone_state_dict)["mlp_ratio"]
    except CheckpointError as exc:
        return str(exc)
    if abs(mlp_ratio - round(mlp_ratio)) > 1e-9:
        return f"mlp ratio {mlp_ratio} is not an integer; mmseg's ViT needs one"
    return None


def backbone_config(backbone_state_dict: dict[str, torch.Tensor], arch_kwargs: dict, cfg: SegConfig, *,
                    frozen: bool, weights: str | Path | None = None) -> dict:
    """The mmseg backbone (``SslBenchViT``) of a run.

    A frozen backbone's mode while the head trains is ``cfg.frozen_backbone_mode`` (seg_linear's
    setting; "eval" where a config has none): "train" as CrIBo (DropPath at ``drop_path_rate``
    on the frozen features), "eval" deterministic (built with drop path 0).
    """
    if "num_heads" not in arch_kwargs:
        raise ConfigError(f"arch_kwargs must give num_heads, found {sorted(arch_kwargs)}")
    mode = getattr(cfg, "frozen_backbone_mode", "eval") if frozen else "eval"
    drop_path = cfg.drop_path_rate if (not frozen or mode == "train") else 0.0
    bk = backbone_kwargs(backbone_state_dict, int(arch_kwargs["num_heads"]), cfg.crop_size,
                                      drop_path)
    return dict(type="SslBenchViT", weights=None if weights is None else str(weights), frozen=frozen,
                frozen_mode=mode, **bk)


# Segmenter's mask transformer: mmseg's configs (2 layers) and the head's default drop path.
MASK_LAYERS = 2
MASK_DROP_PATH = 0.1


def head_config(head: str, embed_dims: int, num_heads: int, num_classes: int) -> dict:
    loss = dict(type="CrossEntropyLoss", use_sigmoid=False, loss_weight=1.0)
    if head == "linear":
        # mmseg's segmenter_vit-s_fcn config (CrIBo's linear head): a 1x1 conv on the tokens.
        return dict(type="FCNHead", in_channels=embed_dims, channels=embed_dims, num_convs=0,
                    concat_input=False, dropout_ratio=0.0, num_classes=num_classes,
                    align_corners=False, loss_decode=loss)
    if head == "mask":
        return dict(type="SegmenterMaskTransformerHead", in_channels=embed_dims, channels=embed_dims,
                    num_classes=num_classes, num_layers=MASK_LAYERS, num_heads=num_heads,
                    embed_dims=embed_dims, mlp_ratio=4, drop_path_rate=MASK_DROP_PATH,
                    dropout_ratio=0.0, loss_decode=loss)
    raise ConfigError(f"unknown segmentation head {head!r}; choose linear or mask")
