"""Reference values of iBOT's detection recipe, from its own code (run outside this repository):

    python -m benchmarks.detection.parity.make_official_fixture /path/to/bytedance-ibot \
        benchmarks/detection/parity/official_ibot_detection.json

For ViT-S/16 and ViT-B/16 as ``configs/cascade_rcnn/vit_{small,base}_giou_4conv1f_coco_3x.py``
configure them:
- every backbone parameter's layer id (``get_num_layer_for_vit``), lr scale and weight decay as
  ``LayerDecayOptimizerConstructor.add_params`` groups them (README rates: 0.8 / 0.75), plus the
  rule's answer for a neck and a head name;
- the backbone's parameter count and the shapes of its four outputs for a 256 x 320 input
  (``mmcv_custom/register_backbone.py``'s VisionTransformer, built and run);
- the parameter count of the FPN, RPN and the cascade's box and mask heads, computed from the configs' numbers
  (mmdet 2.x / mmcv 1.x cannot be installed beside this stack, so the detector itself is not built).

The official files import mmcv 1.x's ``mmcv.runner`` and mmdet 2.x's registries; those imports are
replaced by stubs (a registry whose ``register_module`` returns the class, a
``DefaultOptimizerConstructor`` that stores ``base_lr`` / ``base_wd`` / ``paramwise_cfg`` as mmcv's
does, ``get_dist_info`` -> (0, 1)); everything that computes a number is the official code, loaded
from the checkout by file path.
"""
from __future__ import annotations

import contextlib
import datetime
import importlib.util
import io
import json
import subprocess
import sys
import types
from pathlib import Path

ARCHS = {  # config values: embed dim, heads, drop path, img_size of the backbone, README layer decay
    "vit_small": dict(embed_dim=384, num_heads=6, drop_path_rate=0.1, img_size=[800, 1008], layer_decay=0.8),
    "vit_base": dict(embed_dim=768, num_heads=12, drop_path_rate=0.2, img_size=[672, 1092], layer_decay=0.75),
}
PROBE = (256, 320)
EXTRA_NAMES = ("neck.lateral_convs.0.conv.weight", "rpn_head.rpn_conv.bias", "roi_head.bbox_head.2.fc_reg.weight")


def _stubs() -> None:
    class Registry:
        def register_module(self, *args, **kwargs):
            return (lambda cls: cls) if not args or not isinstance(args[0], type) else args[0]

    class DefaultOptimizerConstructor:
        def __init__(self, optimizer_cfg, paramwise_cfg=None):
            self.optimizer_cfg, self.paramwise_cfg = optimizer_cfg, paramwise_cfg or {}
            self.base_lr, self.base_wd = optimizer_cfg.get("lr"), optimizer_cfg.get("weight_decay")

    modules = {
        "mmcv": {},
        "mmcv.runner": dict(OPTIMIZER_BUILDERS=Registry(), DefaultOptimizerConstructor=DefaultOptimizerConstructor,
                            get_dist_info=lambda: (0, 1)),
        "mmcv_custom": dict(load_checkpoint=None), "mmdet": {}, "mmdet.utils": dict(get_root_logger=None),
        "mmdet.models": {}, "mmdet.models.builder": dict(BACKBONES=Registry()),
    }
    for name, attrs in modules.items():
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        sys.modules[name] = module


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def head_param_count(in_channels: int, num_classes: int = 80) -> dict[str, int]:
    """FPN + RPN + 3 ConvFC (4conv1fc, BN) box heads + 3 FCN mask heads, from the configs' numbers."""
    c = 256
    conv = lambda i, o, k, bias=True: i * o * k * k + (o if bias else 0)  # noqa: E731
    fpn = 4 * conv(in_channels, c, 1) + 4 * conv(c, c, 3)
    rpn = conv(c, c, 3) + conv(c, 3, 1) + conv(c, 12, 1)
    convs = 4 * (conv(c, c, 3, bias=False) + 2 * c)  # 4 shared convs, BN (no conv bias)
    box = convs + (c * 49 * 1024 + 1024) + (1024 * (num_classes + 1) + num_classes + 1) \
        + (1024 * 4 * num_classes + 4 * num_classes)
    mask = 4 * conv(c, c, 3) + (c * c * 4 + c) + conv(c, num_classes, 1)
    # CascadeRoIHead (mmdet 2.x init_mask_head, as 3.x) copies a single mask_head dict to every stage
    return {"fpn": fpn, "rpn": rpn, "bbox_heads": 3 * box, "mask_heads": 3 * mask,
            "total": fpn + rpn + 3 * (box + mask)}


def arch_reference(det_dir: Path, arch: str, spec: dict) -> dict:
    import torch
    from torch import nn

    backbone_mod = _load(det_dir / "mmcv_custom" / "register_backbone.py", "ibot_register_backbone")
    constructor_mod = _load(det_dir / "mmcv_custom" / "layer_decay_optimizer_constructor.py", "ibot_ldoc")
    torch.manual_seed(0)
    backbone = backbone_mod.VisionTransformer(
        img_size=spec["img_size"], patch_size=16, embed_dim=spec["embed_dim"], depth=12, num_heads=spec["num_heads"],
        mlp_ratio=4.0, qkv_bias=True, drop_path_rate=spec["drop_path_rate"], out_indices=(3, 5, 7, 11),
        use_checkpoint=False)
    backbone.eval()
    with torch.no_grad():
        shapes = [list(o.shape) for o in backbone(torch.zeros(1, 3, *PROBE))]
    detector = nn.Module()
    detector.backbone = backbone
    constructor = constructor_mod.LayerDecayOptimizerConstructor(
        dict(type="AdamW", lr=1e-4, weight_decay=0.05), dict(num_layers=12, layer_decay_rate=spec["layer_decay"]))
    groups: list = []
    with contextlib.redirect_stdout(io.StringIO()):  # the constructor prints every group
        constructor.add_params(groups, detector)
    params = {}
    for g in groups:
        layer = int(g["group_name"].split("_")[1])
        for name in g["param_names"]:
            params[name] = [layer, g["lr_scale"], g["weight_decay"]]
    return {"layer_decay": spec["layer_decay"], "num_layers": 12, "params": params,
            "extra_layer_ids": {n: constructor_mod.get_num_layer_for_vit(n, 14) for n in EXTRA_NAMES},
            "backbone_param_count": sum(p.numel() for p in backbone.parameters()),
            "pos_embed_tokens": int(backbone.pos_embed.shape[1]),
            "probe_input": list(PROBE), "output_shapes": shapes,
            "head_param_count_from_config": head_param_count(spec["embed_dim"])}


def official_on_path(checkout: Path) -> None:
    """The official checkout importable (it lives outside this repository)."""
    sys.path[:0] = [str(checkout)]


def main(argv: list[str]) -> None:
    checkout, out = Path(argv[0]).resolve(), Path(argv[1])
    det_dir = checkout / "evaluation" / "object_detection"
    official_on_path(checkout)
    _stubs()
    git = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
    commit = git.stdout.strip()
    data = {"provenance": {"repo": "bytedance/ibot", "commit": commit or "da316d82636a7a7356835ef224b13d5f3ace0489",
                           "files": ["evaluation/object_detection/mmcv_custom/layer_decay_optimizer_constructor.py",
                                     "evaluation/object_detection/mmcv_custom/register_backbone.py",
                                     "models/vision_transformer.py",
                                     "evaluation/object_detection/configs/cascade_rcnn/vit_{small,base}_giou_4conv1f_coco_3x.py"],
                           "stubs": "mmcv.runner, mmcv_custom, mmdet.utils, mmdet.models.builder (registries only)",
                           "command": "python -m benchmarks.detection.parity.make_official_fixture CHECKOUT OUT",
                           "date": datetime.date.today().isoformat()},
            "archs": {arch: arch_reference(det_dir, arch, spec) for arch, spec in ARCHS.items()}}
    out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
