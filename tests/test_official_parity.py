"""Parity with the official model classes: each layout's test checkpoint was written by the
official repository's own class and save code (scripts/official_parity/generate_fixtures.py,
run outside the project on checkouts of the official repositories; provenance.json beside
each fixture names the repository, its commit and the environment), together with that
class's CLS / patch (/ register) tokens on seeded inputs at the native size and at one other
size. The imported backbone must give the same tokens (<= 1e-5).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from harness.models.checkpoints import load_backbone
from harness.errors import CheckpointError
from harness.models.importers import import_checkpoint, read_official

FIXTURES = Path(__file__).parent / "fixtures" / "official"
TOL = 1e-5
PARITY: dict[str, float] = {}  # case -> max abs error, printed by the last test (pytest -s)

# case -> (layout it is detected as, needs --trust-checkpoint, register tokens)
CASES = {
    "dinov2": ("dinov2", False, 0),
    "dinov2_reg": ("dinov2", False, 4),
    "dinov2_swiglu_reg": ("dinov2", False, 4),
    "mae": ("mae", False, 0),
    "croc_full": ("croc_full", True, 0),
    "timet": ("timet", False, 0),
    "leopart": ("leopart", False, 0),
    "neco_dinov2r": ("neco", False, 4),
}


def to_input(u8: torch.Tensor) -> torch.Tensor:
    """The generator's formula (provenance.json: seed_inputs)."""
    return (u8.float() / 255.0 - 0.45) / 0.225


def reference(case: str) -> dict:
    return torch.load(FIXTURES / case / "reference.pt", weights_only=True)


def heads(case: str) -> int:
    """The head count is not in the shapes; the tiny fixtures' is in their provenance."""
    return json.loads((FIXTURES / case / "provenance.json").read_text())["constructor"]["num_heads"]


def imported(case: str, out=None, **kw):
    kw.setdefault("trust", CASES[case][1])
    return import_checkpoint(FIXTURES / case / "checkpoint.pth", out, num_heads=heads(case), **kw)


def max_error(backbone, u8: torch.Tensor, expected: dict) -> float:
    with torch.no_grad():
        f = backbone.get_features(to_input(u8))
    b, _, h, w, d = f.patches.shape
    errs = [(f.cls[:, -1] - expected["cls"]).abs().max(),
            (f.patches[:, -1].reshape(b, h * w, d) - expected["patches"]).abs().max()]
    if "registers" in expected:
        errs.append((f.registers[:, -1] - expected["registers"]).abs().max())
    else:
        assert f.registers is None
    return max(e.item() for e in errs)


def test_fixtures_have_provenance():
    for case in CASES:
        prov = json.loads((FIXTURES / case / "provenance.json").read_text())
        assert len(prov["commit"]) == 40 and prov["repo"] and prov["environment"]["torch"]
        assert prov["generator"] == "scripts/official_parity/generate_fixtures.py"


@pytest.mark.parametrize("case", list(CASES))
def test_official_parity(tmp_path, case):
    layout, trust, regs = CASES[case]
    ref = reference(case)
    backbone, report = imported(case, tmp_path / case)
    assert report.layout == layout  # auto-detected
    assert backbone.num_reg_tokens == regs
    for res in ("native", "other"):
        err = max_error(backbone, ref["inputs"][res], ref["outputs"][res])
        PARITY[f"{case} @{res} {tuple(ref['inputs'][res].shape[-2:])}"] = err
        assert err <= TOL, f"{case} at {res}: max abs error {err}"
    # the re-saved harness checkpoint is the same model, and keeps the forward settings
    again, meta = load_backbone(tmp_path / case)
    assert again.pos_interp_id == backbone.pos_interp_id and meta["layout"] == layout
    assert max_error(again.eval(), ref["inputs"]["other"], ref["outputs"]["other"]) <= TOL


@pytest.mark.parametrize("case,branch", [("croc_full", "student"), ("timet", "student"), ("leopart", "teacher")])
def test_other_branch_parity(case, branch):
    """Full checkpoints hold two backbones: the one the release is evaluated with by default
    (CrOC / TimeT: the teacher; Leopart: its loader's `model`, the student) and the other."""
    layout, trust, _ = CASES[case]
    ref = reference(case)
    backbone, report = imported(case, which=branch)
    assert report.branch == branch
    for res in ("native", "other"):
        err = max_error(backbone, ref["inputs"][res], ref["outputs"][f"{branch}_{res}"])
        PARITY[f"{case} {branch} @{res}"] = err
        assert err <= TOL


def test_dinov2_registers_and_interpolation_settings():
    plain, _ = imported("dinov2")
    reg, report = imported("dinov2_reg")
    # without registers: DINO's interpolation; with: the hub's offset 0 + antialias
    assert plain.pos_interp_id == "official" and plain.num_prefix_tokens == 1
    assert reg.pos_interp_id == "official:size,antialias" and reg.num_prefix_tokens == 5
    assert report.dropped == {"mask_token": ["mask_token"]}
    assert any("register_tokens -> reg_token" in n for n in report.renamed)
    assert report.forward == {"pos_interp_offset": 0.0, "pos_interp_antialias": True}
    assert reg.pos_embed.shape[1] == 16  # the grid only: CLS's own position folded into cls_token
    swiglu, report = imported("dinov2_swiglu_reg")
    assert swiglu.arch_kwargs["ffn_layer"] == "swiglufused" and any("w12" in n for n in report.renamed)


def test_dinov2_imported_at_another_size():
    """pos_embed resized once at import with the model's own interpolation = run-time
    interpolation (here DINOv2-reg's antialiased, size-based one; 4x4 -> 3x5 is not square,
    so only the run-time path applies; a square size checks the import path)."""
    ref = reference("dinov2_reg")
    native, _ = imported("dinov2_reg")
    resized, report = imported("dinov2_reg", img_size=70)
    assert "4x4 -> 5x5" in report.pos_embed
    x = to_input(torch.randint(0, 256, (1, 3, 70, 70), generator=torch.Generator().manual_seed(0), dtype=torch.uint8))
    with torch.no_grad():
        assert torch.allclose(native.forward_tokens(x), resized.forward_tokens(x), atol=1e-6)
    assert max_error(native, ref["inputs"]["other"], ref["outputs"]["other"]) <= TOL


def test_mae_encoder_only_and_resized_import(tmp_path):
    """The released mae_pretrain_vit_*.pth hold the encoder only under 'model'; MAE's own
    resize (util/pos_embed.interpolate_pos_embed, square) at import equals its reference."""
    ref = reference("mae")
    full = torch.load(FIXTURES / "mae" / "checkpoint.pth", weights_only=True)
    encoder = {k: v for k, v in full["model"].items() if not k.startswith("decoder_") and k != "mask_token"}
    torch.save({"model": encoder}, tmp_path / "mae_pretrain_vit_tiny.pth")
    backbone, report = import_checkpoint(tmp_path / "mae_pretrain_vit_tiny.pth", num_heads=heads("mae"))
    assert report.layout == "mae" and not report.dropped
    assert backbone.pos_interp_id == "official:size"
    assert max_error(backbone, ref["inputs"]["other"], ref["outputs"]["other"]) <= TOL
    resized, report = import_checkpoint(tmp_path / "mae_pretrain_vit_tiny.pth", img_size=48, num_heads=heads("mae"))
    assert "4x4 -> 6x6" in report.pos_embed
    err = max_error(resized, ref["inputs"]["other"], ref["outputs"]["other"])
    PARITY["mae imported @48 (pos_embed 4x4 -> 6x6)"] = err
    assert err <= TOL
    _, full_report = read_official(FIXTURES / "mae" / "checkpoint.pth")
    assert set(full_report.dropped) == {"decoder_*", "mask_token"}


def test_leopart_lightning_checkpoint(tmp_path):
    """Leopart's loader also reads a Lightning checkpoint ({'state_dict': ..., 'epoch', ...})."""
    ref = reference("leopart")
    state = torch.load(FIXTURES / "leopart" / "checkpoint.pth", weights_only=True)
    torch.save({"state_dict": state, "epoch": 50, "global_step": 1000}, tmp_path / "leopart.ckpt")
    backbone, report = import_checkpoint(tmp_path / "leopart.ckpt", which="student", num_heads=heads("leopart"))
    assert report.layout == "leopart" and set(report.not_read) == {"epoch", "global_step"}
    assert set(report.dropped) == {"teacher.*", "model.projection_head.*", "model.prototypes.*"}
    assert max_error(backbone, ref["inputs"]["native"], ref["outputs"]["native"]) <= TOL


def test_timet_without_teacher_loads_the_student(tmp_path):
    """TimeT's README loader ends up with the EMA teacher when the file has one, else with
    the student (feature_extractor); the importer does the same and says which."""
    ref = reference("timet")
    state = torch.load(FIXTURES / "timet" / "checkpoint.pth", weights_only=True)
    student_only = {k: v for k, v in state.items() if not k.startswith("teacher")}
    torch.save(student_only, tmp_path / "TimeT.pth")
    backbone, report = import_checkpoint(tmp_path / "TimeT.pth", num_heads=heads("timet"))
    assert report.layout == "timet" and report.branch == "student"
    assert max_error(backbone, ref["inputs"]["native"], ref["outputs"]["student_native"]) <= TOL


def test_mismatched_layouts_fail_with_one_clear_error(tmp_path):
    reg = FIXTURES / "dinov2_reg" / "checkpoint.pth"
    with pytest.raises(CheckpointError, match=r"layout mae expects the backbone under \['model'\]"):
        import_checkpoint(reg, layout="mae")
    with pytest.raises(CheckpointError, match="does not hold a vit_small_patch14_dinov2"):
        import_checkpoint(reg, arch="vit_small_patch14_dinov2")
    # a DINOv2 file read as a DINO one: the registers and layer scales are named, not ignored
    with pytest.raises(CheckpointError, match="unexpected keys.*(register_tokens|ls1.gamma)"):
        import_checkpoint(reg, layout="dino_pretrain", extra_drop=("mask_token",))
    # a CrOC file read as CrIBo's: the loss entry differs, but both hold last_layer_c; the
    # backbone is the same kind, so reading it works, and auto-detection names CrOC
    _, report = read_official(FIXTURES / "croc_full" / "checkpoint.pth", trust=True)
    assert report.layout == "croc_full" and report.method == "croc" and "croc_loss" in report.not_read
    with pytest.raises(CheckpointError, match=r"neither backbone weights \(prefix 'model.'\).*"
                                              r"feature_extractor.backbone.*not a leopart checkpoint"):
        import_checkpoint(FIXTURES / "timet" / "checkpoint.pth", layout="leopart")


def test_print_parity_errors():
    for name, err in sorted(PARITY.items()):
        print(f"official parity max abs error {name:48s} {err:.2e}")


def test_forward_settings_are_part_of_the_model_identity(tmp_path):
    """Register tokens and the position interpolation are in the model record; an interpolation
    other than DINO's makes the weights another model for records and feature caches."""
    import shutil

    from harness.models.handle import ModelHandle

    imported("dinov2_reg", tmp_path / "reg")
    reg = ModelHandle.from_checkpoint(tmp_path / "reg.safetensors")
    info = reg.record_info()
    assert info["reg_tokens"] == 4 and info["pos_interp"] == "official:size,antialias" and info["patch_size"] == 14
    assert info["weights_key"].startswith("fwd-") and info["weights_key"] != reg.meta["sha256"]
    # the same weights with DINO's interpolation: another key
    shutil.copy(tmp_path / "reg.safetensors", tmp_path / "reg_dino.safetensors")
    meta = json.loads((tmp_path / "reg.json").read_text())
    meta["arch_kwargs"].update(pos_interp_offset=0.1, pos_interp_antialias=False)
    (tmp_path / "reg_dino.json").write_text(json.dumps(meta))
    other = ModelHandle.from_checkpoint(tmp_path / "reg_dino.safetensors").record_info()
    assert other["pos_interp"] == "official" and other["weights_key"] == meta["sha256"] != info["weights_key"]
    imported("dinov2", tmp_path / "plain")
    plain = ModelHandle.from_checkpoint(tmp_path / "plain.safetensors")
    assert plain.cache_key == plain.meta["sha256"] and plain.record_info()["reg_tokens"] == 0


def _official_meta_state(dim, depth, reg=0, swiglu=False, grid=37, patch=14):
    """The key names and shapes of a released DINOv2 hub file, on the meta device."""
    m = lambda *s: torch.empty(*s, device="meta")  # noqa: E731
    sd = {"cls_token": m(1, 1, dim), "pos_embed": m(1, 1 + grid * grid, dim), "mask_token": m(1, dim),
          "patch_embed.proj.weight": m(dim, 3, patch, patch)}
    if reg:
        sd["register_tokens"] = m(1, reg, dim)
    for i in range(depth):
        sd[f"blocks.{i}.ls1.gamma"] = m(dim)
        if swiglu:
            from harness.models.backbone import swiglu_hidden

            sd[f"blocks.{i}.mlp.w12.weight"] = m(2 * swiglu_hidden(dim), dim)
        else:
            sd[f"blocks.{i}.mlp.fc1.weight"] = m(4 * dim, dim)
    return sd


@pytest.mark.parametrize("dim,depth,reg,swiglu,name", [
    (384, 12, 0, False, "vit_small_patch14_dinov2"), (768, 12, 4, False, "vit_base_patch14_reg4_dinov2"),
    (1024, 24, 0, False, "vit_large_patch14_dinov2"), (1536, 40, 4, True, "vit_giant_patch14_reg4_dinov2")])
def test_released_dinov2_shapes_detect_the_presets(dim, depth, reg, swiglu, name):
    from harness.models.importers import adapt_dinov2, detect_arch

    state = {k: v for k, v in _official_meta_state(dim, depth, reg, swiglu).items() if k != "mask_token"}
    state, settings, _ = adapt_dinov2(state)
    arch, kw = detect_arch(state, None, settings)
    assert arch == name and kw["img_size"] == 518 and kw["patch_size"] == 14
    # SynCLR's ViT-L/14 has no layer scale: the shapes keep the two apart
    assert arch != "vit_large_patch14_224"
