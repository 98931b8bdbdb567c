"""Small models of every source kind, with random weights, written to a test's folder: a timm
ViT-S/16 weights file, a transformers Dinov2Model folder (and the same weights in the
official DINOv2 layout), a torch.hub repository folder and a user code file."""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import torch

HUBCONF = '''
dependencies = ["torch", "timm"]


def small_resnet(**kwargs):
    import timm

    return timm.create_model("resnet18", pretrained=False, num_classes=0, **kwargs)
'''

USER_CODE = '''
import torch
from torch import nn


class StridedNet(nn.Module):
    """A three-layer CNN of stride 8 without any feature API of its own."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(),
                                  nn.Conv2d(32, 48, 3, 2, 1))

    def forward(self, x):
        return self.body(x)


def build():
    return StridedNet()


def features(model, x, n_last_blocks, norm):
    fmap = model(x)  # (B, d, h, w)
    return fmap.mean(dim=(2, 3))[:, None], fmap.permute(0, 2, 3, 1)[:, None]


def not_a_module():
    return "a string"


def plain():
    return nn.Linear(3, 4)
'''


def timm_vit_file(folder: Path, seed: int = 0, depth: int = 12) -> Path:
    """A timm vit_small_patch16_224 state dict (with its ImageNet head), as a user saves it;
    ``depth`` blocks (timm's ``depth=``: a spec that reads the file names it too)."""
    import timm
    from safetensors.torch import save_file

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = timm.create_model("vit_small_patch16_224", pretrained=False, depth=depth)
    path = folder / "vit_small_patch16_224.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return path


def tiny_dinov2(folder: Path, seed: int = 0):
    """A random transformers Dinov2Model (width 64, 2 layers, patch 14, trained size 56) saved
    with save_pretrained, and the same weights in the official DINOv2 layout (.pth)."""
    import transformers

    config = transformers.Dinov2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                       intermediate_size=256, patch_size=14, image_size=56, layerscale_value=1.0)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = transformers.Dinov2Model(config).eval()
        with torch.no_grad():  # layer scale, position embeddings and biases away from their init values
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.02)
    hf_dir = folder / "dinov2-tiny"
    model.save_pretrained(hf_dir)
    official = folder / "dinov2_tiny_pretrain.pth"
    torch.save(hf_dinov2_to_official(model.state_dict()), official)
    return hf_dir, official


_RENAMES = [
    (r"^embeddings\.cls_token$", "cls_token"), (r"^embeddings\.mask_token$", "mask_token"),
    (r"^embeddings\.position_embeddings$", "pos_embed"),
    (r"^embeddings\.patch_embeddings\.projection\.", "patch_embed.proj."),
    (r"^encoder\.layer\.(\d+)\.norm(\d)\.", r"blocks.\1.norm\2."),
    (r"^encoder\.layer\.(\d+)\.attention\.(?:o_proj|output\.dense)\.", r"blocks.\1.attn.proj."),
    (r"^encoder\.layer\.(\d+)\.layer_scale(\d)\.lambda1$", r"blocks.\1.ls\2.gamma"),
    (r"^encoder\.layer\.(\d+)\.mlp\.", r"blocks.\1.mlp."),
    (r"^layernorm\.", "norm."),
]
_QKV = re.compile(r"^encoder\.layer\.(\d+)\.attention\.(?:attention\.)?(q_proj|k_proj|v_proj|query|key|value)\."
                  r"(weight|bias)$")


def hf_dinov2_to_official(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers' Dinov2Model names (4.x and 5.x spellings) -> facebookresearch/dinov2's
    (q, k, v stacked into one qkv, as the official checkpoints hold them)."""
    out, qkv = {}, {}
    for key, value in state.items():
        m = _QKV.match(key)
        if m:
            block, part, kind = m.groups()
            part = {"query": "q_proj", "key": "k_proj", "value": "v_proj"}.get(part, part)
            qkv.setdefault((block, kind), {})[part] = value
            continue
        for pattern, repl in _RENAMES:
            if re.match(pattern, key):
                out[re.sub(pattern, repl, key)] = value
                break
        else:
            raise KeyError(f"no official name for {key}")
    for (block, kind), parts in qkv.items():
        out[f"blocks.{block}.attn.qkv.{kind}"] = torch.cat([parts["q_proj"], parts["k_proj"], parts["v_proj"]])
    return out


def hub_repo(folder: Path) -> Path:
    repo = folder / "hubrepo"
    repo.mkdir()
    (repo / "hubconf.py").write_text(textwrap.dedent(HUBCONF))
    return repo


def user_code(folder: Path) -> Path:
    path = folder / "my_models.py"
    path.write_text(textwrap.dedent(USER_CODE))
    return path


def tiny_transformers_folders(folder: Path, seed: int = 0) -> dict[str, Path]:
    """Random ViTModel, CLIP, SigLIP and Dinov2WithRegistersModel folders (width 32, 2 layers)."""
    import transformers

    small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    text = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    vision = dict(small, image_size=32, patch_size=8)
    builders = {
        "vit": lambda: transformers.ViTModel(transformers.ViTConfig(**vision)),
        "clip": lambda: transformers.CLIPModel(transformers.CLIPConfig(vision_config=vision, text_config=text)),
        "siglip": lambda: transformers.SiglipModel(transformers.SiglipConfig(vision_config=vision, text_config=text)),
        "dinov2_reg": lambda: transformers.Dinov2WithRegistersModel(transformers.Dinov2WithRegistersConfig(
            **small, image_size=28, patch_size=14, num_register_tokens=4)),
    }
    out = {}
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        for name, build in builders.items():
            out[name] = folder / f"hf-{name}"
            build().save_pretrained(out[name])
    return out


TINY_OPEN_CLIP = {"embed_dim": 32, "vision_cfg": {"image_size": 64, "layers": 2, "width": 64, "patch_size": 16},
                  "text_cfg": {"context_length": 16, "vocab_size": 100, "width": 32, "heads": 2, "layers": 1}}


def tiny_open_clip(folder: Path, seed: int = 0):
    """A random open_clip CLIP built from a local model config (ViT image tower: width 64, 2
    blocks, patch 16, trained at 64 px), its weights moved off their init values and saved as a
    whole CLIP state dict: (config path, weights path, the model)."""
    import json

    import open_clip
    from safetensors.torch import save_file

    config = folder / "tiny_clip.json"
    config.write_text(json.dumps(TINY_OPEN_CLIP))
    open_clip.add_model_config(config)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = open_clip.create_model("tiny_clip", pretrained=None).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.02)
    weights = folder / "tiny_clip.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(weights))
    return config, weights, model
