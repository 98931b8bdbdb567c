"""Regenerate benchmarks/depth/fixtures/depth_linear4.json (+ depth_linear4_arrays.npz) from DINOv2's code.

Runs facebookresearch/dinov2 unmodified: hub/depthers.py _make_dinov2_linear_depth_head (layers=4:
BNHead, 256 "UD" bins, "linear" normalisation, upsample 4, resize_concat, class token concatenated)
on seeded per-block (patch grid, class token) pairs, in the (x, cls) form get_intermediate_layers(...,
reshape=True, return_class_token=True) gives; writes the assembled features (_forward_feature) and
the depth (forward). Also reads the blocks and keywords _make_dinov2_linear_depther gives the
backbone for ViT-S/B/L (built with pretrained=False; ViT-g is left out for its size).

The float inputs the official code ran on (the features and the head's default-initialised
convolution) are written beside the fixture in depth_linear4_arrays.npz, with the outputs; the test
feeds them to benchmarks/depth/head.py and compares.
"""
from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

# tests/reference/common.py, the generators' shared helpers, loaded by its path (this script lives in
# its protocol folder); it then puts the folder's tests/ on the import path for the shared inputs
_COMMON = Path(__file__).resolve().parents[3] / "tests" / "reference" / "common.py"
_spec = importlib.util.spec_from_file_location("common", _COMMON)
common = sys.modules["common"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(common)
common.load_folder_generator_helpers(__file__)

REPOSITORY = "https://github.com/facebookresearch/dinov2"
COMMIT = "b8931f7bf91576930313be2c6d6af376033b35f0"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FIXTURE = "depth_linear4.json"
ARRAYS = "depth_linear4_arrays.npz"
SHAPE = dict(layers=4, batch=2, embed_dim=4, grid=[3, 4])
INIT_SEED, INPUT_SEED = 0, 2025


def head_case(depthers, np, torch) -> tuple[dict, dict]:
    d, b, (h, w) = SHAPE["embed_dim"], SHAPE["batch"], SHAPE["grid"]
    torch.manual_seed(INIT_SEED)  # nn.Conv2d's default init draws here
    head = depthers._make_dinov2_linear_depth_head(embed_dim=d, layers=4, min_depth=0.001, max_depth=10.0)
    head.eval()
    rng = np.random.default_rng(INPUT_SEED)
    feats = rng.normal(size=(4, b, d, h, w)).astype(np.float32)
    cls = rng.normal(size=(4, b, d)).astype(np.float32)
    inputs = [(torch.from_numpy(feats[i]), torch.from_numpy(cls[i])) for i in range(4)]
    with torch.no_grad():
        assembled = head._forward_feature(inputs)
        depth = head(inputs)
    arrays = {"feats": feats, "cls": cls, "conv_weight": head.conv_depth.weight.detach().numpy(),
              "conv_bias": head.conv_depth.bias.detach().numpy(), "assembled": assembled.numpy(),
              "depth": depth.numpy()}
    info = {"min_depth": head.min_depth, "max_depth": head.max_depth, "n_bins": head.n_bins,
            "bins_strategy": head.bins_strategy, "norm_strategy": head.norm_strategy, "upsample": head.upsample,
            "channels": head.channels, "input_transform": head.input_transform,
            "has_batchnorm": any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in head.modules()),
            "assembled_shape": list(assembled.shape), "depth_shape": list(depth.shape),
            "depth_mean": float(depth.mean()), "depth_min": float(depth.min()), "depth_max": float(depth.max())}
    return info, arrays


def backbone_case(depthers) -> dict:
    out = {}
    for arch, make in [("vit_small", depthers.dinov2_vits14_ld), ("vit_base", depthers.dinov2_vitb14_ld),
                       ("vit_large", depthers.dinov2_vitl14_ld)]:
        model = make(layers=4, pretrained=False)
        kw = model.backbone.forward.keywords
        out[arch] = {"n_blocks": len(model.backbone.blocks), "out_index": list(kw["n"]), "norm": kw["norm"],
                     "reshape": kw["reshape"], "return_class_token": kw["return_class_token"],
                     "head_max_depth": model.decode_head.max_depth}
        del model
    return out


def main() -> None:
    args = common.parse_args(__doc__, FIXTURE, REPOSITORY, COMMIT, fixtures=FIXTURES)
    import numpy as np
    import torch

    depthers = common.import_official(args.official, "dinov2.hub.depthers")
    info, arrays = head_case(depthers, np, torch)
    blocks = backbone_case(depthers)
    out_arrays = args.out.parent / ARRAYS
    np.savez_compressed(out_arrays, **arrays)
    data = {
        "provenance": common.provenance(
            args, __file__, {"shape": SHAPE, "init_seed": INIT_SEED, "input_seed": INPUT_SEED,
                             "head": "_make_dinov2_linear_depth_head(embed_dim=4, layers=4, min_depth=0.001, "
                                     "max_depth=10.0)", "head_mode": "eval, no_grad"},
            common.loaded_official_files(args.official)),
        "how": ("dinov2 hub BNHead for 4 layers on per-block (x (B, D, h, w), cls (B, D)) inputs drawn by "
                "numpy default_rng(2025) normal; the convolution as nn.Conv2d initialises it after "
                "torch.manual_seed(0). Arrays (inputs, weights, assembled features, depth) in " + ARRAYS + "."),
        "arrays": ARRAYS,
        "arrays_sha256": hashlib.sha256(out_arrays.read_bytes()).hexdigest(),
        "head": info,
        "blocks": blocks,
    }
    common.finish(args, data)


if __name__ == "__main__":
    main()
