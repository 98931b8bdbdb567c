"""robustness: the declaration (mCE lower is better), the class maps of each shifted set (IN-A/R
subsets, ImageNetV2's index folders, ReaL's label lists, IN-9), ImageNet-C's mCE both ways, patch
drop, the protocol end to end on its SynthScenes set with a tiny random ViT, bad inputs refused
with one line, and parity with the official code (tests/fixtures/robustness_*.json)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.robustness import class_maps, corruption
from benchmarks.robustness.patch_drop import cls_attention, drop_patches, salient_patches
from benchmarks.robustness.protocol import Robustness
from benchmarks.robustness.synthetic import generate
from harness.cli import main
from harness.data.imagenet_real import real_label_sets
from harness.errors import ConfigError, DataError
from harness.models.handle import ModelHandle
from harness.per_image import decode_array
from harness.registry import declaration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
QUICK = {"epochs": 1, "progress": False, "cache": False}  # plumbing: the head's choice over epochs has its own test


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def synth(tmp_path_factory) -> Path:
    return generate(tmp_path_factory.mktemp("robust") / "tiny", preset="tiny", seed=0, progress=False)


@pytest.fixture(scope="module")
def results(synth):
    torch.set_num_threads(1)
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    return {r.variant["shift"]: r for r in Robustness.from_preset("synth", QUICK).run(model, synth)}


def test_declaration_mce_is_lower_is_better():
    decl = declaration("robustness")
    assert {m.name: m.direction for m in decl.metrics} == {"top1": "higher", "mCE": "lower"}
    assert decl.headline_metric == "top1" and not decl.datasets  # its sets' readers live in harness/data
    assert {"imagenet_v2", "imagenet_c", "backgrounds_challenge"} <= set(decl.reads)


def test_ibot_preset_is_the_ibot_linear_recipe_with_table8_sets():
    cfg = Robustness.from_preset("ibot").cfg
    assert cfg.recipe == "ibot" and len(cfg.base_lrs) == 45 and cfg.epochs == 100
    assert cfg.shifts == ["imagenet_a", "imagenet_c", "backgrounds", "occlusion"]
    assert cfg.ce_normalizer == "none" and cfg.corruption_list() == list(corruption.CORRUPTIONS_19)
    assert cfg.occlusion_mass == 0.5 and cfg.saliency_head == 1 and cfg.in9_mapping == "madrylab"
    assert cfg.saliency == "zoo:dino_vits16" and cfg.occlusion_fill == "normalized_zero"
    cfg.ce_normalizer = "alexnet"
    assert cfg.corruption_list() == list(corruption.CORRUPTIONS_15)


def test_head_is_the_official_save_last_epoch_and_last_head_on_ties(monkeypatch):
    """eval_linear_multi.py saves when an evaluation's best is >= the best so far, and its
    best_acc_hidx is the last head reaching that evaluation's best: here epoch 3, head 1."""
    import benchmarks.robustness.protocol as mod
    from harness.probes.linear_grid import GridHistory

    def fake_train_grid(heads, opt, batches, val_x, val_y, *, on_epoch, **kw):
        hist = GridHistory()
        for e, row in enumerate([[10.0, 30.0, 30.0], [30.0, 20.0, 10.0], [30.0, 30.0, 5.0], [20.0, 25.0, 5.0]]):
            heads.weight.data.fill_(e)
            hist.epochs.append(e + 1)
            hist.top1.append(row)
            on_epoch(e, hist)
        return hist

    monkeypatch.setattr(mod, "train_grid", fake_train_grid)
    proto = Robustness.from_preset("synth", QUICK)
    proto._train_heads([0.1, 0.2, 0.3], None, torch.zeros(2, 4), torch.zeros(2), 5, 1, "cpu")
    kept = proto._kept
    assert (kept["epoch"], kept["head"], kept["best"]) == (3, 1, 30.0)
    assert (kept["state"]["weight"] == 2).all() and kept["state"]["weight"].shape == (5, 4)
    assert kept["state"]["bn"] is not None and not kept["state"]["bn"].training


def test_end_to_end_every_shift_with_per_image_statistics(results):
    bg = {f"bg_{v}" for v in ("original", "only_fg", "mixed_same", "mixed_rand", "no_fg")}
    assert set(results) == {"imagenet", "imagenet_a", "imagenet_r", "sketch", "v2", "real", "imagenet_c",
                            "occlusion_salient", "occlusion_non_salient"} | bg
    for shift, r in results.items():
        metric = "mCE" if shift == "imagenet_c" else "top1"
        block = r.per_image
        assert block is not None, shift
        if block["kind"] == "hits":
            flags = decode_array(block["hits"])[:, block["metrics"].index("top1")]
            assert 100.0 * flags.mean() == pytest.approx(r.metrics["top1"]), shift
        else:
            shares = decode_array(block["values"])[:, 0]
            assert shares.mean() == pytest.approx(r.metrics[metric], rel=1e-9)
    assert results["imagenet_a"].params["n_classes"] == 6 and results["imagenet_r"].params["n_classes"] == 6
    assert results["real"].params["n_without_labels"] == 4 and results["real"].per_image["images"] == 20
    assert results["imagenet_c"].params["ce_normalizer"] == "none"
    assert set(results["imagenet_c"].params["corruption_errors"]) == {"gaussian_noise", "contrast", "pixelate"}
    assert 0 < results["occlusion_salient"].params["information_loss"] < 1


def test_a_taken_head_dino_or_ibot_layout_scores_every_set_without_training(synth, tmp_path):
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    n_blocks, avgpool = Robustness.from_preset("synth").feature_choice(model)
    dim = model.backbone.embed_dim * (n_blocks + int(avgpool))
    w, b = torch.randn(12, dim), torch.randn(12)
    torch.save({"epoch": 100, "state_dict": {"module.linear.weight": w, "module.linear.bias": b}}, tmp_path / "d.pth")
    grid = {f"{h}.linear.{k}": (torch.zeros_like(v) if h != 1 else v) for h in range(3) for k, v in
            (("weight", w), ("bias", b))}
    torch.save({"epoch": 7, "state_dict": grid, "best_acc_hidx": 1, "best_acc": 9.0}, tmp_path / "i.pth")
    tops = []
    for name in ("d.pth", "i.pth"):
        runs = Robustness.from_preset("synth", {**QUICK, "shifts": ["v2"], "head_checkpoint": str(tmp_path / name)}
                                      ).run(model, synth)
        assert [r.variant["shift"] for r in runs] == ["imagenet", "v2"]
        tops.append([r.metrics["top1"] for r in runs])
    assert tops[0] == tops[1]  # the same head, read from either layout
    assert runs[0].params["shift_head"]["head"] == 1 and runs[0].params["shift_head"]["epoch"] == 7
    torch.save({"state_dict": {"linear.weight": torch.zeros(12, 5), "linear.bias": b}}, tmp_path / "bad.pth")
    with pytest.raises(ConfigError, match="expected \\(12, "):
        Robustness.from_preset("synth", {**QUICK, "head_checkpoint": str(tmp_path / "bad.pth")}).run(model, synth)


def test_synthetic_labels_are_training_class_indices(synth):
    """real.json and ImageNetV2's folders hold indices into the training split's sorted classes."""
    from harness.data.classification import ImageFolderDataset

    classes = ImageFolderDataset(synth, "train").classes
    val = ImageFolderDataset(synth, "val")
    real = json.loads((synth / "real.json").read_text())
    for path, target in zip(val.image_paths, val.targets):
        labels = real[int(path.stem.split("_")[-1]) - 1]
        assert not labels or labels[0] == classes.index(val.classes[target])
    v2 = ImageFolderDataset(synth / "imagenetv2-matched-frequency", None)
    assert {int(c) for c in v2.classes} <= set(range(len(classes)))


def test_subset_columns_follow_the_set_folders_and_refuse_unknown_classes():
    train = ["n01", "n02", "n03", "n04"]
    assert class_maps.subset_indices(["n02", "n04"], train, "x").tolist() == [1, 3]
    with pytest.raises(DataError, match="not among the 4 training classes"):
        class_maps.subset_indices(["n02", "n99"], train, "x")


def test_v2_folders_are_class_indices_not_sorted_names():
    # ImageFolder sorts "10" before "2": the label is the folder's number, not its rank
    labels = class_maps.v2_labels(["0", "10", "2"], [0, 1, 2, 1], 11, "v2")
    assert labels.tolist() == [0, 10, 2, 10]
    with pytest.raises(DataError, match="not a class index"):
        class_maps.v2_labels(["0", "n01440764"], [0], 1000, "v2")


def test_real_skips_empty_lists_and_accepts_any_listed_label(tmp_path):
    names = [Path(f"x/ILSVRC2012_val_{i:08d}.JPEG") for i in (3, 1, 2)]
    sets = real_label_sets(names, [[5], [], [1, 7]], "real")
    assert sets == [[1, 7], [5], []]
    kept, hits = class_maps.real_hits(np.array([7, 4, 0]), sets)
    assert kept.tolist() == [True, True, False] and hits.tolist() == [True, False]
    with pytest.raises(DataError, match="not found"):
        class_maps.read_real_labels(tmp_path / "real.json")


def test_mce_alexnet_normalised_and_unnormalised_with_per_image_shares():
    errors = {"gaussian_noise": [0.2, 0.4, 0.6, 0.8, 1.0], "fog": [0.1] * 5}
    ce = corruption.corruption_errors(errors, "alexnet")
    assert ce["gaussian_noise"] == pytest.approx(100 * 0.6 / 0.886428)
    assert ce["fog"] == pytest.approx(100 * 0.1 / 0.819324)
    assert corruption.mean_corruption_error(errors, "none") == pytest.approx(35.0)
    rng = np.random.default_rng(0)
    misses = {c: rng.random((5, 40)) < 0.5 for c in ("snow", "contrast")}
    errs = {c: m.mean(1).tolist() for c, m in misses.items()}
    for norm in corruption.NORMALIZERS:
        assert corruption.per_image_shares(misses, norm).mean() == pytest.approx(
            corruption.mean_corruption_error(errs, norm))
    with pytest.raises(ConfigError, match="no published AlexNet error"):
        corruption.corruption_errors({"saturate": [0.5]}, "alexnet")


def test_patch_drop_zeroes_whole_patches_of_the_salient_set():
    att = torch.tensor([[0.05, 0.6, 0.05, 0.3]])
    top = salient_patches(att, 0.5)
    assert top.tolist() == [[False, True, False, False]]
    assert salient_patches(att, 0.8).tolist() == [[False, True, False, True]]
    img = torch.ones(1, 3, 4, 4)
    dropped, frac = drop_patches(img, top, (2, 2), "salient")
    assert dropped[0, 0].tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1]]
    assert frac.tolist() == [0.25]
    dropped, frac = drop_patches(img, top, (2, 2), "non_salient")
    assert dropped.sum().item() == 3 * 4 and frac.tolist() == [0.75]


def test_cls_attention_is_a_distribution_over_the_patches():
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        att = cls_attention(model.backbone, x, 0)
    grid = (32 // model.backbone.patch_size) ** 2
    assert att.shape == (2, grid) and (att > 0).all() and (att.sum(1) < 1).all()  # CLS keeps some


def test_in9_runs_give_each_superclass_its_imagenet_classes():
    table = class_maps.in9_table()
    assert table.shape == (1000,) and (table == -1).sum() == 630
    assert np.bincount(table[table >= 0]).tolist() == [116, 52, 42, 36, 35, 27, 26, 20, 16]


def _run_cli(args: list[str], capsys) -> tuple[int, str]:
    code = main(args)
    return code, capsys.readouterr().err


def test_cli_refuses_a_missing_set_and_a_foreign_subset_with_one_line(synth, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SSL_BENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SSL_BENCH_RESULTS", str(tmp_path / "results"))
    root = tmp_path / "data"
    shutil.copytree(synth, root)
    base = ["eval", "--protocol", "robustness", "--preset", "synth", "--dataset", "imagefolder", "--data-root",
            str(root), "--random-init", "vit_cpu_tiny", "--set", "epochs=1", "--set", "progress=false"]
    code, err = _run_cli(base + ["--set", "shifts=[v2]", "--set", "v2_root=missing"], capsys)
    assert code == 2 and err.count("error:") == 1 and "ImageNetV2" in err
    (root / "imagenet-a" / "n99999999").mkdir()
    shutil.copy(next((root / "imagenet-a").glob("*/*.JPEG")), root / "imagenet-a" / "n99999999" / "a.JPEG")
    code, err = _run_cli(base + ["--set", "shifts=[imagenet_a]"], capsys)
    assert code == 2 and "n99999999" in err and "not among" in err
    assert not list(tmp_path.rglob("runs/*.json"))


# ---------------------------------------------------------------------------- parity with official code
def _fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def test_in9_mapping_equals_madrylab_eval_model():
    """MadryLab eval_model's mapped predictions (one-hot rows: the whole in_to_in9.json; then
    random rows) and accuracy, from the argmax over the 1000 classes (integers: exact)."""
    fx = _fixture("robustness_in9.json")
    mapped = class_maps.in9_table()[np.array(fx["argmax_1000"])]
    assert mapped.tolist() == fx["mapped_in9"]
    assert (mapped == np.array(fx["targets"])).mean() == pytest.approx(fx["accuracy"], abs=1e-12)


def test_alexnet_mce_equals_augmix_compute_mce():
    fx = _fixture("robustness_mce_alexnet.json")
    assert fx["corruptions"] == list(corruption.CORRUPTIONS_15)
    assert fx["alexnet_err"] == [corruption.ALEXNET_ERR[c] for c in corruption.CORRUPTIONS_15]
    for table in fx["tables"]:
        errors = {c: [1 - a for a in accs] for c, accs in table["accuracies"].items()}
        # float sums in another order than the official mean of accuracies: 1e-12 relative
        assert corruption.mean_corruption_error(errors, "alexnet") == pytest.approx(table["mCE"], rel=1e-12)


def test_salient_masks_and_drops_equal_ibot_occlusion_eval():
    """iBOT analysis/occlusion/eval.py --dino: for every attention mass and both drops, the patch
    set, the zeroed share of each image and the information loss it returns. The attention rows
    are the stored float32 inputs, so the masks must agree exactly."""
    fx = _fixture("robustness_patch_drop.json")
    att = torch.tensor(fx["attention"], dtype=torch.float32)
    for run in fx["runs"]:
        top = salient_patches(att, run["drop_lambda"])
        official = torch.tensor([[c == "1" for c in m] for m in run["mask"]])
        assert torch.equal(top, official), run["drop_lambda"]
        drop = "salient" if run["drop_best"] else "non_salient"
        dropped, fraction = drop_patches(torch.ones(len(att), 3, 224, 224), top, (14, 14), drop)
        zero = (dropped == 0).float().mean((1, 2, 3))
        np.testing.assert_allclose(zero.numpy(), run["zero_fraction"], atol=1e-6)
        assert fraction.mean().item() == pytest.approx(run["information_loss"], abs=1e-6)


def test_unnormalised_mce_equals_ibot_imagenet_c_eval():
    """iBOT's ImageNet-C script (Table 8's mCE): per distortion the mean error over severities,
    then the mean over its 19 distortions, unnormalised. From the recorded per-image misses: the
    printed error tuples (full precision) and the printed CE and mCE (two decimals)."""
    fx = _fixture("robustness_mce_ibot.json")
    assert fx["distortions"] == list(corruption.CORRUPTIONS_19)
    misses = {d: np.array([[c == "1" for c in row] for row in rows]) for d, rows in fx["misses"].items()}
    errors = {d: m.mean(1).tolist() for d, m in misses.items()}
    for d, printed in zip(fx["distortions"], fx["printed_errors"]):
        np.testing.assert_allclose(errors[d], printed, rtol=1e-12)
    ces = corruption.corruption_errors(errors, "none")
    for d, printed in fx["printed_ce"].items():
        assert ces[d] == pytest.approx(printed, abs=0.005 + 1e-9)
    assert corruption.per_image_shares(misses, "none").mean() == pytest.approx(fx["printed_mce"], abs=0.005 + 1e-9)


def test_black_fill_is_zero_before_normalisation():
    fill = -torch.tensor([0.485, 0.456, 0.406]) / torch.tensor([0.229, 0.224, 0.225])
    top = torch.tensor([[True, False, False, False]])
    dropped, _ = drop_patches(torch.ones(1, 3, 4, 4), top, (2, 2), "salient", fill)
    assert torch.allclose(dropped[0, :, 0, 0], fill) and dropped[0, 0, 3, 3] == 1
    cfg = Robustness.from_preset("ibot", {"occlusion_fill": "black"})
    assert torch.allclose(cfg._fill(), fill)


@pytest.mark.slow
def test_synth_dino_beats_random_init_on_the_background_labelled_set(tmp_path_factory):
    """SynthScenes small (4 background classes, learnt in the CPU budget): synth_dino
    above random init on the clean split and below it on the mCE (measured: 75.0 vs 37.5 top-1,
    54.0 vs 67.4 mCE; benchmarks/robustness/README.md)."""
    from harness.models.sources import build_model

    root = generate(tmp_path_factory.mktemp("robust_bg") / "small", preset="small", seed=0)
    out = {}
    for name, model in (("random", ModelHandle.random_init("vit_cpu_tiny", seed=0)),
                        ("synth_dino", build_model("zoo:synth_dino"))):
        runs = Robustness.from_preset("synth", {"progress": False, "cache": False}).run(model, root)
        out[name] = {r.variant["shift"]: r.metrics for r in runs}
    assert out["synth_dino"]["imagenet"]["top1"] > out["random"]["imagenet"]["top1"] + 10
    assert out["synth_dino"]["imagenet_c"]["mCE"] < out["random"]["imagenet_c"]["mCE"]


def test_imagenet_c_folders_with_other_images_and_a_non_in9_set_are_refused(synth, tmp_path):
    root = tmp_path / "data"
    shutil.copytree(synth, root)
    next((root / "imagenet-c" / "contrast" / "2").rglob("*.JPEG")).unlink()
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    with pytest.raises(DataError, match="differ from"):
        Robustness.from_preset("synth", {**QUICK, "shifts": ["imagenet_c"]}).run(model, root)
    with pytest.raises(DataError, match="in9_mapping madrylab maps 1000"):
        Robustness.from_preset("synth", {**QUICK, "shifts": ["backgrounds"], "in9_mapping": "madrylab"}).run(
            model, root)


def test_saliency_from_stored_rows_or_another_model(synth, tmp_path):
    """Stored attention rows of the model itself give the same drops as ``self``; another model's
    attention (a model spec, as zoo:dino_vits16 in the ibot preset) ranks the patches instead."""
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    proto = Robustness.from_preset("synth", {**QUICK, "shifts": ["occlusion"]})
    from harness.data.classification import ImageFolderDataset

    val = ImageFolderDataset(synth, "val")
    tf = proto.val_transform()
    with torch.no_grad():
        rows = cls_attention(model.backbone, torch.stack([tf(val.load_image(i)) for i in range(len(val))]), 0)
    np.save(tmp_path / "att.npy", rows.numpy())
    runs = {}
    for saliency in ("self", str(tmp_path / "att.npy"), "random_init:vit_cpu_tiny"):
        proto = Robustness.from_preset("synth", {**QUICK, "shifts": ["occlusion"], "saliency": saliency})
        runs[saliency] = {r.variant["shift"]: r.params for r in proto.run(model, synth)[1:]}
    assert runs["self"] == {k: {**v, "saliency": "self"} for k, v in runs[str(tmp_path / "att.npy")].items()}
    assert set(runs["random_init:vit_cpu_tiny"]) == {"occlusion_salient", "occlusion_non_salient"}
    with pytest.raises(DataError, match=r"expected \(24, "):
        np.save(tmp_path / "short.npy", rows.numpy()[:3])
        Robustness.from_preset("synth", {**QUICK, "shifts": ["occlusion"], "saliency": str(tmp_path / "short.npy")}
                               ).run(model, synth)


def test_occlusion_alone_is_not_applicable_to_a_model_without_attention(synth, monkeypatch):
    """The raw-pixel row has no attention to rank patches by: the other shifts run, and each
    occlusion drop is a record whose top1 is null with the reason (not the whole protocol skipped)."""
    from harness.context.pixels import pixel_model

    out = {r.variant["shift"]: r for r in
           Robustness.from_preset("synth", {**QUICK, "shifts": ["v2", "occlusion"]}).run(pixel_model(), synth)}
    assert set(out) == {"imagenet", "v2", "occlusion_salient", "occlusion_non_salient"}
    assert out["v2"].metrics["top1"] is not None
    for drop in ("occlusion_salient", "occlusion_non_salient"):
        assert out[drop].metrics == {"top1": None}
        assert out[drop].metrics_undefined["top1"].startswith("not applicable: occlusion (the [CLS] attention "
                                                              "saliency) needs a ViT's last attention block")


def test_occlusion_reads_a_timm_vit_inside_its_adapter_and_a_saliency_model_of_another_stride(synth):
    from harness.models.sources import build_model

    vit16 = {"source": "timm", "target": "vit_tiny_patch16_224", "weights": "random", "depth": 1, "img_size": 64}
    model = build_model(vit16, name="timm_vit")
    out = {r.variant["shift"]: r for r in
           Robustness.from_preset("synth", {**QUICK, "shifts": ["occlusion"]}).run(model, synth)}
    assert 0 <= out["occlusion_salient"].metrics["top1"] <= 100
    # the saliency model's stride (16) is not the evaluated model's (8): the drops follow its grid
    spec = "timm:vit_tiny_patch16_224,weights=random,depth=1,img_size=64"
    proto = Robustness.from_preset("synth", {**QUICK, "shifts": ["occlusion"], "saliency": spec})
    out = {r.variant["shift"]: r for r in proto.run(ModelHandle.random_init("vit_cpu_tiny"), synth)}
    assert 0 < out["occlusion_salient"].params["information_loss"] < 1


def test_sizes_beyond_the_crop_are_checked_before_any_head_is_trained(synth, monkeypatch):
    from harness.models.sources import build_model

    trained = []
    monkeypatch.setattr(Robustness, "_train_heads", lambda self, *a, **k: trained.append(1))
    spec = "timm:vit_tiny_patch16_224,weights=random,depth=1,img_size=64"
    with pytest.raises(ConfigError, match=r"crop 56 is not a multiple of the stride 16 of the saliency model .*"
                                          r"set crop=48 or 64"):
        Robustness.from_preset("synth", {**QUICK, "crop": 56, "resize": 56, "shifts": ["occlusion"], "saliency": spec}
                               ).run(ModelHandle.random_init("vit_cpu_tiny"), synth)
    model = build_model({"source": "timm", "target": "vit_tiny_patch16_224", "weights": "random", "depth": 1,
                         "patch_size": 14, "img_size": 56}, name="p14")
    with pytest.raises(ConfigError, match=r"backgrounds challenge's original images .* are 64x64, fed at their native "
                                          r"size .* stride 14 of model p14 .*--set robustness.shifts=\[v2\]"):
        Robustness.from_preset("synth", {**QUICK, "crop": 56, "resize": 56, "shifts": ["v2", "backgrounds"]}
                               ).run(model, synth)
    assert trained == []
