"""Build the official-layout parity fixtures of tests/test_official_parity.py from the official
repositories' own model classes.

Nothing here is imported by the harness or the tests, and no official code is copied into
the project: this script imports the classes from checkouts the caller names, builds a tiny
seeded model per layout (depth 2, width 16), saves it exactly as the official code saves or
releases it, runs the official forward on seeded inputs at the native resolution and at one
other resolution, and writes per case

    tests/fixtures/official/<case>/checkpoint.pth    the file in the official key layout
    tests/fixtures/official/<case>/reference.pt      inputs (uint8) + official CLS / patch (/ register) tokens
    tests/fixtures/official/<case>/provenance.json   repo, 40-char commit, class, settings, environment

Usage, from the repository root (each checkout is optional; only the cases of the given
repositories are written):

    python -m scripts.official_parity.generate_fixtures \\
        --dinov2 /tmp/official/dinov2 --mae /tmp/official/mae --croc /tmp/official/CrOC \\
        --timet /tmp/official/Timetuning --leopart /tmp/official/leopart --neco /tmp/official/NeCo

Each family runs in its own subprocess: the repositories reuse top-level package names
(`src`, `models`, `utils`). Official code that needs packages missing here is run with the
smallest stub, inside this script only (listed in each provenance file):
- MAE's models_mae.py was written for timm 0.3.2, whose Block took `qk_scale`; timm 1.x's
  Block has the same parameters and computation but not the argument, so the Block that
  models_mae imports accepts and drops it (qk_scale=None = the default scale). Its
  util/pos_embed.py uses `np.float` (removed in numpy 1.24): set to `float`, what it aliased.
- CrOC's models/vision_transformer.py imports einops for a branch (which_features) the
  backbone forward does not take; a stub module stands in.
- TimeT's time_tuning.py / models.py import a training stack (sklearn, skimage, lightning,
  data loaders); the TimeT and FeatureExtractor class definitions are executed from the
  official source files (ast, unchanged), with get_backbone returning the repository's
  dino_vision_transformer.VisionTransformer (TimeT's "dino-s16" backbone is that DINO hub
  model) instead of downloading it.
- Leopart's LightningModule (pytorch_lightning missing here) is represented by a module with
  the same two attributes in the same order (`teacher`, then `model`): the state dict keys
  are what Leopart's module gives (its metric object keeps no state in the state dict).
"""
from __future__ import annotations

import argparse
import ast
import datetime as dt
import hashlib
import json
import os
import platform
import subprocess
import sys
import types
from functools import partial
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "official"
WIDTH, DEPTH, HEADS = 16, 2, 2
BATCH = 2
NOISE = 0.1  # std of the seeded perturbation added to every initialised weight


def official_on_path(root: Path) -> None:
    """Make the official checkout at ``root`` importable: this script's one change of the import
    path (the sanctioned exception of docs/ARCHITECTURE.md, with tests/reference/common.py's)."""
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))


def to_input(u8: torch.Tensor) -> torch.Tensor:
    """uint8 images -> model input; the tests apply the same formula."""
    return (u8.float() / 255.0 - 0.45) / 0.225


def images(seed: int, h: int, w: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (BATCH, 3, h, w), generator=g, dtype=torch.uint8)


def perturb(module: nn.Module, seed: int, skip: tuple[str, ...] = ()) -> None:
    """Seeded noise on every floating parameter, so that no weight keeps its trivial init
    (LayerNorm 1/0, layer scale 1.0, CLS ~1e-6)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.is_floating_point() and not any(s in name for s in skip):
                p.add_(NOISE * torch.randn(p.shape, generator=g))


def git_commit(path: Path) -> str:
    return subprocess.check_output(["git", "-C", str(path), "rev-parse", "HEAD"], text=True).strip()


def environment() -> dict:
    env = {"python": platform.python_version(), "torch": torch.__version__, "platform": platform.platform(),
           "threads": torch.get_num_threads()}
    for mod in ("timm", "numpy"):
        try:
            env[mod] = __import__(mod).__version__
        except ImportError:
            env[mod] = None
    try:
        import xformers  # noqa: F401
        env["xformers"] = xformers.__version__
    except ImportError:
        env["xformers"] = None  # dinov2 / NeCo attention falls back to its plain-torch path
    return env


def write_case(case: str, repo: str, root: Path, checkpoint_obj, inputs: dict, outputs: dict, info: dict) -> None:
    d = OUT / case
    d.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint_obj, d / "checkpoint.pth")
    torch.save({"inputs": inputs, "outputs": outputs}, d / "reference.pt")
    me = Path(__file__).resolve()
    prov = {
        "case": case, "repo": repo, "url": f"https://github.com/{repo}", "commit": git_commit(root),
        "official_checkout": str(root),
        "generator": "scripts/official_parity/generate_fixtures.py",
        "generator_sha256": hashlib.sha256(me.read_bytes()).hexdigest(),
        "generated": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "environment": environment(),
        "seed_inputs": "torch.randint(0, 256, (2, 3, H, W), generator=torch.Generator().manual_seed(seed), "
                       "dtype=torch.uint8); model input = (u8 / 255 - 0.45) / 0.225",
        "perturbation": f"every floating parameter += {NOISE} * N(0, 1) (seeded), after the official init",
        "checkpoint_sha256": hashlib.sha256((d / "checkpoint.pth").read_bytes()).hexdigest(),
        **info,
    }
    (d / "provenance.json").write_text(json.dumps(prov, indent=2) + "\n")
    sizes = {f.name: f.stat().st_size for f in d.iterdir()}
    print(f"{case}: {sizes}")


def tokens_out(cls, patches, registers=None) -> dict:
    out = {"cls": cls.detach().clone().contiguous(), "patches": patches.detach().clone().contiguous()}
    if registers is not None:
        out["registers"] = registers.detach().clone().contiguous()
    return out


# ----------------------------------------------------------------------------- DINOv2
def _dinov2_model(vits, Block, MemEffAttention, *, img_size, reg, antialias, offset, ffn="mlp"):
    """hub/backbones._make_dinov2_model + models/vision_transformer.vit_small, at tiny width."""
    return vits.DinoVisionTransformer(
        img_size=img_size, patch_size=14, embed_dim=WIDTH, depth=DEPTH, num_heads=HEADS, mlp_ratio=4,
        block_fn=partial(Block, attn_class=MemEffAttention), init_values=1.0, ffn_layer=ffn, block_chunks=0,
        num_register_tokens=reg, interpolate_antialias=antialias, interpolate_offset=offset)


def _dinov2_forward(model, x):
    out = model.forward_features(x)
    regs = out["x_norm_regtokens"] if model.num_register_tokens else None
    return tokens_out(out["x_norm_clstoken"], out["x_norm_patchtokens"], regs)


def family_dinov2(root: Path) -> None:
    official_on_path(root)
    os.environ.setdefault("XFORMERS_DISABLED", "1")
    from dinov2.layers import MemEffAttention, NestedTensorBlock as Block
    from dinov2.models import vision_transformer as vits

    cases = [
        # (case, registers, ffn, hub settings)
        ("dinov2", 0, "mlp", dict(antialias=False, offset=0.1)),  # dinov2_vit{s,b,l}14
        ("dinov2_reg", 4, "mlp", dict(antialias=True, offset=0.0)),  # dinov2_vit{s,b,l}14_reg
        ("dinov2_swiglu_reg", 4, "swiglufused", dict(antialias=True, offset=0.0)),  # dinov2_vitg14_reg
    ]
    native, other = (56, 56), (42, 70)  # grid 4x4 (the model's img_size), then 3x5: down in H, up in W
    for i, (case, reg, ffn, hub) in enumerate(cases):
        torch.manual_seed(100 + i)
        model = _dinov2_model(vits, Block, MemEffAttention, img_size=native[0], reg=reg, ffn=ffn, **hub).eval()
        perturb(model, 200 + i)
        state = model.state_dict()  # the hub file: torch.hub loads it with strict=True
        inputs = {"native": images(300 + i, *native), "other": images(400 + i, *other)}
        with torch.no_grad():
            outputs = {k: _dinov2_forward(model, to_input(v)) for k, v in inputs.items()}
        write_case(case, "facebookresearch/dinov2", root, state, inputs, outputs, {
            "class": "dinov2.models.vision_transformer.DinoVisionTransformer",
            "constructor": dict(img_size=native[0], patch_size=14, embed_dim=WIDTH, depth=DEPTH, num_heads=HEADS,
                                mlp_ratio=4, block_fn="partial(NestedTensorBlock, attn_class=MemEffAttention)",
                                init_values=1.0, ffn_layer=ffn, block_chunks=0, num_register_tokens=reg,
                                interpolate_antialias=hub["antialias"], interpolate_offset=hub["offset"]),
            "as_in": "dinov2/hub/backbones.py _make_dinov2_model (hub settings of the "
                     + ("_reg models" if reg else "models without registers") + ")",
            "checkpoint_format": "model.state_dict() (the released *_pretrain.pth that the hub loads strict=True)",
            "forward": "model.forward_features(x): x_norm_clstoken, x_norm_patchtokens"
                       + (", x_norm_regtokens" if reg else ""),
            "resolutions": {"native": list(native), "other": list(other)},
            "notes": ["XFORMERS_DISABLED=1 / xformers not installed: MemEffAttention runs Attention.forward "
                      "(F.scaled_dot_product_attention), as on any machine without xformers"],
        })


# ----------------------------------------------------------------------------- MAE
def family_mae(root: Path) -> None:
    import timm.models.vision_transformer as tvit

    class Block(tvit.Block):  # timm 0.3.2's Block took qk_scale (None = head_dim ** -0.5)
        def __init__(self, *args, qk_scale=None, **kwargs):
            assert qk_scale is None
            super().__init__(*args, **kwargs)

    tvit.Block = Block  # what `from timm.models.vision_transformer import PatchEmbed, Block` reads
    import numpy as np

    if "float" not in np.__dict__:  # util/pos_embed.py uses np.float (removed in numpy 1.24) = float64
        np.float = float
    official_on_path(root)
    import models_mae
    import models_vit
    from util.pos_embed import interpolate_pos_embed

    native, other = 32, 48  # patch 8: grid 4x4 (pretraining size), then 6x6 (MAE's resize is square-only)
    norm = partial(nn.LayerNorm, eps=1e-6)
    torch.manual_seed(110)
    mae = models_mae.MaskedAutoencoderViT(img_size=native, patch_size=8, embed_dim=WIDTH, depth=DEPTH,
                                          num_heads=HEADS, decoder_embed_dim=8, decoder_depth=1, decoder_num_heads=2,
                                          mlp_ratio=4, norm_layer=norm).eval()
    perturb(mae, 210, skip=("pos_embed",))  # the sin-cos tables stay as MAE fixes them
    ckpt = {"model": mae.state_dict()}  # util/misc.save_model's 'model' entry (encoder + decoder)
    inputs = {"native": images(310, native, native), "other": images(410, other, other)}
    outputs = {}
    with torch.no_grad():
        # native: the pretraining encoder itself, mask ratio 0 (random_masking keeps every token
        # but shuffles them; ids_restore puts them back in image order)
        latent, _, ids_restore = mae.forward_encoder(to_input(inputs["native"]), 0.0)
        patches = torch.gather(latent[:, 1:], 1, ids_restore.unsqueeze(-1).expand(-1, -1, latent.shape[-1]))
        outputs["native"] = tokens_out(latent[:, 0], patches)
        # other size: main_linprobe.py / main_finetune.py's way, models_vit at the new img_size and
        # util/pos_embed.interpolate_pos_embed on the checkpoint, loaded strict=False
        for key, size in (("native_models_vit", native), ("other", other)):
            vit = models_vit.VisionTransformer(img_size=size, patch_size=8, embed_dim=WIDTH, depth=DEPTH,
                                               num_heads=HEADS, mlp_ratio=4, qkv_bias=True, norm_layer=norm,
                                               num_classes=0, global_pool=False).eval()
            sd = {k: v.clone() for k, v in ckpt["model"].items()}
            interpolate_pos_embed(vit, sd)
            msg = vit.load_state_dict(sd, strict=False)
            assert not msg.missing_keys, msg.missing_keys
            seen = {}
            hook = vit.norm.register_forward_hook(lambda m, i, o: seen.setdefault("tokens", o))
            cls = vit.forward_features(to_input(inputs["native" if key.startswith("native") else "other"]))
            hook.remove()
            assert torch.equal(cls, seen["tokens"][:, 0])
            outputs[key] = tokens_out(seen["tokens"][:, 0], seen["tokens"][:, 1:])
    err = (outputs["native_models_vit"]["patches"] - outputs["native"]["patches"]).abs().max().item()
    assert err < 1e-5, f"models_vit and forward_encoder disagree at the native size: {err}"
    del outputs["native_models_vit"]
    write_case("mae", "facebookresearch/mae", root, ckpt, {k: inputs[k] for k in ("native", "other")}, outputs, {
        "class": "models_mae.MaskedAutoencoderViT (native) / models_vit.VisionTransformer (other size)",
        "constructor": dict(img_size=native, patch_size=8, embed_dim=WIDTH, depth=DEPTH, num_heads=HEADS,
                            decoder_embed_dim=8, decoder_depth=1, decoder_num_heads=2, mlp_ratio=4,
                            norm_layer="partial(nn.LayerNorm, eps=1e-6)"),
        "as_in": "models_mae.mae_vit_base_patch16_dec512d8b at tiny width",
        "checkpoint_format": "{'model': MaskedAutoencoderViT.state_dict()} (util/misc.save_model; the released "
                             "mae_pretrain_vit_*.pth hold the encoder part under 'model')",
        "forward": "native: forward_encoder(x, mask_ratio=0) un-shuffled with ids_restore (final norm on all "
                   "tokens); other: models_vit.VisionTransformer(global_pool=False) built at the other size, "
                   "pos_embed resized by util/pos_embed.interpolate_pos_embed, tokens = output of its final norm",
        "resolutions": {"native": [native, native], "other": [other, other]},
        "notes": [f"timm {__import__('timm').__version__} instead of 0.3.2: Block stubbed to accept qk_scale=None",
                  "numpy >= 1.24 has no np.float: set to float (float64, what it aliased) for util/pos_embed.py",
                  "both paths agree at the native size (checked, < 1e-5)"],
    })


# ----------------------------------------------------------------------------- CrOC
def family_croc(root: Path) -> None:
    sys.modules["einops"] = types.SimpleNamespace(rearrange=None)  # only the which_features branch uses it
    official_on_path(root)
    from models.vision_transformer import CrOCHead, VisionTransformer
    from utils.utils import MultiCropWrapperCrOC

    native, other = (32, 32), (40, 56)
    kwargs = dict(img_size=[native[0]], patch_size=8, embed_dim=WIDTH, depth=DEPTH, num_heads=HEADS, mlp_ratio=4,
                  qkv_bias=True, norm_layer=partial(nn.LayerNorm, eps=1e-6))

    class DDP(nn.Module):  # DistributedDataParallel's state dict: the wrapped module under `module.`
        def __init__(self, module):
            super().__init__()
            self.module = module

    torch.manual_seed(120)
    student = MultiCropWrapperCrOC(VisionTransformer(drop_path_rate=0.1, **kwargs),
                                   CrOCHead(WIDTH, 16, 8, hidden_dim=32, bottleneck_dim=16, norm_last_layer=False), "k")
    teacher = MultiCropWrapperCrOC(VisionTransformer(**kwargs), CrOCHead(WIDTH, 16, 8, hidden_dim=32,
                                                                         bottleneck_dim=16),
                                   "k")
    teacher.load_state_dict(student.state_dict())
    perturb(student, 220)
    perturb(teacher, 221)
    student_ddp = DDP(student)
    save_dict = {  # main_croc.py
        "student": student_ddp.state_dict(), "teacher": teacher.state_dict(),
        "optimizer": {"state": {}, "param_groups": [{"lr": 0.0, "params": []}]}, "epoch": 300,
        "args": argparse.Namespace(arch="vit_small", patch_size=8, out_dim=16, out_dim_c=8),
        "croc_loss": {"center": torch.zeros(1, 16), "center_c": torch.zeros(1, 8)},
        "fp16_scaler": {"scale": 65536.0},
    }
    inputs = {"native": images(320, *native), "other": images(420, *other)}
    outputs = {}
    with torch.no_grad():
        for branch, net in (("teacher", teacher), ("student", student)):
            net.eval()
            for k, v in inputs.items():
                tok = net.backbone.get_intermediate_layers(to_input(v), n=1)[0]
                outputs[f"{branch}_{k}"] = tokens_out(tok[:, 0], tok[:, 1:])
    outputs = {k.replace("teacher_", ""): v for k, v in outputs.items()}
    write_case("croc_full", "stegmuel/CrOC", root, save_dict, inputs, outputs, {
        "class": "models.vision_transformer.VisionTransformer in utils.utils.MultiCropWrapperCrOC with CrOCHead",
        "constructor": dict(img_size=[native[0]], patch_size=8, embed_dim=WIDTH, depth=DEPTH, num_heads=HEADS,
                            mlp_ratio=4, qkv_bias=True, norm_layer="partial(nn.LayerNorm, eps=1e-6)",
                            head="CrOCHead(16, out_dim=16, out_dim_c=8, hidden_dim=32, bottleneck_dim=16)"),
        "as_in": "models.vision_transformer.vit_small at tiny width; main_croc.py wrappers",
        "checkpoint_format": "main_croc.py save_dict: student (DDP: module.*), teacher, optimizer, epoch, args, "
                             "croc_loss, fp16_scaler",
        "forward": "backbone.get_intermediate_layers(x, n=1)[0] (final norm): token 0 = CLS, 1: = patches; "
                   "keys native/other = teacher, student_native/student_other = student",
        "resolutions": {"native": list(native), "other": list(other)},
        "notes": ["einops stubbed (unused by this forward)", "the student's DDP wrapper is represented by a "
                  "module with one attribute `module` (the same state dict keys)"],
    })


# ----------------------------------------------------------------------------- TimeT
def _exec_definitions(path: Path, names: set[str], namespace: dict) -> None:
    """Execute the named top-level definitions / assignments of an official file, unchanged."""
    tree = ast.parse(path.read_text())
    keep = []
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name in names:
            keep.append(node)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in names for t in node.targets):
            keep.append(node)
    found = {getattr(n, "name", None) or n.targets[0].id for n in keep}
    missing = names - found
    if missing:
        raise SystemExit(f"{path}: definitions {sorted(missing)} not found")
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(path), "exec"), namespace)


def family_timet(root: Path) -> None:
    import copy

    import torch.nn.functional as F

    official_on_path(root)
    import dino_vision_transformer as dvt

    native, other = (32, 32), (40, 56)

    def get_backbone(name, model_path):  # models.get_backbone("dino-s16") = the DINO hub vit_small
        return dvt.VisionTransformer(img_size=[native[0]], patch_size=8, embed_dim=WIDTH, depth=DEPTH,
                                     num_heads=HEADS, mlp_ratio=4, qkv_bias=True,
                                     norm_layer=partial(nn.LayerNorm, eps=1e-6))

    ns = {"torch": torch, "nn": nn, "F": F, "copy": copy, "get_backbone": get_backbone}
    _exec_definitions(root / "models.py", {"FeatureExtractor", "spatial_resolutions"}, ns)
    _exec_definitions(root / "time_tuning.py", {"TimeT"}, ns)
    torch.manual_seed(130)
    # time_tuning.py: FeatureExtractor(architecture, model_path, [1024, 1024, 512, 256], ...) with
    # use_projection_head (default True), TimeT(feature_extractor, num_clusters), then
    # init_momentum_teacher() with use_teacher (default True); the head is narrower here
    fe = ns["FeatureExtractor"]("dino-s16", None, [32, 8], unfreeze_layers=["blocks.1"])
    model = ns["TimeT"](fe, 10)
    model.init_momentum_teacher()
    perturb(model, 230)
    state = model.state_dict()  # TimeT.save: torch.save(self.state_dict(), path) = the released TimeT.pth
    inputs = {"native": images(330, *native), "other": images(430, *other)}
    outputs = {}
    with torch.no_grad():
        for branch, net in (("teacher", model.teacher), ("student", model.feature_extractor)):
            net.eval()
            for k, v in inputs.items():
                x = to_input(v)
                tok = net.backbone.get_intermediate_layers(x, n=1)[0]
                patches, _ = net.get_features(x)  # TimeT's own dense features: tokens[:, 1:]
                assert torch.equal(patches, tok[:, 1:])
                outputs[f"{branch}_{k}"] = tokens_out(tok[:, 0], tok[:, 1:])
    outputs = {k.replace("teacher_", ""): v for k, v in outputs.items()}
    write_case("timet", "SMSD75/Timetuning", root, state, inputs, outputs, {
        "class": ("time_tuning.TimeT(models.FeatureExtractor('dino-s16')) with "
                  "dino_vision_transformer.VisionTransformer"),
        "constructor": dict(img_size=[native[0]], patch_size=8, embed_dim=WIDTH, depth=DEPTH, num_heads=HEADS,
                            mlp_ratio=4, qkv_bias=True, norm_layer="partial(nn.LayerNorm, eps=1e-6)",
                            head_layer_list=[32, 8], prototype_number=10, teacher="init_momentum_teacher()"),
        "as_in": "time_tuning.py time_tuning() defaults (use_projection_head=True, use_teacher=True)",
        "checkpoint_format": "TimeT.state_dict() (TimeT.save; the README loads it as a flat dict)",
        "forward": "branch.backbone.get_intermediate_layers(x, n=1)[0]; FeatureExtractor.get_features gives "
                   "the same patch tokens; keys native/other = EMA teacher, student_* = feature_extractor",
        "resolutions": {"native": list(native), "other": list(other)},
        "notes": ["TimeT and FeatureExtractor executed from the official source via ast (their modules "
                  "import packages missing here); get_backbone builds the repository's DINO ViT instead "
                  "of torch.hub.load('facebookresearch/dino:main', 'dino_vits16')"],
    })


# ----------------------------------------------------------------------------- Leopart
def family_leopart(root: Path) -> None:
    official_on_path(root)
    from src.vit import VisionTransformer

    native, other = (32, 32), (40, 56)
    kwargs = dict(img_size=[native[0]], patch_size=8, embed_dim=WIDTH, depth=DEPTH, num_heads=HEADS, mlp_ratio=4,
                  qkv_bias=True, norm_layer=partial(nn.LayerNorm, eps=1e-6), output_dim=8, hidden_dim=32,
                  nmb_prototypes=10, n_layers_projection_head=3)

    class Leopart(nn.Module):  # src/leopart.Leopart: init_model() sets self.teacher, then self.model
        def __init__(self):
            super().__init__()
            self.teacher = VisionTransformer(**kwargs)
            self.model = VisionTransformer(drop_path_rate=0.1, **kwargs)

    torch.manual_seed(140)
    module = Leopart()
    perturb(module, 240)
    state = module.state_dict()
    inputs = {"native": images(340, *native), "other": images(440, *other)}
    outputs = {}
    with torch.no_grad():
        for branch, net in (("model", module.model), ("teacher", module.teacher)):
            net.eval()
            for k, v in inputs.items():
                tok = net.forward_backbone(to_input(v))
                outputs[f"{branch}_{k}"] = tokens_out(tok[:, 0], tok[:, 1:])
    outputs = {k.replace("model_", ""): v for k, v in outputs.items()}
    write_case("leopart", "MkuuWaUjinga/leopart", root, state, inputs, outputs, {
        "class": "src.vit.VisionTransformer (model = student, teacher = EMA) in the Leopart module",
        "constructor": {k: (str(v) if k == "norm_layer" else v) for k, v in kwargs.items()},
        "as_in": "src/leopart.py init_model() with use_teacher",
        "checkpoint_format": "the Leopart module's state dict, flat (the README loads it as a flat dict and "
                             "strips the first key component)",
        "forward": "VisionTransformer.forward_backbone(x) (final norm): token 0 = CLS, 1: = patches; keys "
                   "native/other = model (the student, what Leopart's loader reads), teacher_* = teacher",
        "resolutions": {"native": list(native), "other": list(other)},
        "notes": ["pytorch_lightning not installed: the LightningModule is represented by a module with the "
                  "same attributes in the same order"],
    })


# ----------------------------------------------------------------------------- NeCo
def family_neco(root: Path, dinov2_root: Path | None) -> None:
    if dinov2_root is None:
        raise SystemExit("the NeCo case needs --dinov2 too (its README loads the weights into the DINOv2 hub model)")
    os.environ.setdefault("XFORMERS_DISABLED", "1")
    official_on_path(root)
    from src.models import vit_v2
    from src.layers import MemEffAttention as NecoAttention, NestedTensorBlock as NecoBlock

    native, other = (56, 56), (42, 70)
    torch.manual_seed(150)
    # experiments/configs/models/small/neco_dinov2r.yml: arch_version v2, patch 14, 4 registers
    neco = vit_v2.DinoVisionTransformer(img_size=native[0], patch_size=14, init_values=1.0, embed_dim=WIDTH,
                                        depth=DEPTH, num_heads=HEADS, mlp_ratio=4,
                                        block_fn=partial(NecoBlock, attn_class=NecoAttention),
                                        num_register_tokens=4, output_dim=8, hidden_dim=32,
                                        n_layers_projection_head=3).eval()
    perturb(neco, 250)
    state = neco.state_dict()
    # README "NeCo on Dinov2 with Registers": torch.hub.load('facebookresearch/dinov2',
    # 'dinov2_vits14_reg') then load_state_dict(state_dict, strict=False)
    official_on_path(dinov2_root)
    from dinov2.layers import MemEffAttention, NestedTensorBlock as Block
    from dinov2.models import vision_transformer as vits

    hub = _dinov2_model(vits, Block, MemEffAttention, img_size=native[0], reg=4, antialias=True, offset=0.0).eval()
    msg = hub.load_state_dict(state, strict=False)
    assert not msg.missing_keys, msg.missing_keys
    inputs = {"native": images(350, *native), "other": images(450, *other)}
    outputs = {}
    with torch.no_grad():
        for k, v in inputs.items():
            outputs[k] = _dinov2_forward(hub, to_input(v))
            own = neco.forward_features(to_input(v)) if hasattr(neco, "forward_features") else None
            if own is not None:
                outputs[f"neco_class_{k}"] = tokens_out(own["x_norm_clstoken"], own["x_norm_patchtokens"],
                                                        own["x_norm_regtokens"])
    diff = {k: (outputs[f"neco_class_{k}"]["patches"] - outputs[k]["patches"]).abs().max().item()
            for k in inputs if f"neco_class_{k}" in outputs}
    write_case("neco_dinov2r", "vpariza/NeCo", root, state, inputs, outputs, {
        "class": "src.models.vit_v2.DinoVisionTransformer (NeCo's copy of DINOv2's, with projection_head)",
        "constructor": dict(img_size=native[0], patch_size=14, init_values=1.0, embed_dim=WIDTH, depth=DEPTH,
                            num_heads=HEADS, mlp_ratio=4, num_register_tokens=4, output_dim=8, hidden_dim=32,
                            n_layers_projection_head=3),
        "as_in": "experiments/configs/models/small/neco_dinov2r.yml (v2 architecture, 4 registers)",
        "checkpoint_format": "DinoVisionTransformer.state_dict() flat (the README torch.loads the file and "
                             "load_state_dict(strict=False) into the hub model)",
        "forward": "the README's model: DINOv2 hub dinov2_vits14_reg settings (interpolate_offset 0.0, "
                   "antialias True), forward_features; neco_class_* = NeCo's own class (its training forward)",
        "dinov2_commit": git_commit(dinov2_root),
        "resolutions": {"native": list(native), "other": list(other)},
        "neco_class_vs_readme_max_abs_diff": diff,
        "notes": ["NeCo's own interpolate_pos_encoding keeps the 0.1 offset and has antialias commented out, "
                  "so at other sizes its features differ from the README's hub model (see the diff above)"],
    })


# ----------------------------------------------------------------------------- real size
def real_size(dinov2_root: Path | None, mae_root: Path | None) -> None:
    """Released-size models (random weights) through `zoo import`, against the official forward:
    DINOv2 ViT-S/14 with and without registers (hub constructors) at 518, 224 and 224x336; MAE
    ViT-B/16 (models_vit, encoder-only file as released) at 224 and 384. Only the numbers are
    kept (tests/fixtures/official/real_size_checks.json); the files are temporary."""
    import tempfile

    from harness.models.checkpoints import load_backbone
    from harness.models.zoo import zoo_import

    results, tmp = [], Path(tempfile.mkdtemp(prefix="ssl-bench-real-size-"))

    def compare(name, arch, hw, cls_ref, patches_ref, feats):
        err = max((cls_ref - feats.cls[:, -1]).abs().max().item(),
                  (patches_ref - feats.patches[:, -1].flatten(1, 2)).abs().max().item())
        results.append({"zoo_name": name, "arch": arch, "input": list(hw), "max_abs_error": err})
        print(name, arch, hw, f"{err:.2e}")

    if dinov2_root is not None:
        os.environ.setdefault("XFORMERS_DISABLED", "1")
        official_on_path(dinov2_root)
        from dinov2.hub.backbones import dinov2_vits14, dinov2_vits14_reg

        for fn, name in ((dinov2_vits14, "dinov2_vits14"), (dinov2_vits14_reg, "dinov2_vits14_reg")):
            torch.manual_seed(0)
            model = fn(pretrained=False).eval()
            perturb(model, 1)
            torch.save(model.state_dict(), tmp / f"{name}.pth")
            backbone, meta = load_backbone(zoo_import(name, tmp / f"{name}.pth", tmp / "zoo"))
            for i, hw in enumerate(((518, 518), (224, 224), (224, 336))):
                x = to_input(images(500 + i, *hw))[:1]
                with torch.no_grad():
                    ref = model.forward_features(x)
                    compare(name, meta["arch"], hw, ref["x_norm_clstoken"], ref["x_norm_patchtokens"],
                            backbone.eval().get_features(x))
    if mae_root is not None:
        import numpy as np

        if "float" not in np.__dict__:
            np.float = float
        official_on_path(mae_root)
        import models_vit
        from util.pos_embed import interpolate_pos_embed

        torch.manual_seed(0)
        model = models_vit.vit_base_patch16(num_classes=0, global_pool=False).eval()
        perturb(model, 2)
        state = model.state_dict()
        torch.save({"model": state}, tmp / "mae.pth")
        backbone, meta = load_backbone(zoo_import("mae_vitb16", tmp / "mae.pth", tmp / "zoo"))
        for i, size in enumerate((224, 384)):
            vit = models_vit.vit_base_patch16(img_size=size, num_classes=0, global_pool=False).eval()
            sd = dict(state)
            interpolate_pos_embed(vit, sd)
            vit.load_state_dict(sd, strict=False)
            seen = {}
            vit.norm.register_forward_hook(lambda m, i, o: seen.setdefault("t", o))
            x = to_input(images(600 + i, size, size))[:1]
            with torch.no_grad():
                vit.forward_features(x)
                compare("mae_vitb16", meta["arch"], (size, size), seen["t"][:, 0], seen["t"][:, 1:],
                        backbone.eval().get_features(x))
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    out = OUT / "real_size_checks.json"
    prior = json.loads(out.read_text())["checks"] if out.is_file() else []
    keep = [r for r in prior if r["zoo_name"] not in {x["zoo_name"] for x in results}]
    commits = {k: git_commit(v) for k, v in (("dinov2", dinov2_root), ("mae", mae_root)) if v is not None}
    out.write_text(json.dumps({
        "what": "released-size architectures, random weights (official init + seeded noise, see perturb), "
                "imported with `ssl-bench zoo import`, vs the official forward",
        "generator": "scripts/official_parity/generate_fixtures.py --real-size",
        "commits": commits, "environment": environment(),
        "generated": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "checks": keep + results}, indent=2) + "\n")


FAMILIES = ("dinov2", "mae", "croc", "timet", "leopart", "neco")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for fam in FAMILIES:
        ap.add_argument(f"--{fam}", type=Path, default=None, help=f"checkout of the official {fam} repository")
    ap.add_argument("--one", choices=FAMILIES, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--real-size", action="store_true",
                    help="instead: released-size DINOv2 S/14 (+reg) and MAE B/16 through `zoo import` vs the "
                         "official forward (needs --dinov2 and/or --mae); writes real_size_checks.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.real_size:
        torch.set_num_threads(max(1, os.cpu_count() or 1))
        real_size(args.dinov2.resolve() if args.dinov2 else None, args.mae.resolve() if args.mae else None)
        return
    if args.one:
        root = getattr(args, args.one).resolve()
        if args.one == "neco":
            family_neco(root, args.dinov2.resolve() if args.dinov2 else None)
        else:
            globals()[f"family_{args.one}"](root)
        return
    given = [f for f in FAMILIES if getattr(args, f) is not None]
    if not given:
        ap.error("name at least one official checkout")
    for fam in given:
        cmd = [sys.executable, "-m", __spec__.name, "--one", fam] + [
            x for f in given for x in (f"--{f}", str(getattr(args, f).resolve()))]
        if fam == "neco" and args.dinov2 is None:
            raise SystemExit("--neco needs --dinov2 too")
        subprocess.run(cmd, check=True, cwd=ROOT)


if __name__ == "__main__":
    main()
