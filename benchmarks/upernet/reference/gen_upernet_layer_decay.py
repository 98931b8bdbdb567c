"""Regenerate benchmarks/upernet/fixtures/upernet_layer_decay.json from iBOT's segmentation code.

Runs bytedance/ibot's ``evaluation/semantic_segmentation/mmcv_custom/layer_decay_optimizer_constructor.py``
(``LayerDecayOptimizerConstructor.add_params`` and ``get_num_layer_for_vit``) unmodified on the
whole UperNet model of ``configs/upernet/vit_{small,base}_512_ade20k_160k.py`` with the README's
``out_with_norm=true``, and records each parameter's layer id, lr scale and weight decay, and the
parameter counts of the parts.

The model the official constructor walks: the official ``models/vision_transformer.py``
``VisionTransformer`` (img_size [512], the config's widths, drop path 0.1) with the four adapters
that ``mmcv_custom/register_backbone.py`` adds for patch 16 (built here from that file's layer list:
the file itself imports mmseg 0.x, which cannot be installed beside mmcv 2.x), and mmseg 1.2.2's
``UPerHead`` / ``FCNHead`` with ``configs/_base_/models/upernet.py``'s numbers (the same modules
and parameter shapes as mmseg 0.x's). The adapter output shapes are computed from the configs'
numbers (512 / 16 = 32 -> x4, x2, x1, x0.5), not run.

Stubbed: ``mmcv.runner`` (mmcv 1.x; the constructor imports ``OPTIMIZER_BUILDERS``,
``DefaultOptimizerConstructor`` and ``get_dist_info``): a base class holding ``base_lr``,
``base_wd`` and ``paramwise_cfg`` as mmcv 1.x's does, a registry that returns the class, and rank 1
so that the constructor does not print its groups.

    python benchmarks/upernet/reference/gen_upernet_layer_decay.py --official /tmp/ibot --commit <40 hex>
"""
from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _shared_helpers():
    """tests/reference/common.py, the helpers every fixture generator shares, loaded by its path: a
    generator runs as a script (``python benchmarks/<folder>/reference/gen_X.py``), and tests/ is no
    package (common.py says why)."""
    spec = importlib.util.spec_from_file_location("common", HERE.parents[2] / "tests" / "reference" / "common.py")
    module = sys.modules["common"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


common = sys.modules.get("common") or _shared_helpers()

REPOSITORY = "https://github.com/bytedance/ibot"
COMMIT = "da316d82636a7a7356835ef224b13d5f3ace0489"
FIXTURE = "upernet_layer_decay.json"
CONSTRUCTOR = "evaluation/semantic_segmentation/mmcv_custom/layer_decay_optimizer_constructor.py"
# configs/upernet/vit_{small,base}_512_ade20k_160k.py, lr as the README's commands
ARCHS = {"vit_small": dict(embed_dim=384, num_heads=6, layer_decay_rate=0.9, lr=3e-5),
         "vit_base": dict(embed_dim=768, num_heads=12, layer_decay_rate=0.65, lr=8e-5)}
WEIGHT_DECAY = 0.05
NUM_CLASSES = 150


def load_constructor(path: Path):
    """The official constructor module, with mmcv 1.x's runner stubbed only while it imports."""
    class DefaultOptimizerConstructor:
        def __init__(self, optimizer_cfg, paramwise_cfg=None):
            self.base_lr = optimizer_cfg.get("lr")
            self.base_wd = optimizer_cfg.get("weight_decay", None)
            self.paramwise_cfg = {} if paramwise_cfg is None else paramwise_cfg

    registry = types.SimpleNamespace(register_module=lambda *a, **k: (a[0] if a else (lambda cls: cls)))
    runner = types.ModuleType("mmcv.runner")
    runner.__dict__.update(OPTIMIZER_BUILDERS=registry, DefaultOptimizerConstructor=DefaultOptimizerConstructor,
                           get_dist_info=lambda: (1, 1))
    saved = {k: sys.modules.get(k) for k in ("mmcv", "mmcv.runner")}
    stub = types.ModuleType("mmcv")
    stub.runner = runner
    sys.modules.update({"mmcv": stub, "mmcv.runner": runner})
    try:
        spec = importlib.util.spec_from_file_location("ibot_seg_layer_decay", path / CONSTRUCTOR)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return module


def official_model(vit_mod, arch: dict):
    """backbone (official ViT + register_backbone.py's patch-16 adapters, out_with_norm true),
    decode_head and auxiliary_head, named as mmseg's EncoderDecoder names them."""
    import torch
    from mmseg.models.decode_heads import FCNHead, UPerHead
    from torch import nn

    torch.manual_seed(0)
    d = arch["embed_dim"]
    vit = vit_mod.VisionTransformer(img_size=[512], patch_size=16, embed_dim=d, depth=12, num_heads=arch["num_heads"],
                                    mlp_ratio=4, qkv_bias=True, drop_path_rate=0.1)
    vit.fpn1 = nn.Sequential(nn.ConvTranspose2d(d, d, 2, 2), nn.BatchNorm2d(d), nn.GELU(),
                             nn.ConvTranspose2d(d, d, 2, 2))
    vit.fpn2 = nn.Sequential(nn.ConvTranspose2d(d, d, 2, 2))
    vit.fpn3, vit.fpn4 = nn.Identity(), nn.MaxPool2d(2, 2)
    bn = dict(type="BN", requires_grad=True)
    model = nn.Module()
    model.backbone = vit
    model.decode_head = UPerHead(in_channels=[d] * 4, in_index=[0, 1, 2, 3], pool_scales=(1, 2, 3, 6), channels=d,
                                 dropout_ratio=0.1, num_classes=NUM_CLASSES, norm_cfg=bn, align_corners=False)
    model.auxiliary_head = FCNHead(in_channels=d, in_index=2, channels=256, num_convs=1, concat_input=False,
                                   dropout_ratio=0.1, num_classes=NUM_CLASSES, norm_cfg=bn, align_corners=False)
    return model


def count(module) -> int:
    return sum(p.numel() for p in module.parameters())


def one_arch(constructor_mod, vit_mod, name: str, arch: dict) -> dict:
    model = official_model(vit_mod, arch)
    ctor = constructor_mod.LayerDecayOptimizerConstructor(
        dict(type="AdamW", lr=arch["lr"], betas=(0.9, 0.999), weight_decay=WEIGHT_DECAY),
        dict(num_layers=12, layer_decay_rate=arch["layer_decay_rate"]))
    groups: list[dict] = []
    ctor.add_params(groups, model)
    params = {}
    for g in groups:
        layer = int(g["group_name"].split("_")[1])
        for n in g["param_names"]:
            params[n] = [layer, g["lr_scale"], g["weight_decay"]]
    vit = model.backbone
    adapter = count(vit.fpn1) + count(vit.fpn2)
    d, grid = arch["embed_dim"], 512 // 16
    return {"lr": arch["lr"], "layer_decay_rate": arch["layer_decay_rate"], "num_layers": 12,
            "params": params, "group_names": [g["group_name"] for g in groups],
            "param_count": {"total": count(model), "backbone_vit": count(vit) - adapter, "adapter": adapter,
                            "decode_head": count(model.decode_head), "auxiliary_head": count(model.auxiliary_head),
                            "pos_embed": vit.pos_embed.numel()},
            "adapter_shapes_512_batch2": [[2, d, grid * 4, grid * 4], [2, d, grid * 2, grid * 2], [2, d, grid, grid],
                                          [2, d, grid // 2, grid // 2]]}


def main() -> None:
    args = common.parse_args(__doc__, HERE.parent / "fixtures" / FIXTURE, REPOSITORY, COMMIT)
    constructor_mod = load_constructor(args.official)
    vit_mod = common.import_official(args.official, "models.vision_transformer")
    data = {name: one_arch(constructor_mod, vit_mod, name, arch) for name, arch in ARCHS.items()}
    files = sorted(set(common.loaded_official_files(args.official)) | {CONSTRUCTOR})
    data["provenance"] = common.provenance(
        args, __file__, {"archs": ARCHS, "weight_decay": WEIGHT_DECAY, "num_classes": NUM_CLASSES,
                         "out_with_norm": True, "img_size": 512, "drop_path_rate": 0.1},
        files, extra_modules=("mmseg", "timm"),
        notes="official constructor run with mmcv.runner stubbed; adapters built from register_backbone.py's "
              "layer list; heads are mmseg 1.2.2's UPerHead / FCNHead with BN (SyncBN in the config: same "
              "parameters); adapter shapes computed from the config numbers")
    data["how"] = ("iBOT's segmentation LayerDecayOptimizerConstructor.add_params (mmcv.runner stubbed) on the "
                   "official ViT-S/16 and ViT-B/16 with the adapters and mmseg's UPerHead / FCNHead: each "
                   "parameter's layer id, lr scale and weight decay; parameter counts; adapter shapes at 512")
    common.compare_with_committed(data, args.out)
    common.write_fixture(args.out, data)


if __name__ == "__main__":
    main()
