"""The mmseg protocols (seg_linear, segmenter) and their bridge.

Fast tests that need the mmseg stack skip when it is not installed
(`bash scripts/install_mmcv.sh`); the converter, config and dependency-error tests run
without it. `-m slow` runs the SynthScenes smokes.
"""
from __future__ import annotations

import gc
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from benchmarks.segmentation.mmseg_config import backbone_config, build_mmseg_config
from benchmarks.segmentation.mmseg_vit import register_mmseg_modules
from benchmarks.segmentation.sweep import run_seg_protocol
from benchmarks.segmentation.vit_weights import backbone_kwargs, convert_state_dict, save_converted
from harness.data.mmseg_layouts import resolve_data
from harness.openmmlab.checkpoint_loading import mmengine_checkpoint_loading
from harness.openmmlab.metric import read_validation_log
from harness.openmmlab.stack import require_mmseg
from benchmarks.segmentation import seg_protocol, sweep
from harness.models.backbone import create_backbone
from harness.errors import CheckpointError, ConfigError, DataError, MissingDependencyError
from seg_smoke import smoke

REPO = Path(__file__).resolve().parents[3]


def _mmseg_installed() -> bool:
    """Installed per package metadata, mmcv with its compiled extension (imports nothing:
    importing mmseg takes ~10 s; a stack that is installed but broken then fails the tests
    instead of skipping them)."""
    from importlib import metadata

    try:
        metadata.version("mmsegmentation")
        metadata.version("mmengine")
        files = metadata.files("mmcv") or []
    except metadata.PackageNotFoundError:
        return False
    return any(str(f).startswith("mmcv/_ext") for f in files)


needs_mmseg = pytest.mark.skipif(not _mmseg_installed(), reason="mmseg stack not installed "
                                 "(bash scripts/install_mmcv.sh)")


def _tiny_backbone(seed: int = 0):
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return create_backbone("vit_cpu_tiny").eval()


def _dino_layout(sd: dict) -> dict:
    """A DINO/CrIBo teacher checkpoint: 'backbone.' prefix plus projection-head keys."""
    out = {f"backbone.{k}": v for k, v in sd.items()}
    out["head.mlp.0.weight"] = torch.zeros(8, 64)
    out["head.last_layer.weight_g"] = torch.zeros(8, 1)
    return out


# ============================================================================ converter
def test_key_map_covers_dino_layout():
    sd = _tiny_backbone().backbone_state_dict()
    conv = convert_state_dict(_dino_layout(sd))
    assert len(conv) == len(sd)  # every backbone key mapped once, head keys dropped
    depth = 3
    expected = {"cls_token", "pos_embed", "patch_embed.projection.weight", "patch_embed.projection.bias",
                "ln1.weight", "ln1.bias"}
    for i in range(depth):
        for mm in ("ln1", "ln2", "attn.attn.out_proj", "ffn.layers.0.0", "ffn.layers.1"):
            expected |= {f"layers.{i}.{mm}.weight", f"layers.{i}.{mm}.bias"}
        expected |= {f"layers.{i}.attn.attn.in_proj_weight", f"layers.{i}.attn.attn.in_proj_bias"}
    assert set(conv) == expected
    # values and shapes are carried unchanged
    assert torch.equal(conv["layers.1.attn.attn.in_proj_weight"], sd["blocks.1.attn.qkv.weight"])
    assert conv["layers.2.ffn.layers.0.0.weight"].shape == sd["blocks.2.mlp.fc1.weight"].shape
    assert torch.equal(conv["ln1.weight"], sd["norm.weight"])
    assert torch.equal(conv["layers.0.ln2.bias"], sd["blocks.0.norm2.bias"])


@pytest.mark.parametrize("key", ["reg_token", "fc_norm.weight", "blocks.0.ls1.gamma"])
def test_unknown_keys_are_errors(key):
    sd = dict(_tiny_backbone().backbone_state_dict())
    sd[key] = torch.zeros(1)
    with pytest.raises(CheckpointError, match=re.escape(key)):
        convert_state_dict(sd)


def test_backbone_kwargs_read_off_the_weights():
    sd = _tiny_backbone().backbone_state_dict()
    kw = backbone_kwargs(sd, num_heads=2, crop_size=64, drop_path_rate=0.0)
    assert (kw["embed_dims"], kw["num_layers"], kw["patch_size"], kw["mlp_ratio"]) == (64, 3, 8, 4)
    assert kw["out_indices"] == [2] and kw["final_norm"] and kw["with_cls_token"]
    assert kw["patch_bias"] is True  # mmseg 1.2.2's ViT defaults to no patch bias
    with pytest.raises(CheckpointError, match="multiple of the patch size"):
        backbone_kwargs(sd, num_heads=2, crop_size=60, drop_path_rate=0.0)


# ============================================================================ config
def test_config_defaults_and_fingerprint():
    from benchmarks.segmentation.seg_linear import SegLinear
    from benchmarks.segmentation.segmenter import Segmenter

    lin = SegLinear.from_preset("paper", {"dataset": "ade20k"})
    assert lin.cfg.iters == 160_000 and lin.cfg.lrs == [8e-4, 3e-4, 1e-4, 8e-5]
    assert lin.cfg.mean == [127.5] * 3 and lin.cfg.std == [127.5] * 3
    assert SegLinear.from_preset("paper", {"dataset": "voc"}).cfg.iters == 80_000
    seg = Segmenter.from_preset("paper", {"dataset": "ade20k"})
    assert seg.cfg.lrs == [8e-5, 3e-5, 1e-5, 8e-6] and seg.cfg.eta_min_ratio == 0.1
    fp = lin.fingerprint()
    for change in ({"crop_size": 256}, {"lrs": [1e-4]}, {"mean": [123.675, 116.28, 103.53]},
                   {"iters": 1000}, {"dataset": "voc12aug"}, {"batch_size": 16}):
        assert SegLinear.from_preset("paper", {"dataset": "ade20k", **change}).fingerprint() != fp, change
    for same in ({"num_workers": 8}, {"work_dir": "/elsewhere"}, {"log_interval": 1}):
        assert SegLinear.from_preset("paper", {"dataset": "ade20k", **same}).fingerprint() == fp, same
    # the head is part of the fingerprint: same settings, other protocol
    assert Segmenter({"dataset": "ade20k", "lrs": lin.cfg.lrs, "drop_path_rate": 0.0}).fingerprint() != fp
    with pytest.raises(ConfigError, match="unknown"):
        SegLinear.from_preset("paper", {"dataset": "cityscapes"})


def _mm_config(cfg, data, tmp_path, backbone: dict | None = None):
    """The mmengine config ``build_mmseg_config`` makes for ``cfg`` (nothing is run)."""
    return build_mmseg_config(cfg, data, backbone=backbone or {"type": "SslBenchViT"},
                                 decode_head={"type": "FCNHead"}, lr=cfg.lrs[0], work_dir=tmp_path / "w",
                                 csv_path=tmp_path / "w" / "per_class_iou.csv", experiment="x")


@needs_mmseg
def test_paper_presets_total_batch_is_the_official_launchers(synth_tiny, tmp_path, monkeypatch):
    """CrIBo's eval_launcher.py runs train.py in one process (launcher 'none'; its own parser
    refuses --launcher) with --mmseg_samples_per_gpu 4: a total batch of 4."""
    from benchmarks.segmentation.seg_linear import SegLinear
    from benchmarks.segmentation.segmenter import Segmenter

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    data = resolve_data("synth_ade", synth_tiny)
    for cls in (SegLinear, Segmenter):
        cfg = cls.from_preset("paper", {"dataset": "ade20k"}).cfg
        assert cfg.batch_size == 4, cls
        mm = _mm_config(cfg, data, tmp_path)
        assert mm.launcher == "none" and mm.train_dataloader.batch_size == 4
    # the CPU presets keep theirs
    assert SegLinear.from_preset("synth").cfg.batch_size == 16
    assert Segmenter.from_preset("synth").cfg.batch_size == 8
    # several processes share the total batch
    monkeypatch.setenv("WORLD_SIZE", "2")
    mm = _mm_config(SegLinear.from_preset("paper", {"dataset": "ade20k"}).cfg, data, tmp_path)
    assert mm.launcher == "pytorch" and mm.train_dataloader.batch_size == 2


@needs_mmseg
def test_schedule_is_a_named_setting(synth_tiny, tmp_path, monkeypatch):
    """long (160k / 80k, the paper's text) by default; short = CrIBo's 40k / 20k mask configs,
    with their validation / checkpoint interval of iters / 10."""
    from benchmarks.segmentation.seg_linear import SegLinear
    from benchmarks.segmentation.segmenter import Segmenter

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    want = {"ade20k": (160_000, 40_000), "coco_stuff164k": (160_000, 40_000),
            "voc": (80_000, 20_000), "pascal_context": (80_000, 20_000)}
    for dataset, (long, short) in want.items():
        paper = Segmenter.from_preset("paper", {"dataset": dataset})
        assert (paper.cfg.schedule, paper.cfg.iters) == ("long", long), dataset
        shorter = Segmenter.from_preset("paper", {"dataset": dataset, "schedule": "short"})
        assert (shorter.cfg.schedule, shorter.cfg.iters) == ("short", short), dataset
        assert shorter.fingerprint() != paper.fingerprint()
    assert SegLinear.from_preset("paper", {"dataset": "voc"}).cfg.schedule == "long"
    # the number alone names the schedule it is, or reads custom
    assert Segmenter.from_preset("paper", {"dataset": "voc", "iters": 20_000}).cfg.schedule == "short"
    assert Segmenter.from_preset("paper", {"dataset": "voc", "iters": 1000}).cfg.schedule == "custom"
    with pytest.raises(ConfigError, match="schedule 'short' means iters = 20000"):
        Segmenter.from_preset("paper", {"dataset": "voc", "schedule": "short", "iters": 1000})
    with pytest.raises(ConfigError, match="'custom' needs iters"):
        Segmenter.from_preset("paper", {"dataset": "voc", "schedule": "custom"})

    data = resolve_data("synth_voc", synth_tiny)
    mm = _mm_config(Segmenter.from_preset("paper", {"dataset": "voc", "schedule": "short"}).cfg, data, tmp_path)
    assert mm.train_cfg.max_iters == 20_000 and mm.param_scheduler[0]["end"] == 20_000
    assert mm.train_cfg.val_interval == 2000 and mm.default_hooks.checkpoint.interval == 2000


def test_lr_sweep_is_named_and_every_record_names_its_lr():
    """The paper's sweep by default (its text; the official code runs one lr per launch),
    CrIBo's launcher default (0.01) by name, and every record -- the best one included --
    says which lr its number comes from."""
    from benchmarks.segmentation.seg_linear import LINEAR_LRS, SegLinear
    from benchmarks.segmentation.segmenter import SEGMENTER_LRS, Segmenter

    lin = SegLinear.from_preset("paper", {"dataset": "ade20k"})
    assert (lin.cfg.lr_sweep, lin.cfg.lrs) == ("paper", LINEAR_LRS)
    seg = Segmenter.from_preset("paper", {"dataset": "ade20k"})
    assert (seg.cfg.lr_sweep, seg.cfg.lrs) == ("paper", SEGMENTER_LRS)
    launcher = SegLinear.from_preset("paper", {"dataset": "ade20k", "lr_sweep": "launcher_default"})
    assert launcher.cfg.lrs == [0.01] and launcher.fingerprint() != lin.fingerprint()
    assert Segmenter.from_preset("paper", {"dataset": "ade20k", "lr_sweep": "launcher_default"}).cfg.lrs == [0.01]
    own = SegLinear.from_preset("paper", {"dataset": "ade20k", "lrs": [1e-4]})  # what --lr sets
    assert own.cfg.lr_sweep == "custom" and own.cfg.lrs == [1e-4]
    with pytest.raises(ConfigError, match="lr_sweep 'paper' means lrs"):
        SegLinear.from_preset("paper", {"dataset": "ade20k", "lr_sweep": "paper", "lrs": [1e-4]})

    runs = [{"lr": lr, "metrics": {"mIoU": miou, "aAcc": 50.0}, "iters": 160_000, "reported_iter": 160_000,
             "validations": [[16_000, miou - 5], [160_000, miou]], "num_classes": 150,
             "train_lists": ["images/training"], "synthetic": False, "csv": f"/w/lr{lr:g}/t.csv",
             "validation_log": f"/w/lr{lr:g}/validations.jsonl", "work_dir": f"/w/lr{lr:g}"}
            for lr, miou in zip(LINEAR_LRS, (20.0, 27.5, 25.0, 24.0))]
    records = seg_protocol.to_results(runs, lin.cfg)
    assert [r.variant["lr"] for r in records] == LINEAR_LRS + ["best"]
    for rec in records[:-1]:
        source = next(r for r in runs if r["lr"] == rec.params["lr"])
        assert rec.metrics == source["metrics"] and rec.artifacts["work_dir"] == source["work_dir"]
    best = records[-1]
    # the best-of-sweep record points to its lr's record; it owns no file of its own
    assert best.artifacts == {} and best.params["artifacts_in_variant"] == {"lr": 3e-4}
    assert best.params["lr"] == best.params["best_lr"] == 3e-4 and best.metrics["mIoU"] == 27.5
    assert best.params["lr_sweep"] == "paper" and best.params["lrs"] == LINEAR_LRS


def test_dataset_layouts_resolve(synth_tiny, tmp_path):
    ade = resolve_data("synth_ade", synth_tiny)
    assert ade.root.name == "ADEChallengeData2016" and ade.num_classes == 16
    assert ade.train[0]["reduce_zero_label"] is True
    voc = resolve_data("voc", synth_tiny)
    assert voc.num_classes == 16 and voc.train_lists == ["trainaug.txt"]
    assert voc.val["ann_file"].endswith("val.txt") and voc.train[0]["reduce_zero_label"] is False
    with pytest.raises(DataError, match="ADE20K"):
        resolve_data("ade20k", tmp_path / "nowhere")


def test_every_layout_names_a_registered_data_set_and_the_data_layer_holds_no_protocol_setting():
    """How mmseg reads a data set is the data layer's (harness/data/mmseg_layouts.py); for how many
    iterations and at which pipeline sizes the protocols train on it is theirs (layouts.py)."""
    import harness.data.mmseg_layouts as data_mmseg
    import harness.data.segmentation as data_seg
    from benchmarks.segmentation.layouts import SIZES, seg_sizes
    from harness.data.mmseg_layouts import ALIASES, LAYOUTS, mmseg_layout
    from harness.registry import DATASETS

    for name, layout in LAYOUTS.items():
        assert name == layout.name and name in DATASETS
    assert set(SIZES) == set(LAYOUTS) and all(target in LAYOUTS for target in ALIASES.values())
    assert mmseg_layout("voc") is mmseg_layout("synth_voc") is LAYOUTS["voc12aug"]
    assert (seg_sizes("ade20k").long_iters, seg_sizes("voc").short_iters) == (160_000, 20_000)
    with pytest.raises(ConfigError, match="'cityscapes' is unknown; choose one of voc12aug, ade20k"):
        seg_sizes("cityscapes")
    for module, words in ((data_seg, ("iters", "Dataset\"", "MmsegLayout", "scale_ratio")),
                          (data_mmseg, ("iters", "scale_ratio", "crop"))):
        text = Path(module.__file__).read_text()
        assert not any(word in text for word in words), module.__name__
    assert not hasattr(DATASETS.get("ade20k"), "mmseg")


# ============================================================================ dependency
def test_missing_mmcv_ops_is_a_clear_error(monkeypatch, tmp_path):
    from benchmarks.segmentation.seg_linear import SegLinear
    from harness.models.handle import ModelHandle

    monkeypatch.setitem(sys.modules, "mmcv.ops", None)  # as if the compiled ops were absent
    with pytest.raises(MissingDependencyError, match=re.escape("scripts/install_mmcv.sh")):
        require_mmseg()
    proto = SegLinear.from_preset("synth", {"dataset": "synth_ade", "work_dir": str(tmp_path / "w")})
    with pytest.raises(MissingDependencyError, match="mmcv"):
        proto.run(ModelHandle.random_init("vit_cpu_tiny"), tmp_path)


def test_harness_never_imports_mmseg():
    code = ("import sys, harness.cli, harness.running.evaluate, benchmarks.segmentation.seg_linear,"
            " benchmarks.segmentation.segmenter;"
            "from harness.registry import PROTOCOLS;"
            "p = PROTOCOLS.get('seg_linear').from_preset('paper', {'dataset': 'ade20k'}); p.fingerprint();"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('mmseg', 'mmcv', 'mmengine'));"
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ============================================================================ mmseg side
def _small_ade(synth_tiny: Path, tmp_path: Path, n_train: int = 8, n_val: int = 2) -> Path:
    """SynthScenes tiny, ADE layout, trimmed to a few images (keeps the runner tests fast)."""
    src = synth_tiny / "ADEChallengeData2016"
    dst = tmp_path / "ade" / "ADEChallengeData2016"
    for split, n in (("training", n_train), ("validation", n_val)):
        for kind, ext in (("images", ".jpg"), ("annotations", ".png")):
            (dst / kind / split).mkdir(parents=True)
            for p in sorted((src / kind / split).glob(f"*{ext}"))[:n]:
                shutil.copy(p, dst / kind / split / p.name)
    shutil.copy(src.parent / "meta.json", dst.parent / "meta.json")
    return dst.parent


@needs_mmseg
def test_a_kept_sample_is_the_pipelines_and_leaves_the_generators_as_it_would(synth_tiny, tmp_path, monkeypatch):
    import copy
    import random

    import mmseg.datasets  # noqa: F401  (registers the transforms)
    import numpy as np
    from mmengine.dataset import Compose
    from mmengine.registry import DefaultScope
    from mmseg.registry import TRANSFORMS

    from benchmarks.segmentation import pipeline_memo

    pipeline_memo.register_memo_pipeline()
    monkeypatch.setattr(pipeline_memo, "_MEMO", type(pipeline_memo._MEMO)())
    monkeypatch.setattr(pipeline_memo, "_SIZE", [0])
    ade = _small_ade(synth_tiny, tmp_path, n_train=1, n_val=0) / "ADEChallengeData2016"
    info = {"img_path": str(next((ade / "images" / "training").iterdir())), "reduce_zero_label": True,
            "seg_map_path": str(next((ade / "annotations" / "training").iterdir())), "seg_fields": []}
    steps = [dict(type="LoadImageFromFile"), dict(type="LoadAnnotations"),
             dict(type="RandomResize", scale=(64, 64), ratio_range=(0.5, 2.0), keep_ratio=True),
             dict(type="RandomCrop", crop_size=(32, 32)), dict(type="RandomFlip", prob=0.5),
             dict(type="PhotoMetricDistortion"), dict(type="PackSegInputs")]
    with DefaultScope.overwrite_default_scope("mmseg"):
        kept = TRANSFORMS.build(pipeline_memo.memo_pipeline(steps)[0])
        plain = Compose(steps)

    def draw(pipe, seed):
        np.random.seed(seed), random.seed(seed), torch.manual_seed(seed)
        out = pipe(copy.deepcopy(info))  # as a dataset hands out its items
        return out, np.random.get_state()[1].copy(), random.random(), torch.rand(1)

    for seed in (0, 1, 0, 1):
        got, want = draw(kept, seed), draw(plain, seed)
        assert torch.equal(got[0]["inputs"], want[0]["inputs"])
        assert torch.equal(got[0]["data_samples"].gt_sem_seg.data, want[0]["data_samples"].gt_sem_seg.data)
        assert got[0]["data_samples"].metainfo == want[0]["data_samples"].metainfo
        assert (got[1] == want[1]).all() and got[2:] == want[2:]  # the generators go on alike
    assert len(pipeline_memo._MEMO) == 2  # the second draw of each seed was a hit


@needs_mmseg
def test_mmseg_features_equal_harness_patch_tokens(tmp_path):
    from mmseg.registry import MODELS

    register_mmseg_modules()
    bb = _tiny_backbone(1)
    sd = bb.backbone_state_dict()
    x = torch.randn(2, 3, 64, 64)  # already normalised: both models see the same tensor
    path = save_converted(_dino_layout(sd), tmp_path / "w.safetensors")
    vit = MODELS.build(dict(type="SslBenchViT", weights=str(path), frozen=True,
                            **backbone_kwargs(sd, 2, 64, 0.0)))
    vit.init_weights()
    with torch.no_grad():
        ours = vit(x)[0]                                        # (B, d, h, w)
        ref = bb.get_features(x, n_last_blocks=1, final_norm=True).patches[:, 0].permute(0, 3, 1, 2)
    assert ours.shape == (2, 64, 8, 8)
    torch.testing.assert_close(ours, ref, atol=1e-5, rtol=0)

    # At another crop the position embeddings are resized once, at load, as mmseg does
    # (bicubic, align_corners=False, to the exact grid); the CLS position is kept.
    path = save_converted(sd, tmp_path / "w128.safetensors")
    vit128 = MODELS.build(dict(type="SslBenchViT", weights=str(path), **backbone_kwargs(sd, 2, 128, 0.0)))
    vit128.init_weights()
    grid = sd["pos_embed"][:, 1:].reshape(1, 8, 8, 64).permute(0, 3, 1, 2)
    want = torch.nn.functional.interpolate(grid, size=(16, 16), mode="bicubic", align_corners=False)
    torch.testing.assert_close(vit128.pos_embed[:, 1:], want.flatten(2).transpose(1, 2), atol=0, rtol=0)
    assert torch.equal(vit128.pos_embed[:, :1], sd["pos_embed"][:, :1])


@needs_mmseg
def test_strict_loading_names_the_keys(tmp_path):
    from mmseg.registry import MODELS

    register_mmseg_modules()
    sd = dict(_tiny_backbone().backbone_state_dict())
    kw = backbone_kwargs(sd, 2, 64, 0.0)
    del sd["blocks.2.mlp.fc2.bias"]
    path = save_converted(sd, tmp_path / "w.safetensors")
    vit = MODELS.build(dict(type="SslBenchViT", weights=str(path), **kw))
    with pytest.raises(CheckpointError, match=re.escape("layers.2.ffn.layers.1.bias")):
        vit.init_weights()


@needs_mmseg
def test_frozen_backbone_stays_in_eval_mode():
    from mmseg.registry import MODELS

    register_mmseg_modules()
    sd = _tiny_backbone().backbone_state_dict()
    vit = MODELS.build(dict(type="SslBenchViT", frozen=True, **backbone_kwargs(sd, 2, 64, 0.5)))
    vit.train()  # what mmengine's loop calls every iteration
    assert not any(m.training for m in vit.modules())  # so DropPath (rate 0.5 here) is off
    assert not any(p.requires_grad for p in vit.parameters())
    x = torch.randn(2, 3, 64, 64)
    torch.testing.assert_close(vit(x)[0], vit(x)[0], atol=0, rtol=0)
    unfrozen = MODELS.build(dict(type="SslBenchViT", frozen=False, **backbone_kwargs(sd, 2, 64, 0.5)))
    assert unfrozen.train().training


@needs_mmseg
def test_frozen_backbone_mode_train_keeps_drop_path_on_as_cribo():
    """CrIBo's frozen backbone is put in eval mode once; mmengine's model.train() turns its
    DropPath back on. frozen_mode "train" does the same; weights still get no gradient."""
    from mmseg.registry import MODELS

    register_mmseg_modules()
    sd = _tiny_backbone().backbone_state_dict()
    vit = MODELS.build(dict(type="SslBenchViT", frozen=True, frozen_mode="train",
                            **backbone_kwargs(sd, 2, 64, 0.5)))
    assert not vit.training  # eval at construction, as CrIBo's _freeze_stages
    vit.train()  # what mmengine's loop calls every iteration
    drops = [m for m in vit.modules() if type(m).__name__ == "DropPath"]
    assert drops and all(m.training for m in drops)
    assert not any(p.requires_grad for p in vit.parameters())
    torch.manual_seed(0)  # a seeded draw: with 8 images two passes keep the same paths with p ~ 2^-32
    x = torch.randn(8, 3, 64, 64)
    assert not torch.equal(vit(x)[0], vit(x)[0])  # stochastic depth on the frozen features
    vit.eval()
    torch.testing.assert_close(vit(x)[0], vit(x)[0], atol=0, rtol=0)
    with pytest.raises(ValueError, match="frozen_mode"):
        MODELS.build(dict(type="SslBenchViT", frozen=True, frozen_mode="off",
                          **backbone_kwargs(sd, 2, 64, 0.0)))


def test_frozen_backbone_mode_is_a_setting():
    """seg_linear paper: the official behaviour (DropPath 0.1 on in the frozen backbone while
    the head trains); frozen_backbone_mode eval is the deterministic opt-in."""
    from benchmarks.segmentation.seg_linear import SegLinear
    from benchmarks.segmentation.segmenter import Segmenter

    sd = _tiny_backbone().backbone_state_dict()
    paper = SegLinear.from_preset("paper", {"dataset": "ade20k", "crop_size": 64})
    assert (paper.cfg.frozen_backbone_mode, paper.cfg.drop_path_rate) == ("train", 0.1)
    bb = backbone_config(sd, {"num_heads": 2}, paper.cfg, frozen=True)
    assert (bb["frozen"], bb["frozen_mode"], bb["drop_path_rate"]) == (True, "train", 0.1)

    det = SegLinear.from_preset("paper", {"dataset": "ade20k", "crop_size": 64, "frozen_backbone_mode": "eval"})
    assert det.fingerprint() != paper.fingerprint()
    bb = backbone_config(sd, {"num_heads": 2}, det.cfg, frozen=True)
    assert (bb["frozen_mode"], bb["drop_path_rate"]) == ("eval", 0.0)
    synth = SegLinear.from_preset("synth")
    assert (synth.cfg.frozen_backbone_mode, synth.cfg.drop_path_rate) == ("eval", 0.0)
    # Segmenter trains its backbone (drop path 0.1) and has no such setting
    seg = Segmenter.from_preset("paper", {"dataset": "ade20k", "crop_size": 64})
    bb = backbone_config(sd, {"num_heads": 2}, seg.cfg, frozen=False)
    assert (bb["frozen"], bb["drop_path_rate"]) == (False, 0.1)
    assert not hasattr(seg.cfg, "frozen_backbone_mode")


@pytest.fixture
def heap_set_aside():
    """mmengine's BaseDataset calls gc.collect() each time a dataset is built (``_serialize_data``); with
    torch, timm and the OpenMMLab stack imported that walks ~600k objects, half a second a call, four
    calls a run. The objects made before the test are set aside (``gc.freeze``) for its duration: the
    collection then walks only what the test made."""
    gc.freeze()
    yield
    gc.unfreeze()


class _StopAt:
    """Build configs with a hook that interrupts training after ``iters`` iterations."""

    _build = staticmethod(build_mmseg_config)  # the real one, whatever is patched in later

    def __init__(self, iters: int):
        self.iters = iters

    def __call__(self, *args, **kwargs):
        cfg = self._build(*args, **kwargs)
        cfg.custom_hooks = list(cfg.get("custom_hooks", [])) + [dict(type="SslBenchStopHook", at=self.iters)]
        return cfg


class _Interrupted(Exception):
    pass


def _register_stop_hook():
    from mmengine.hooks import Hook
    from mmengine.registry import HOOKS

    class SslBenchStopHook(Hook):
        def __init__(self, at: int):
            self.at = at

        def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
            if runner.iter + 1 >= self.at:
                raise _Interrupted(f"stopped after iteration {runner.iter + 1}")

    HOOKS.register_module(name="SslBenchStopHook", module=SslBenchStopHook, force=True)


@needs_mmseg
def test_linear_training_keeps_backbone_bit_identical_and_resumes_weights_only(synth_tiny, tmp_path, monkeypatch,
                                                                              heap_set_aside):
    """One short seg_linear run, interrupted after 2 of 4 iterations and resumed.

    - the resume goes through torch's weights-only loading (mmengine's torch.load has no
      weights_only argument), inside the scoped allow-list;
    - after training, every backbone weight equals the converted pretrained weight
      bit for bit, while the head has moved.
    """
    from benchmarks.segmentation.seg_linear import SegLinear

    _register_stop_hook()
    data = _small_ade(synth_tiny, tmp_path)
    bb = _tiny_backbone(2)
    sd = bb.backbone_state_dict()
    cfg = SegLinear.Config(dataset="synth_ade", crop_size=64, iters=4, lrs=[1e-2], batch_size=2,
                           num_workers=0, checkpoint_interval=2, log_interval=1)
    work = tmp_path / "work"
    monkeypatch.setattr(sweep, "build_mmseg_config", _StopAt(3))
    with pytest.raises(_Interrupted):
        run_seg_protocol(sd, {"num_heads": 2}, cfg, data, work, head="linear", frozen=True)
    run_dir = work / "lr0.01"
    ckpt2 = run_dir / "iter_2.pth"
    assert ckpt2.is_file() and not (run_dir / "iter_4.pth").exists()
    # torch's default (weights-only) load refuses mmengine's checkpoint without the allow-list ...
    with pytest.raises(Exception, match="[Ww]eights only load failed"):
        torch.load(ckpt2)
    with mmengine_checkpoint_loading():  # ... and reads it with it
        assert torch.load(ckpt2)["meta"]["iter"] == 2

    monkeypatch.setattr(sweep, "build_mmseg_config", _StopAt(10**9))
    runs = run_seg_protocol(sd, {"num_heads": 2}, cfg, data, work, head="linear", frozen=True)
    logs = "".join(p.read_text() for p in run_dir.glob("*/*.log"))
    assert "resumed epoch: 0, iter: 2" in logs
    assert set(runs[0]["metrics"]) >= {"mIoU", "mAcc", "aAcc"}
    # validations every iters/10 (here every iteration): 1 and 2 before the interruption
    # (read back from the log), 3 and 4 after the resume
    assert [it for it, _ in runs[0]["validations"]] == [1, 2, 3, 4]
    table = Path(runs[0]["csv"]).read_text().splitlines()
    assert table[0].startswith("class,IoU") and len(table) == 1 + 16

    with mmengine_checkpoint_loading():
        final = torch.load(run_dir / "iter_4.pth")
    assert final["meta"]["iter"] == 4
    state = final["state_dict"]
    converted = convert_state_dict(sd)
    backbone = {k[len("backbone."):]: v for k, v in state.items() if k.startswith("backbone.")}
    assert set(backbone) == set(converted)
    for k, v in converted.items():
        assert torch.equal(backbone[k], v), f"frozen backbone weight {k} changed"
    # the head started from mmseg's init (bias 0) and has moved
    assert state["decode_head.conv_seg.bias"].abs().sum() > 0


@needs_mmseg
def test_every_validation_is_recorded_and_the_last_is_reported(synth_tiny, tmp_path, monkeypatch, capfd,
                                                                heap_set_aside):
    """CrIBo's schedules validate every iters/10 and at the end, and its train.py reports
    nothing else: every validation is kept (iteration, mIoU), the number is the last one."""
    from benchmarks.segmentation.seg_linear import SegLinear

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    data = _small_ade(synth_tiny, tmp_path)
    paper = SegLinear.from_preset("paper", {"dataset": "ade20k"}).cfg
    assert paper.val_interval is None and paper.validation_interval() == 16_000
    mm = _mm_config(paper, resolve_data("synth_ade", data), tmp_path)
    assert mm.train_cfg.val_interval == 16_000 and mm.val_evaluator.type == "SslBenchIoUMetric"
    assert [h["type"] for h in mm.custom_hooks] == ["SslBenchValidationLog"]
    assert SegLinear.from_preset("synth").cfg.validation_interval() == 600  # once, at the end

    sd = _tiny_backbone(3).backbone_state_dict()
    cfg = SegLinear.Config(dataset="synth_ade", crop_size=64, iters=4, lrs=[1e-2], batch_size=2,
                           num_workers=0, val_interval=2, log_interval=1)
    work = tmp_path / "work"
    runs = run_seg_protocol(sd, {"num_heads": 2}, cfg, data, work, head="linear", frozen=True)
    run = runs[0]
    assert [it for it, _ in run["validations"]] == [2, 4] and run["reported_iter"] == 4
    assert run["metrics"]["mIoU"] == run["validations"][-1][1]
    log = read_validation_log(Path(run["validation_log"]))
    assert sorted(log) == [2, 4] and log[4] == run["metrics"]
    records = seg_protocol.to_results(runs, cfg)
    for rec in records:
        assert rec.params["validations"] == run["validations"] and rec.params["reported_iter"] == 4
        assert rec.params["reported"] == "last validation"
    assert records[0].artifacts["validation_log"] == run["validation_log"]
    # mmengine's dump and logs are in the run's log file; the console has one line for the run
    assert "System environment" in Path(records[0].artifacts["mmengine_log"]).read_text()
    out, err = capfd.readouterr()
    assert "System environment" not in out + err
    assert [line for line in (out + err).splitlines() if line.startswith("[mmseg linear head]")] != []

    # run again: the finished run is read back, not trained (no new mmengine session)
    sessions = sorted(p.name for p in (work / "lr0.01").iterdir() if p.is_dir())
    again = run_seg_protocol(sd, {"num_heads": 2}, cfg, data, work, head="linear", frozen=True)
    assert again[0]["metrics"] == run["metrics"] and again[0]["validations"] == run["validations"]
    assert sorted(p.name for p in (work / "lr0.01").iterdir() if p.is_dir()) == sessions


# ============================================================================ slow: smokes
@pytest.mark.slow
@needs_mmseg
@pytest.mark.parametrize("layout", ["ade", "voc"])
def test_smoke_linear_pretrained_beats_random_init(layout):
    # the synth preset (600 iterations of 16, pretraining normalisation) on the shipped DINO
    # checkpoint (zoo:synth_dino, checked by its sha256) vs the random-init vit_cpu_tiny;
    # measured margins: docs/benchmarks/training.md
    from harness.models.sources import build_model

    rnd = smoke(None, layout)
    pre = smoke(build_model("zoo:synth_dino"), layout)
    print(f"seg_linear {layout}: zoo:synth_dino mIoU {pre:.2f} vs random init {rnd:.2f}")
    assert 0.0 <= rnd <= 100.0 and pre > rnd


@pytest.mark.slow
@needs_mmseg
def test_smoke_segmenter_runs():
    miou = smoke(None, "ade", protocol="segmenter", iters=50)
    assert 0.0 <= miou <= 100.0


# ============================================================================ installer
def test_installer_patch_and_wheel_lookup(tmp_path, monkeypatch):
    from scripts import install_mmcv as im

    setup = tmp_path / "setup.py"
    setup.write_text("a = ['-std=c++14']\nb = ['-Wall', '-std=c++17']\nc = '-std=c++14'\n")
    assert im.patch_setup_py(setup) == 3
    assert "c++1" not in setup.read_text() and setup.read_text().count("-std=c++20") == 3
    setup.write_text("nothing to patch\n")
    with pytest.raises(RuntimeError, match="no -std"):
        im.patch_setup_py(setup)

    tag = im.python_tag()
    assert im.find_wheel(tmp_path) is None and im.find_wheel(None) is None
    for name in (f"mmcv-2.1.0-{tag}-{tag}-linux_x86_64.whl", "mmcv-2.2.0-cp311-cp311-linux_x86_64.whl"):
        with zipfile.ZipFile(tmp_path / name, "w") as zf:  # a wheel with the compiled ops inside
            zf.writestr("mmcv/_ext.cpython-311-x86_64-linux-gnu.so", b"")
    assert im.find_wheel(tmp_path).name.startswith("mmcv-2.1.0-")

    # the stamp makes the no-op instant, and any version change invalidates it; the CUDA probe
    # (a Python that imports torch, four times here where nvcc is installed) is
    # test_install_mmcv_cuda.py's, so its override stands in for it
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("SSL_BENCH_CUDA_OPS", "0")
    assert not im.stamp_matches()
    im.write_stamp()
    assert im.stamp_matches()
    versions = dict(im.installed_versions(), torch="0.0.0")
    monkeypatch.setattr(im, "installed_versions", lambda: versions)
    assert not im.stamp_matches()
