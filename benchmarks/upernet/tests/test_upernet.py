"""upernet: presets against the official configs, each parameter's layer id / lr scale / weight
decay as iBOT's segmentation constructor assigns them, the one-line refusals, and (slow) the
SynthScenes recipe end to end through mmseg."""
from pathlib import Path

import pytest
import torch
from torch import nn

from benchmarks.upernet.config import UperNetConfig
from benchmarks.upernet.mmseg_parts import optimizer_groups, prepared_model, handed_over
from harness.errors import ConfigError, NotApplicable
from harness.models.backbone import create_backbone
from harness.models.handle import ModelHandle
from harness.models.multilevel import MultiLevelBackbone
from harness.openmmlab.metric import METRIC
from harness.openmmlab.per_image_io import read_per_image_file


class _Segmentor(nn.Module):
    """The names of mmseg's EncoderDecoder: backbone.*, decode_head.*, auxiliary_head.*."""

    def __init__(self, vit, out_indices=(0, 1, 2, 3)):
        super().__init__()
        self.backbone = MultiLevelBackbone(vit, out_indices)
        self.decode_head = nn.Conv2d(vit.embed_dim, 5, 1)


def _official_layer(name: str, num_max_layer: int) -> int:
    """get_num_layer_for_vit of iBOT's segmentation constructor, on the official names."""
    if name in ("backbone.cls_token", "backbone.mask_token", "backbone.pos_embed"):
        return 0
    if name.startswith("backbone.patch_embed"):
        return 0
    if name.startswith("backbone.blocks"):
        return int(name.split(".")[2]) + 1
    return num_max_layer - 1


def test_groups_follow_the_official_segmentation_rule():
    torch.manual_seed(0)
    seg = _Segmentor(create_backbone("vit_cpu_tiny", depth=4, patch_size=16, embed_dim=32))
    groups = optimizer_groups(seg, base_lr=1e-4, weight_decay=0.05, layer_decay=0.65, depth=4, decay_skip="mmcv")
    by_param = {id(p): g for g in groups for p in g["params"]}
    for name, p in seg.named_parameters():
        official = name.replace("backbone.model.", "backbone.")
        layer = _official_layer(official, 4 + 2)
        g = by_param[id(p)]
        assert g["lr_scale"] == pytest.approx(0.65 ** (4 + 2 - layer - 1)), name
        assert g["lr"] == pytest.approx(1e-4 * g["lr_scale"])
        no_decay = p.ndim == 1 or official.endswith(".bias")  # the bare skip list never matches
        assert g["weight_decay"] == (0.0 if no_decay else 0.05), name
    # the quirk: pos_embed and cls_token are weight decayed; decay_skip=model spares them
    fixed = optimizer_groups(seg, base_lr=1e-4, weight_decay=0.05, layer_decay=0.65, depth=4, decay_skip="model")
    wd = {id(p): g["weight_decay"] for g in fixed for p in g["params"]}
    pos = id(seg.backbone.model.pos_embed)
    assert wd[pos] == 0.0 and by_param[pos]["weight_decay"] == 0.05


def test_presets_name_the_official_numbers():
    from benchmarks.upernet.protocol import UperNet

    s, b, synclr = (UperNet.from_preset(n).cfg for n in ("ibot_vit_s16", "ibot_vit_b16", "synclr"))
    assert (s.lr, s.layer_decay, s.out_with_norm, s.batch_size) == (3e-5, 0.9, True, 16)
    assert (b.lr, b.layer_decay, b.out_with_norm, b.batch_size) == (8e-5, 0.65, True, 16)
    assert (synclr.lr, synclr.iters, synclr.batch_size, synclr.out_with_norm) == (1e-4, 60000, 32, False)
    for c in (s, b, synclr):
        assert (c.warmup_iters, c.poly_power, c.min_lr, c.stride(), c.crop_size) == (1500, 1.0, 0.0, 341, 512)
        assert c.out_indices == [3, 5, 7, 11] and c.drop_path_rate == 0.1 and c.amp
    assert UperNetConfig().aux_index([4, 2, 1, 0.5]) == 2


def test_drop_path_is_linear_over_the_blocks_and_the_caller_model_untouched():
    vit = create_backbone("vit_cpu_tiny")
    with handed_over("k", vit):
        copy = prepared_model("k", 0.1)
    rates = [b.drop_path1.drop_prob for b in copy.blocks[1:]]
    assert rates == pytest.approx([0.05, 0.1]) and isinstance(copy.blocks[0].drop_path1, nn.Identity)
    assert all(isinstance(b.drop_path1, nn.Identity) for b in vit.blocks)


def test_refusals(tmp_path):
    from benchmarks.upernet.protocol import UperNet

    proto = UperNet.from_preset("ibot_vit_b16", {"amp": False})
    with pytest.raises(ConfigError, match="needs blocks \\[4, 6, 8, 12\\].*vit_cpu_tiny has 3 blocks"):
        proto.check(ModelHandle.random_init("vit_cpu_tiny"))
    from harness.context.pixels import PixelBackbone
    with pytest.raises(NotApplicable):
        proto.check(ModelHandle("pixels", PixelBackbone(), {"context": "pixels"}))
    with pytest.raises(ValueError, match="ADE20K's layout"):
        UperNetConfig(dataset="voc")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="amp .* needs a GPU"):
            UperNet.from_preset("synth", {"amp": True}).check(ModelHandle.random_init("vit_cpu_tiny"))


def test_ade_root_without_annotations_is_one_data_error(tmp_path):
    from benchmarks.upernet.runner import resolve_ade
    from harness.errors import DataError

    (tmp_path / "ADEChallengeData2016" / "images" / "training").mkdir(parents=True)
    with pytest.raises(DataError, match="annotations"):
        resolve_ade("ade20k", tmp_path)


@pytest.mark.slow
def test_synth_recipe_end_to_end(tmp_path, monkeypatch):
    import numpy as np

    from benchmarks.upernet.protocol import UperNet
    from harness.data.synthetic import generate
    from harness.per_image import read_per_image

    monkeypatch.setenv("SSL_BENCH_HOME", str(tmp_path / "home"))
    synth_tiny = generate(tmp_path / "synth", preset="tiny", seed=0, progress=False)

    proto = UperNet.from_preset("synth", {"work_dir": str(tmp_path / "w"), "iters": 60, "warmup_iters": 6})
    result, = proto.run(ModelHandle.random_init("vit_cpu_tiny", seed=0), synth_tiny)
    assert 0 <= result.metrics["mIoU"] <= 100 and result.params["validations"][-1][0] == 60
    stats = read_per_image(result.per_image)
    got = float(stats.metric_of_weights(np.ones((1, stats.images)), "mIoU")[0])
    assert got == pytest.approx(result.metrics["mIoU"], abs=0.01)


def test_position_table_resized_once_to_the_crop_grid():
    from benchmarks.upernet.mmseg_parts import resize_pos_embed

    torch.manual_seed(0)
    vit = create_backbone("vit_cpu_tiny", patch_size=16, img_size=64, embed_dim=32, depth=2).eval()
    x = torch.randn(1, 3, 128, 128)
    assert resize_pos_embed(vit, 128) and vit.pos_embed.shape == (1, 1 + 64, 32)
    assert vit.interpolate_pos_embed(8, 8) is vit.pos_embed  # trained at the crop's grid, no resampling
    assert vit.get_features(x).patches.shape[2:4] == (8, 8)
    assert not resize_pos_embed(vit, 128)


FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "upernet_layer_decay.json"


@pytest.mark.parametrize("arch,preset", [("vit_small", "ibot_vit_s16"), ("vit_base", "ibot_vit_b16")])
def test_layer_ids_and_counts_match_the_official_constructor(arch, preset):
    """reference/gen_upernet_layer_decay.py ran iBOT's segmentation constructor on the
    official model; the same rule here on the harness ViT at 512 (built on the meta device)."""
    import json

    from benchmarks.upernet.mmseg_parts import resize_pos_embed
    from benchmarks.upernet.protocol import UperNet

    ref = json.loads(FIXTURE.read_text())[arch]
    cfg = UperNet.from_preset(preset).cfg
    assert (cfg.lr, cfg.layer_decay) == (ref["lr"], ref["layer_decay_rate"])
    with torch.device("meta"):
        vit = create_backbone(f"{arch}_patch16_224")
        resize_pos_embed(vit, cfg.crop_size)
        seg = _Segmentor(vit, tuple(cfg.out_indices))
    groups = optimizer_groups(seg, base_lr=cfg.lr, weight_decay=cfg.weight_decay, layer_decay=cfg.layer_decay,
                              depth=None, decay_skip=cfg.decay_skip)
    mine = {}
    for g in groups:
        layer = int(g["group_name"].split("_")[1])
        for p in g["params"]:
            mine[id(p)] = (layer, g["lr_scale"], g["weight_decay"])
    names = {n.replace("backbone.model.", "backbone."): mine[id(p)] for n, p in seg.named_parameters()}
    official = {n: v for n, v in ref["params"].items() if n.startswith("backbone.")}
    assert set(names) - {"decode_head.weight", "decode_head.bias"} == set(official)
    for n, (layer, scale, wd) in official.items():
        assert names[n][0] == layer and names[n][1] == pytest.approx(scale) and names[n][2] == wd, n
    assert names["decode_head.weight"][:2] == (13, 1.0)  # every head parameter: the last layer, lr x 1
    assert all(v[:2] == [13, 1.0] for n, v in ref["params"].items() if not n.startswith("backbone."))
    counts = ref["param_count"]
    adapter = sum(p.numel() for n, p in seg.backbone.named_parameters() if n.startswith("fpn"))
    assert adapter == counts["adapter"]
    assert sum(p.numel() for p in seg.backbone.model.parameters()) == counts["backbone_vit"]
    assert [list(o.shape) for o in seg.backbone(torch.empty(2, 3, 512, 512, device="meta"))] == \
        ref["adapter_shapes_512_batch2"]


def test_miou_is_mmseg_iou_metric_and_its_per_image_areas(tmp_path):
    """The protocol's metric is mmseg's IoUMetric on the same predictions; the per-image areas it
    keeps sum back to the same mIoU, aAcc and mAcc (ADE20K's ignore index 255)."""
    pytest.importorskip("mmseg")
    import numpy as np
    from mmseg.evaluation import IoUMetric

    from benchmarks.upernet import mmseg_parts
    from harness.per_image import read_per_image

    mmseg_parts.register()
    from mmseg.registry import METRICS

    gen = torch.Generator().manual_seed(0)
    results = []
    for _ in range(5):
        label = torch.randint(0, 6, (24, 32), generator=gen)
        label[torch.rand(24, 32, generator=gen) < 0.1] = 255
        pred = torch.where(torch.rand(24, 32, generator=gen) < 0.6, label.clamp(max=5),
                           torch.randint(0, 6, (24, 32), generator=gen))
        results.append(IoUMetric.intersect_and_union(pred, label, 6, 255))
    classes = dict(classes=tuple(f"c{i}" for i in range(6)))
    ours = METRICS.build(dict(type=METRIC, per_image_path=str(tmp_path / "p.json")))
    theirs = IoUMetric()
    ours.dataset_meta = theirs.dataset_meta = classes
    got, want = ours.compute_metrics(list(results)), theirs.compute_metrics(list(results))
    assert got == want
    stats = read_per_image(read_per_image_file(tmp_path / "p.json"))
    for metric in ("mIoU", "aAcc", "mAcc"):
        again = float(stats.metric_of_weights(np.ones((1, stats.images)), metric)[0])
        assert again == pytest.approx(want[metric], abs=0.006), metric


def _mmcv1_lr(i: int, base: float, iters: int, warm: int, ratio: float, power: float = 1.0) -> float:
    """mmcv 1.x PolyLrUpdaterHook with linear warm-up (min_lr 0), by its formulas."""
    regular = base * (1 - i / iters) ** power
    if i < warm:
        return regular * (1 - (1 - i / warm) * (1 - ratio))
    return regular


def test_schedule_matches_mmcv1_poly_with_warmup():
    """iBOT's lr_config as mmcv 1.x computes it, iteration by iteration (the mmseg1 style is
    SynCLR's mmengine config as written)."""
    pytest.importorskip("mmengine")
    from mmengine.optim.scheduler import LinearLR, PolyLR

    from benchmarks.upernet.runner import schedule_config

    cfg = UperNetConfig(iters=100, warmup_iters=10, lr=1.0)
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    kinds = {"LinearLR": LinearLR, "PolyLR": PolyLR}
    scheds = [kinds[s.pop("type")](opt, **s) for s in [dict(d) for d in schedule_config(cfg)["param_scheduler"]]]
    for i in range(100):
        lr = opt.param_groups[0]["lr"]
        want = _mmcv1_lr(i, 1.0, 100, 10, 1e-6)
        assert lr == pytest.approx(want, rel=1e-6, abs=1e-9), (i, lr, want)
        opt.step()
        for s in scheds:
            s.step()


@pytest.mark.slow  # importing mmseg's models takes seconds
@pytest.mark.parametrize("arch,preset", [("vit_small", "ibot_vit_s16"), ("vit_base", "ibot_vit_b16")])
def test_whole_model_parameter_count_is_the_official_configs(arch, preset):
    """The protocol's mmseg model (runner.model_config: UperNet channels = width, FCN 256, 150
    classes) has the official configuration's parameter count (the fixture's total)."""
    pytest.importorskip("mmseg")
    import json

    import mmseg.models  # noqa: F401  (registers the heads)
    from mmengine.registry import DefaultScope
    from mmseg.registry import MODELS as MM

    from benchmarks.upernet import mmseg_parts, runner
    from benchmarks.upernet.protocol import UperNet

    mmseg_parts.register()
    ref = json.loads(FIXTURE.read_text())[arch]["param_count"]
    cfg = UperNet.from_preset(preset).cfg
    # mmseg's scope whatever an earlier test in this process set (mmdet's, after the detection tests)
    with torch.device("meta"), DefaultScope.overwrite_default_scope("mmseg"):
        vit = create_backbone(f"{arch}_patch16_224")
        with handed_over("count", vit):
            model_cfg = runner.model_config(cfg, "count", vit.embed_dim, [4.0, 2.0, 1.0, 0.5], 150, "syncbn")
            model_cfg.pop("data_preprocessor")  # no parameters
            model = MM.build(model_cfg)
    assert sum(p.numel() for p in model.parameters()) == ref["total"]
    assert sum(p.numel() for p in model.decode_head.parameters()) == ref["decode_head"]
    assert sum(p.numel() for p in model.auxiliary_head.parameters()) == ref["auxiliary_head"]


def test_an_adapted_timm_vit_gets_the_same_rule_and_a_cnn_is_refused():
    import timm

    from harness.models.sources.timm_adapter import TimmBackbone

    torch.manual_seed(0)
    vit = TimmBackbone(timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0,
                                         dynamic_img_size=True), "vit_tiny_patch16_224")
    with handed_over("t", vit):
        model = prepared_model("t", 0.1, 128)
    assert model.model.blocks[-1].drop_path1.drop_prob == pytest.approx(0.1)
    seg = _Segmentor(model, (3, 5, 7, 11))
    assert [o.shape[-1] for o in seg.backbone.eval()(torch.randn(1, 3, 128, 128))] == [32, 16, 8, 4]
    groups = optimizer_groups(seg, base_lr=1.0, weight_decay=0.05, layer_decay=0.5, depth=None, decay_skip="mmcv")
    scale = {id(p): g["lr_scale"] for g in groups for p in g["params"]}
    assert scale[id(seg.backbone.model.model.blocks[0].attn.qkv.weight)] == pytest.approx(0.5 ** 12)
    assert scale[id(seg.backbone.model.model.patch_embed.proj.weight)] == pytest.approx(0.5 ** 13)
    with pytest.raises(ConfigError, match="resnet18 gives one feature level"):
        MultiLevelBackbone(TimmBackbone(timm.create_model("resnet18", pretrained=False, num_classes=0), "resnet18"))
