"""The mmseg protocols on models mmseg's ViT cannot load (benchmarks/segmentation/mmseg_adapted.py):
which path a model takes, the mmseg backbone module, the mask head's count, the refusals, and
(slow) seg_linear and Segmenter end to end on a ResNet, a Swin, a transformers DINOv2 and user
code with random weights on a few SynthScenes images."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from torch import nn

from benchmarks.segmentation import mmseg_adapted as ma
from benchmarks.segmentation.seg_linear import SegLinear
from benchmarks.segmentation.seg_protocol import mmseg_vit_weights
from benchmarks.segmentation.segmenter import Segmenter
from harness.errors import ConfigError, NotApplicable
from harness.models.sources import build_model
from test_seg import needs_mmseg

TINY = {"dataset": "synth_ade", "crop_size": 64, "iters": 2, "lrs": [1e-3], "batch_size": 2,
        "num_workers": 0, "val_interval": 0, "log_interval": 1}
SMALL_SWIN = {"source": "timm", "target": "swin_tiny_patch4_window7_224", "weights": "random",
              "embed_dim": 16, "depths": [1, 1, 1, 1], "num_heads": [1, 2, 2, 4]}  # width 128, 4 heads


def _few_ade_images(root: Path, out: Path, n_train: int = 4, n_val: int = 1) -> Path:
    """SynthScenes tiny's ADE layout, trimmed to a few images (the runs' time is mostly validation)."""
    src = root / "ADEChallengeData2016"
    dst = out / "ADEChallengeData2016"
    for split, n in (("training", n_train), ("validation", n_val)):
        for kind, ext in (("images", ".jpg"), ("annotations", ".png")):
            (dst / kind / split).mkdir(parents=True)
            for p in sorted((src / kind / split).glob(f"*{ext}"))[:n]:
                shutil.copy(p, dst / kind / split / p.name)
    shutil.copy(root / "meta.json", out / "meta.json")
    return out


# ============================================================================ which path
def test_vits_mmseg_computes_keep_its_vit_path_and_their_fingerprint():
    proto = SegLinear.from_preset("synth")
    harness_vit = build_model("random_init:vit_cpu_tiny")
    assert mmseg_vit_weights(harness_vit.backbone) is not None
    assert proto.model_settings(harness_vit) == {}
    timm_vit = build_model({"source": "timm", "target": "vit_small_patch16_224.dino", "weights": "random",
                            "depth": 1})  # a plain timm ViT: what the harness ViT computes
    state, arch = mmseg_vit_weights(timm_vit.backbone)
    assert arch["num_heads"] == 6 and "cls_token" in state and proto.model_settings(timm_vit) == {}
    for model in (build_model("timm:resnet18,weights=random"),
                  build_model("random_init:vit_cpu_tiny,reg_tokens=4"),  # mmseg's ViT has no registers
                  build_model({"source": "timm", "target": "vit_small_patch16_224.augreg_in21k", "weights": "random",
                               "depth": 1})):  # its tag declares mean = std = 0.5: not the harness ViT's input
        assert mmseg_vit_weights(model.backbone) is None
        spec = proto.model_settings(model)["head_spec"]
        assert spec["backbone"] == "feature_contract" and spec["head"] == "linear"


def test_one_fingerprint_for_every_model_the_head_spec_is_the_models(tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    vit, r18 = build_model("random_init:vit_cpu_tiny"), build_model("timm:resnet18,weights=random")
    swin = build_model(SMALL_SWIN)
    for cls in (SegLinear, Segmenter):
        proto = cls.from_preset("synth")
        plain = proto.fingerprint()
        identities = [proto.identity(root, m) for m in (None, vit, r18, swin)]
        assert {i.fingerprint for i in identities} == {plain}  # CNN, ViT and Swin: the protocol's one
        assert identities[1].model_settings == {}  # the ViT path builds nothing of its own
        assert [i.model_settings["head_spec"]["backbone"] for i in identities[2:]] == ["feature_contract"] * 2
    spec = Segmenter.from_preset("synth").identity(root, r18).model_settings["head_spec"]
    assert (spec["mask_heads"], spec["mask_heads_from"]) == (8, "width/64")  # 512 wide
    assert spec["mask_layers"] == 2 and spec["backbone_mode"].startswith("train")
    assert Segmenter.from_preset("synth").identity(root, swin).model_settings["head_spec"]["mask_heads"] == 4


def test_work_dir_is_keyed_by_the_adapter_settings(tmp_path, monkeypatch):
    from harness.data.io import data_stamp

    monkeypatch.setenv("SSL_BENCH_HOME", str(tmp_path / "home"))
    root = tmp_path / "data"
    root.mkdir()
    proto = SegLinear.from_preset("synth")
    vit = build_model("random_init:vit_cpu_tiny")
    assert proto.default_work_dir(vit, root) == (tmp_path / "home" / "mmseg" / vit.cache_key[:16]
                                                 / f"seg_linear-{proto.fingerprint()}-{data_stamp(root)[:8]}")
    a = build_model("timm:resnet18,weights=random")
    b = build_model("timm:resnet18,weights=random,norm=clip")  # the same weights, another adapter setting
    assert a.cache_key != b.cache_key and a.meta["_weights_hash"] == b.meta["_weights_hash"]
    dirs = {proto.default_work_dir(m, root) for m in (vit, a, b)}
    assert len(dirs) == 3


# ============================================================================ the head count
class _Attn(nn.Module):
    def __init__(self, heads: int):
        super().__init__()
        self.num_heads = heads
        self.proj = nn.Linear(4, 4)


def test_mask_head_count_rule():
    assert ma.mask_heads(nn.Conv2d(3, 8, 1), 512) == (8, "width/64")    # ResNet-18
    assert ma.mask_heads(nn.Conv2d(3, 8, 1), 320) == (5, "width/64")    # ConvNeXt-atto
    assert ma.mask_heads(nn.Conv2d(3, 8, 1), 2048) == (32, "width/64")  # ResNet-50
    assert ma.mask_heads(nn.Conv2d(3, 8, 1), 48) == (1, "width/64")     # narrower than one head
    assert ma.mask_heads(nn.Conv2d(3, 8, 1), 200) == (2, "width/64")    # 3 does not divide 200
    assert ma.mask_heads(nn.Sequential(_Attn(6), _Attn(12)), 768) == (12, "model")  # the last one declared
    assert ma.mask_heads(_Attn(5), 64) == (1, "width/64")  # declared, but it does not divide the width
    swin = build_model(SMALL_SWIN)
    assert ma.mask_heads(swin.backbone, swin.backbone.embed_dim) == (4, "model")  # its last stage's


def test_transformers_models_declare_their_heads(tmp_path):
    pytest.importorskip("transformers")
    from model_zoo_fixtures import tiny_dinov2

    hf_dir, _ = tiny_dinov2(tmp_path)
    model = build_model(f"hf:{hf_dir}")
    assert ma.declared_heads(model.backbone) == 2
    assert Segmenter.from_preset("synth").model_settings(model)["head_spec"]["mask_heads"] == 2


# ============================================================================ refusals
def test_refusals_name_the_reason(tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    r18 = build_model("timm:resnet18,weights=random")
    with pytest.raises(ConfigError, match=r"crop_size 80 is not a multiple of the model's stride 32.*64 or 96"):
        SegLinear.from_preset("synth", {"crop_size": 80}).run(r18, root)
    with pytest.raises(NotApplicable, match="stride 32 is larger than the crop 16"):
        Segmenter.from_preset("synth", {"crop_size": 16}).run(r18, root)
    with pytest.raises(NotApplicable, match="raw-pixel baseline"):
        SegLinear.from_preset("synth").run(build_model("pixels:"), root)

    class NoGrid(nn.Module):
        patch_size = None
        embed_dim = 8

    with pytest.raises(NotApplicable, match="gives none"):
        ma.check_applicable(NoGrid(), SegLinear.from_preset("synth").cfg, "seg_linear")

    class WrongGrid(nn.Module):  # states stride 8, gives a 1x1 grid
        patch_size = 8
        embed_dim = 4

        def get_features(self, x, n, final_norm):
            from harness.models.backbone import BackboneFeatures

            return BackboneFeatures(cls=torch.zeros(1, 1, 4), patches=torch.zeros(1, 1, 1, 1, 4))

    with pytest.raises(NotApplicable, match="expected \\(1, 1, 8, 8, d\\)"):
        ma.check_applicable(WrongGrid(), SegLinear.from_preset("synth").cfg, "seg_linear")
    assert ma.check_applicable(r18.backbone, SegLinear.from_preset("synth").cfg, "seg_linear") == (2, 2)


# ============================================================================ the mmseg module
def _build(model, frozen: bool):
    from mmseg.registry import MODELS

    ma.register_feature_backbone()
    with ma.handed_over(model.cache_key, model.backbone):
        return MODELS.build(ma.feature_backbone_config(model.cache_key, frozen))


@needs_mmseg
def test_feature_backbone_returns_the_patch_grid_frozen_or_trainable():
    model = build_model("timm:resnet18,weights=random")
    before = {k: v.clone() for k, v in model.backbone.state_dict().items()}
    frozen = _build(model, frozen=True)
    assert frozen.backbone is not model.backbone  # a copy: every lr starts from the same weights
    frozen.train()  # what mmengine's loop calls every iteration
    assert not any(m.training for m in frozen.modules())  # BatchNorm statistics stay put
    assert not any(p.requires_grad for p in frozen.parameters())
    torch.manual_seed(0)
    x = torch.randn(2, 3, 64, 96)
    (fmap,) = frozen(x)
    assert fmap.shape == (2, 512, 2, 3) and not fmap.requires_grad
    with torch.no_grad():
        want = model.backbone.get_features(x, 1, True).patches[:, 0].permute(0, 3, 1, 2)
    torch.testing.assert_close(fmap, want, atol=0, rtol=0)
    # a sliding-window crop that is not a multiple of the stride: padded bottom / right, as AdaptivePadding
    (padded,) = frozen(x[:, :, :50, :70])
    assert padded.shape == (2, 512, 2, 3)

    trainable = _build(model, frozen=False)
    trainable.train()
    assert trainable.training and all(p.requires_grad for p in trainable.parameters())
    trainable(x)[0].square().mean().backward()
    assert trainable.backbone.model.conv1.weight.grad is not None
    with torch.no_grad():
        for p in trainable.parameters():
            p.sub_(0.1)
    # the caller's model is untouched by either module
    assert all(torch.equal(v, before[k]) for k, v in model.backbone.state_dict().items())
    assert not model.backbone.training and model.backbone.model.conv1.weight.grad is None


@needs_mmseg
def test_feature_backbone_takes_user_code_and_vits_with_registers(tmp_path):
    from model_zoo_fixtures import user_code

    code = user_code(tmp_path)
    for spec, shape in ((f"code:{code}:build,features={code}:features", (1, 48, 8, 8)),
                        ("random_init:vit_cpu_tiny,reg_tokens=4", (1, 64, 8, 8))):
        model = build_model(spec)
        x = torch.randn(1, 3, 64, 64)
        (fmap,) = _build(model, frozen=True)(x)
        with torch.no_grad():
            want = model.backbone.get_features(x, 1, True).patches[:, 0].permute(0, 3, 1, 2)
        assert fmap.shape == shape
        torch.testing.assert_close(fmap, want, atol=0, rtol=0)


@needs_mmseg
def test_mmengine_init_leaves_the_handed_over_weights():
    """mmengine's init_weights walks every child; a timm ViT's own init_weights (the harness ViT's
    too) re-draws its weights, so the wrapper must stop there."""
    from mmseg.registry import MODELS

    from benchmarks.segmentation import mmseg_config

    model = build_model("random_init:vit_cpu_tiny,reg_tokens=4")  # a timm VisionTransformer subclass
    ma.register_feature_backbone()
    with ma.handed_over(model.cache_key, model.backbone):
        seg = MODELS.build(dict(type="EncoderDecoder", backbone=ma.feature_backbone_config(model.cache_key, False),
                                decode_head=mmseg_config.head_config("linear", 64, 2, 4)))
    seg.init_weights()  # what mmengine's Runner calls before training
    for k, v in model.backbone.state_dict().items():
        assert torch.equal(seg.backbone.backbone.state_dict()[k], v), k


@needs_mmseg
def test_linear_head_width_comes_from_the_adapter(tmp_path, monkeypatch, synth_tiny):
    from benchmarks.segmentation import mmseg_config
    from harness.data import mmseg_layouts

    seen = {}

    def capture(cfg, data, work_dir, *, backbone, decode_head, head):
        seen.update(backbone=backbone, decode_head=decode_head)
        return []

    monkeypatch.setattr(ma, "run_sweep", capture)
    convnext = build_model("timm:convnext_atto,weights=random")
    ma.run_feature_seg_protocol(convnext.backbone, convnext.cache_key, SegLinear.from_preset("synth", TINY).cfg,
                                synth_tiny, tmp_path, head="linear", frozen=True, protocol="seg_linear")
    assert seen["decode_head"]["type"] == "FCNHead" and seen["decode_head"]["in_channels"] == 320
    assert seen["backbone"] == {"type": "SslBenchFeatureBackbone", "backbone_key": convnext.cache_key,
                                "frozen": True}
    ma.run_feature_seg_protocol(convnext.backbone, convnext.cache_key, Segmenter.from_preset("synth", TINY).cfg,
                                synth_tiny, tmp_path, head="mask", frozen=False, protocol="segmenter")
    assert (seen["decode_head"]["embed_dims"], seen["decode_head"]["num_heads"]) == (320, 5)
    with pytest.raises(ConfigError, match="no model was handed over"):
        ma.handed(convnext.cache_key)  # handed back after the run
    data = mmseg_layouts.resolve_data("synth_ade", synth_tiny)
    mm = mmseg_config.build_mmseg_config(Segmenter.from_preset("synth", TINY).cfg, data,
                                         backbone=seen["backbone"], decode_head=seen["decode_head"], lr=1e-3,
                                         work_dir=tmp_path, csv_path=tmp_path / "c.csv", experiment="x")
    assert mm.model_wrapper_cfg.find_unused_parameters  # a pooler the features never reach, under DDP


# ============================================================================ slow: end to end
@pytest.mark.slow
@needs_mmseg
def test_both_protocols_on_a_resnet_a_swin_a_transformers_dinov2_and_user_code(synth_tiny, isolated_home):
    pytest.importorskip("transformers")
    from harness.protocol_info import build_protocol
    from harness.running.evaluate import evaluate
    from model_zoo_fixtures import tiny_dinov2, user_code

    data = _few_ade_images(synth_tiny, isolated_home / "ade")
    hf_dir, _ = tiny_dinov2(isolated_home)
    code = user_code(isolated_home)
    for spec, crop in (("timm:resnet18,weights=random", 64), (SMALL_SWIN, 64), (f"hf:{hf_dir}", 56),
                       (f"code:{code}:build,features={code}:features", 64)):
        model = build_model(spec)
        for name in ("seg_linear", "segmenter"):
            protocol = build_protocol(name, "synth", {**TINY, "crop_size": crop})
            records, skipped = evaluate(model, protocol, data)
            assert not skipped and [r["variant"]["lr"] for r in records] == [1e-3, "best"]
            for rec in records:
                assert 0 <= rec["metrics"]["mIoU"] <= 100, (spec, name)
                assert rec["model"]["weights_key"] == model.cache_key and rec["model"]["adapter"]
                assert rec["protocol"]["fingerprint"] == protocol.fingerprint()  # the protocol's, not the model's
                assert "head_spec" not in rec["protocol"]["params"]
                spec_ = rec["model"]["protocol_settings"]["head_spec"]  # the head spec, the model's
                assert spec_["backbone"] == "feature_contract" and ("mask_heads" in spec_) == (name == "segmenter")
            work = Path(records[0]["artifacts"]["work_dir"])
            assert model.cache_key[:16] in str(work)


@pytest.mark.slow
@needs_mmseg
def test_a_timm_vit_and_its_zoo_conversion_share_one_seg_record(synth_tiny, isolated_home):
    """A plain timm ViT takes mmseg's ViT path with the harness ViT's weights key: the same file
    reached through `timm:` and through `zoo convert` is one model, measured once."""
    from harness.cli import main
    from harness.protocol_info import build_protocol
    from harness.running.evaluate import evaluate
    from model_zoo_fixtures import timm_vit_file

    data = _few_ade_images(synth_tiny, isolated_home / "ade")
    path = timm_vit_file(isolated_home)
    assert main(["zoo", "convert", str(path), "--out", str(isolated_home / "converted"), "--drop", "head.*",
                 "--pos-interp", "timm"]) == 0
    via_timm = build_model(f"timm:vit_small_patch16_224.dino,weights={path}", name="vit-s")
    via_zoo = build_model(f"checkpoint:{isolated_home / 'converted.safetensors'}", name="vit-s")
    assert via_timm.cache_key == via_zoo.cache_key
    (state_a, arch_a), (state_b, arch_b) = (mmseg_vit_weights(m.backbone) for m in (via_timm, via_zoo))
    assert arch_a["num_heads"] == arch_b["num_heads"] == 6 and state_a.keys() == state_b.keys()
    assert all(torch.equal(state_a[k], state_b[k]) for k in state_a)  # one mmseg ViT, whichever way
    protocol = build_protocol("seg_linear", "synth", TINY)
    first, skipped = evaluate(via_timm, protocol, data)
    assert not skipped and first[0]["protocol"]["fingerprint"] == protocol.fingerprint()
    assert "head_spec" not in first[0]["protocol"]["params"]  # the ViT path's records as they were
    again, skipped = evaluate(via_zoo, protocol, data)
    assert skipped and [r["metrics"] for r in again] == [r["metrics"] for r in first]


def test_a_refusal_is_one_error_line_and_no_record(synth_tiny, isolated_home, capsys):
    from harness.cli import main

    rc = main(["eval", "--protocol", "seg_linear", "--preset", "synth", "--dataset", "synth_ade", "--data-root",
               str(synth_tiny), "--model", "timm:resnet18,weights=random", "--set", "crop_size=80"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error:") and "stride 32" in err[0]
    runs = isolated_home / "results" / "runs"
    assert not (runs.exists() and list(runs.rglob("*.json")))
    assert not (isolated_home / "home" / "mmseg").exists()


def test_compare_takes_a_resnet_and_random_init_on_the_mmseg_protocols(tmp_path):
    """Records as the runner writes them (the identity's fingerprint, the model settings in the
    model block): a ResNet and a random-init ViT are one comparable column."""
    from harness.results.compare import compare_runs
    from harness.results.records import make_record

    root = tmp_path / "data"
    root.mkdir()
    proto = Segmenter.from_preset("synth")
    records = {}
    for name, spec, miou in (("r18", "timm:resnet18,weights=random", 12.0), ("random_init", "random_init:vit_cpu_tiny",
                                                                            9.0)):
        model = build_model(spec, name=name)
        identity = proto.identity(root, model)
        block = {"name": "segmenter", "preset": "synth", "dataset": "synth_ade", "split": "val",
                 "params": proto.settings(), "fingerprint": identity.fingerprint, "request": identity.request,
                 **identity.data}
        info = {**model.record_info(), **({"protocol_settings": identity.model_settings} if identity.model_settings
                                          else {})}
        records[name] = [make_record(info, block, None, {"lr": "best"}, {"mIoU": miou}, {"wall_s": 1.0})]
    assert "protocol_settings" in records["r18"][0]["model"]
    table = compare_runs(records["random_init"], records["r18"])
    assert len(table) and table["delta"].tolist()[0] == pytest.approx(3.0)
