"""Importers: every official layout loads into the harness ViT with outputs equal to an
independent plain-torch forward; the key audit and the trust flag.

The official parameter names below are a minimal re-statement of the DINO / iBOT / CrIBo
VisionTransformer and heads (and timm's ViT, which SynCLR and StableRep use); the
layouts (top-level keys, prefixes) follow the save code of main_dino.py, main_ibot.py,
extract_backbone_weights.py, main_cribo.py and SynCLR's / StableRep's loaders.
"""
from __future__ import annotations

import argparse
import math
import zlib

import pytest
import torch
import torch.nn.functional as F

from harness.models.checkpoints import load_backbone, load_checkpoint
from harness.errors import CheckpointError
from harness.models.importers import detect_arch, import_checkpoint, read_official
from harness.io_utils import sha256_file

TOL = 1e-5


# ----------------------------------------------------------------------------- official names
def official_vit(gen, dim=64, depth=3, patch=8, grid=8, mlp_ratio=4):
    """Random weights under the official ViT parameter names and shapes."""
    def r(*shape, scale=0.1):
        return torch.randn(*shape, generator=gen) * scale
    hid = int(dim * mlp_ratio)
    sd = {"cls_token": r(1, 1, dim, scale=1.0), "pos_embed": r(1, 1 + grid * grid, dim, scale=0.5),
          "patch_embed.proj.weight": r(dim, 3, patch, patch, scale=0.2), "patch_embed.proj.bias": r(dim)}
    for i in range(depth):
        b = f"blocks.{i}."
        sd.update({
            b + "norm1.weight": 1 + r(dim), b + "norm1.bias": r(dim),
            b + "attn.qkv.weight": r(3 * dim, dim, scale=dim ** -0.5), b + "attn.qkv.bias": r(3 * dim),
            b + "attn.proj.weight": r(dim, dim, scale=dim ** -0.5), b + "attn.proj.bias": r(dim),
            b + "norm2.weight": 1 + r(dim), b + "norm2.bias": r(dim),
            b + "mlp.fc1.weight": r(hid, dim, scale=dim ** -0.5), b + "mlp.fc1.bias": r(hid),
            b + "mlp.fc2.weight": r(dim, hid, scale=hid ** -0.5), b + "mlp.fc2.bias": r(dim),
        })
    sd["norm.weight"], sd["norm.bias"] = 1 + r(dim), r(dim)
    return sd


def dino_head(gen, dim, extra_last=(), hidden=32, bottleneck=16, out=24):
    """DINOHead: 3-layer MLP + weight-normed last layer(s) (iBOT: last_layer2, CrIBo: last_layer_c)."""
    def r(*s):
        return torch.randn(*s, generator=gen)

    sd = {"mlp.0.weight": r(hidden, dim), "mlp.0.bias": r(hidden), "mlp.2.weight": r(hidden, hidden),
          "mlp.2.bias": r(hidden), "mlp.4.weight": r(bottleneck, hidden), "mlp.4.bias": r(bottleneck)}
    for name in ("last_layer",) + tuple(extra_last):
        sd[f"{name}.weight_g"], sd[f"{name}.weight_v"] = torch.ones(out, 1), r(out, bottleneck)
    return sd


def perturbed(sd, gen):
    return {k: v + 0.01 * torch.randn(v.shape, generator=gen) for k, v in sd.items()}


def full_checkpoint(teacher, student, head, extra_student=None, loss_key="dino_loss", **extra):
    return {
        "student": {**{f"module.backbone.{k}": v for k, v in student.items()},
                    **{f"module.head.{k}": v for k, v in head.items()}, **(extra_student or {})},
        "teacher": {**{f"backbone.{k}": v for k, v in teacher.items()},
                    **{f"head.{k}": v for k, v in head.items()}},
        "optimizer": {"state": {}, "param_groups": [{"lr": 1e-3, "params": [0, 1]}]},
        "epoch": 100, "args": argparse.Namespace(arch="vit_small", patch_size=8, epochs=100),
        loss_key: {"center": torch.zeros(1, 24)}, "fp16_scaler": {"scale": 65536.0},
        **extra,
    }


def make_layout(layout, gen, **vit):
    """(object to torch.save, teacher/backbone weights, student weights or None)."""
    t = official_vit(gen, **vit)
    dim = t["cls_token"].shape[-1]
    if layout == "dino_pretrain":
        return dict(t), t, None
    if layout == "ibot_teacher":
        return {"state_dict": dict(t)}, t, None
    if layout == "ibot_student_flat":  # 22K release: the student, written flat by other tools
        return {**t, "masked_embed": torch.zeros(1, dim)}, t, None
    if layout == "synclr":
        return {"model": {f"module.visual.{k}": v for k, v in t.items()}}, t, None
    if layout == "stablerep":
        mlp = {"image_mlp.layer1.weight": torch.randn(32, dim, generator=gen), "image_mlp.bn1.running_mean":
               torch.zeros(32), "image_mlp.bn1.num_batches_tracked": torch.tensor(5),
               "image_mlp.layer3.weight": torch.randn(16, 32, generator=gen)}
        return {"model": {**{f"visual.{k}": v for k, v in t.items()}, **mlp}, "epoch": 10,
                "args": argparse.Namespace(model="base")}, t, None
    s = perturbed(t, gen)
    if layout == "dino_full":
        return full_checkpoint(t, s, dino_head(gen, dim)), t, s
    if layout == "ibot_full":
        return full_checkpoint(t, s, dino_head(gen, dim, ("last_layer2",)), loss_key="ibot_loss",
                               extra_student={"module.backbone.masked_embed": torch.zeros(1, dim)}), t, s
    if layout == "cribo_full":
        return full_checkpoint(t, s, dino_head(gen, dim, ("last_layer_c",)),
                               centroids_queue_cpu=torch.rand(2, 64, dim), cls_queue_cpu=torch.rand(2, 4, dim),
                               cpv_queue_cpu=torch.full((4,), 16, dtype=torch.int32)), t, s
    raise ValueError(layout)


# ----------------------------------------------------------------------------- reference forward
def reference_forward(sd, x, num_heads, eps=1e-6):
    """Plain-torch ViT: patch conv, CLS + position embeddings (official bicubic interpolation
    with the +0.1 offset when the grid differs), pre-norm blocks, final LayerNorm."""
    sd = {k: v.double() for k, v in sd.items()}
    x = x.double()
    patch = sd["patch_embed.proj.weight"].shape[-1]
    t = F.conv2d(x, sd["patch_embed.proj.weight"], sd["patch_embed.proj.bias"], stride=patch)
    b, d, h, w = t.shape
    t = t.flatten(2).transpose(1, 2)
    pos = sd["pos_embed"]
    n = pos.shape[1] - 1
    g = int(math.sqrt(n))
    if (h, w) != (g, g):
        grid = pos[:, 1:].reshape(1, g, g, d).permute(0, 3, 1, 2)
        grid = F.interpolate(grid, scale_factor=((h + 0.1) / g, (w + 0.1) / g), mode="bicubic")
        pos = torch.cat([pos[:, :1], grid.permute(0, 2, 3, 1).reshape(1, h * w, d)], dim=1)
    t = torch.cat([sd["cls_token"].expand(b, -1, -1), t], dim=1) + pos
    depth = 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("blocks."))
    hd = d // num_heads
    for i in range(depth):
        def p(name, i=i):
            return sd[f"blocks.{i}.{name}"]

        y = F.layer_norm(t, (d,), p("norm1.weight"), p("norm1.bias"), eps)
        qkv = (y @ p("attn.qkv.weight").T + p("attn.qkv.bias")).reshape(b, -1, 3, num_heads, hd)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attn = ((q @ k.transpose(-2, -1)) * hd ** -0.5).softmax(dim=-1)
        o = (attn @ v).transpose(1, 2).reshape(b, -1, d)
        t = t + o @ p("attn.proj.weight").T + p("attn.proj.bias")
        y = F.layer_norm(t, (d,), p("norm2.weight"), p("norm2.bias"), eps)
        t = t + F.gelu(y @ p("mlp.fc1.weight").T + p("mlp.fc1.bias")) @ p("mlp.fc2.weight").T + p("mlp.fc2.bias")
    return F.layer_norm(t, (d,), sd["norm.weight"], sd["norm.bias"], eps)


def _max_err(backbone, sd, size, heads, seed=0, batch=2):
    x = torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        ours = backbone.forward_tokens(x).double()
    return (ours - reference_forward(sd, x, heads)).abs().max().item()


# ----------------------------------------------------------------------------- parity
LAYOUT_CASES = [("dino_pretrain", False), ("dino_full", True), ("ibot_teacher", False),
                ("ibot_student_flat", False), ("ibot_full", True), ("cribo_full", True),
                ("synclr", False), ("stablerep", True)]


@pytest.mark.parametrize("case,needs_trust", LAYOUT_CASES)
def test_layout_parity(tmp_path, case, needs_trust):
    gen = torch.Generator().manual_seed(zlib.crc32(case.encode()))
    obj, teacher, student = make_layout(case, gen)
    path = tmp_path / f"{case}.pth"
    torch.save(obj, path)
    expected_layout = "ibot_teacher" if case == "ibot_student_flat" else case
    backbone, report = import_checkpoint(path, tmp_path / "imported", trust=needs_trust)
    assert report.layout == expected_layout  # auto-detected
    assert report.arch == "vit_cpu_tiny" and report.loaded == len(teacher)
    assert report.unpickled is needs_trust
    err = _max_err(backbone, teacher, 64, heads=2)
    assert err < TOL, f"{case}: max abs error {err}"
    # the re-saved harness checkpoint gives the same model, weights-only
    again, meta = load_backbone(tmp_path / "imported")
    assert meta["layout"] == expected_layout and meta["source_sha256"] == sha256_file(path)
    assert _max_err(again.eval(), teacher, 64, heads=2) < TOL
    if student is not None:
        s_backbone, s_report = import_checkpoint(path, which="student", layout=expected_layout, trust=True)
        assert s_report.branch == "student"
        assert _max_err(s_backbone, student, 64, heads=2) < TOL
        assert any("masked_embed" in p for p in s_report.dropped) == (case == "ibot_full")


def test_dropped_keys_are_reported_by_pattern(tmp_path):
    obj, _, _ = make_layout("ibot_full", torch.Generator().manual_seed(1))
    torch.save(obj, tmp_path / "ibot.pth")
    _, report = read_official(tmp_path / "ibot.pth", trust=True)
    assert set(report.dropped) == {"head.*"}
    assert any("last_layer2" in k for k in report.dropped["head.*"])
    assert {"student", "optimizer", "args", "ibot_loss"} <= set(report.not_read)
    assert "dropped" in report.summary() and "head.*" in report.summary()


def test_real_size_vit_s16(tmp_path):
    gen = torch.Generator().manual_seed(3)
    t = official_vit(gen, dim=384, depth=12, patch=16, grid=14)
    torch.save(t, tmp_path / "dino_deitsmall16_pretrain.pth")
    backbone, report = import_checkpoint(tmp_path / "dino_deitsmall16_pretrain.pth", arch="vit_small_patch16_224")
    assert report.arch == "vit_small_patch16_224" and report.layout == "dino_pretrain"
    err = _max_err(backbone, t, 224, heads=6, batch=1)
    assert err < TOL, f"dino_pretrain ViT-S/16 @224: max abs error {err}"


def test_pos_embed_interpolation(tmp_path):
    """A checkpoint imported for another input size: pos_embed resized once with the
    official interpolation; equal to the reference forward and to run-time interpolation."""
    path = _tiny(tmp_path)
    t = torch.load(path, weights_only=True)
    native, _ = import_checkpoint(path)
    resized, report = import_checkpoint(path, img_size=96)
    assert resized.pos_embed.shape[1] == 1 + 12 * 12 and "8x8 -> 12x12" in report.pos_embed
    err = _max_err(resized, t, 96, heads=2)
    assert err < TOL, f"dino_pretrain imported @96 (pos_embed 8x8 -> 12x12): max abs error {err}"
    err_runtime = _max_err(native, t, 96, heads=2)
    assert err_runtime < TOL, f"dino_pretrain @64 run @96 (run-time interpolation): max abs error {err_runtime}"
    x = torch.randn(1, 3, 96, 96)
    with torch.no_grad():
        assert torch.allclose(resized.forward_tokens(x), native.forward_tokens(x), atol=1e-6)


def test_detect_arch_from_official_shapes():
    def meta_state(dim, depth, patch, grid):
        return {"cls_token": torch.empty(1, 1, dim, device="meta"),
                "pos_embed": torch.empty(1, 1 + grid * grid, dim, device="meta"),
                "patch_embed.proj.weight": torch.empty(dim, 3, patch, patch, device="meta"),
                **{f"blocks.{i}.mlp.fc1.weight": torch.empty(4 * dim, dim, device="meta") for i in range(depth)}}
    assert detect_arch(meta_state(1024, 24, 14, 16))[0] == "vit_large_patch14_224"  # SynCLR ViT-L/14
    assert detect_arch(meta_state(768, 12, 8, 28))[0] == "vit_base_patch8_224"
    name, kw = detect_arch(meta_state(384, 12, 16, 32))  # a 512-px pos_embed
    assert name == "vit_small_patch16_224" and kw["img_size"] == 512
    name, kw = detect_arch(meta_state(96, 5, 4, 8))
    assert kw == dict(img_size=32, patch_size=4, embed_dim=96, depth=5, num_heads=1)


# ----------------------------------------------------------------------------- audit errors
def _tiny(tmp_path, mutate=None, layout="dino_pretrain", name="x.pth"):
    obj, _, _ = make_layout(layout, torch.Generator().manual_seed(0))
    if mutate:
        mutate(obj)
    torch.save(obj, tmp_path / name)
    return tmp_path / name


def test_missing_key_is_an_error(tmp_path):
    path = _tiny(tmp_path, lambda o: o.pop("blocks.1.mlp.fc2.bias"))
    with pytest.raises(CheckpointError, match=r"missing keys \['blocks.1.mlp.fc2.bias'\]"):
        import_checkpoint(path)


def test_unexpected_keys_are_errors(tmp_path):
    path = _tiny(tmp_path, lambda o: o.update({"blocks.0.ls1.gamma": torch.ones(64)}))
    with pytest.raises(CheckpointError, match="unexpected keys.*blocks.0.ls1.gamma"):
        import_checkpoint(path)
    path = _tiny(tmp_path, lambda o: o["teacher"].update({"projector.weight": torch.ones(2)}), "dino_full", "f.pth")
    with pytest.raises(CheckpointError, match="projector.weight"):
        import_checkpoint(path, trust=True)
    # a user's extra head can be dropped explicitly, and is then reported
    _, report = read_official(path, trust=True, extra_drop=("projector.*",))
    assert report.dropped["projector.*"] == ["projector.weight"]


def test_wrong_arch_and_wrong_layout(tmp_path):
    path = _tiny(tmp_path)
    with pytest.raises(CheckpointError, match="does not hold a vit_small_patch16_224"):
        import_checkpoint(path, arch="vit_small_patch16_224")
    with pytest.raises(CheckpointError, match="layout synclr expects the backbone under"):
        import_checkpoint(path, layout="synclr")
    torch.save({"foo": {"bar": torch.ones(1)}}, tmp_path / "odd.pth")
    with pytest.raises(CheckpointError, match="cannot recognise the checkpoint layout"):
        import_checkpoint(tmp_path / "odd.pth")


def test_trust_flag(tmp_path):
    path = _tiny(tmp_path, layout="cribo_full", name="vits16-coco.pth")
    with pytest.raises(CheckpointError) as exc:
        import_checkpoint(path, tmp_path / "out")
    msg = str(exc.value)
    assert "--trust-checkpoint" in msg and "argparse.Namespace" in msg
    assert not (tmp_path / "out.safetensors").exists()
    backbone, report = import_checkpoint(path, tmp_path / "out", trust=True)
    assert report.unpickled and report.saved
    state, meta = load_checkpoint(tmp_path / "out")  # safetensors: weights only, no pickle
    assert meta["method"] == "cribo" and meta["arch"] == "vit_cpu_tiny"
    assert meta["source_sha256"] == sha256_file(path) and meta["source_file"].endswith("vits16-coco.pth")
    assert set(state) == set(backbone.backbone_state_dict())



def test_a_flat_vit_file_is_method_unknown_unless_its_layout_is_named(tmp_path, capsys):
    """A timm ViT file (or DINO's flat release: the same keys) says nothing of its method."""
    from harness.cli import main
    from harness.models.checkpoints import load_checkpoint as load

    gen = torch.Generator().manual_seed(5)
    torch.save(official_vit(gen), tmp_path / "flat.pth")
    assert main(["zoo", "convert", str(tmp_path / "flat.pth"), "--out", str(tmp_path / "conv")]) == 0
    assert "method unknown" in capsys.readouterr().out
    assert load(tmp_path / "conv.safetensors")[1]["method"] == "unknown"
    _, named = read_official(tmp_path / "flat.pth", layout="dino_pretrain")
    assert named.method == "dino"  # the layout named by the user (zoo import names it from the zoo entry)
    obj, _, _ = make_layout("ibot_full", torch.Generator().manual_seed(1))
    torch.save(obj, tmp_path / "ibot.pth")
    assert read_official(tmp_path / "ibot.pth", trust=True)[1].method == "ibot"  # keys that mark the family
