"""The model front door (harness.models.sources) and the feature contract of foreign models:
timm, transformers, torch.hub and user code, with random weights and no network."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from harness.cli import main
from harness.errors import CheckpointError, ConfigError, RegistryError
from harness.models.importers import import_checkpoint
from harness.models.sources import build_model, parse_spec
from harness.protocol_info import build_protocol
from harness.running.evaluate import evaluate
from harness.features.extract import extract_features
from harness.data.transforms import PatchMultipleResize
from harness.registry import DATASETS
from model_zoo_fixtures import hub_repo, tiny_dinov2, tiny_transformers_folders, timm_vit_file, user_code

DENSE = {"dataset": "voc", "fractions": ["1/1"], "seeds": [1], "progress": False}
KNN = {"dataset": "imagefolder", "feature": "cls", "ks": [3], "progress": False}


# ----------------------------------------------------------------------------- specs
def test_specs_parse_from_strings_and_mappings():
    s = parse_spec("timm:resnet18,weights=random,seed=3", name="r18")
    assert (s.source, s.target, s.options, s.name) == ("timm", "resnet18", {"weights": "random", "seed": 3}, "r18")
    assert parse_spec("hub:/repos/dinov2:dinov2_vits14,weights=w.pth").target == "/repos/dinov2:dinov2_vits14"
    m = parse_spec({"source": "timm", "target": "resnet18", "weights": "random", "name": "x"})
    assert (m.source, m.target, m.options, m.name) == ("timm", "resnet18", {"weights": "random"}, "x")
    for bad in ("resnet18", "timm:resnet18,weights", "", {"target": "resnet18"}, 3):
        with pytest.raises(ConfigError):
            parse_spec(bad)


def test_unknown_source_and_option_are_errors():
    with pytest.raises(RegistryError, match="unknown model source 'timmm'.*timm"):
        build_model("timmm:resnet18")
    with pytest.raises(ConfigError, match="unknown option"):
        build_model("checkpoint:x.safetensors,colour=blue")
    with pytest.raises(ConfigError, match="timm has no model"):
        build_model("timm:no_such_net,weights=random")


def test_timm_without_weights_never_falls_back_to_random(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-cache"))
    with pytest.raises(CheckpointError, match="no weights in timm's local cache"):
        build_model("timm:resnet18")  # the default: timm's local cache, never a download
    with pytest.raises(CheckpointError, match="not found"):
        build_model(f"timm:resnet18,weights={tmp_path / 'missing.safetensors'}")


# ----------------------------------------------------------------------------- timm ViT = harness ViT
VIT_DEPTH = 4
@pytest.fixture(scope="module")
def vit_pair(tmp_path_factory):
    """One random timm ViT-S/16 file, reached through the timm source and through `zoo convert`: four
    blocks of the twelve (``VIT_DEPTH``), what the features of the last four take."""
    folder = tmp_path_factory.mktemp("vit")
    path = timm_vit_file(folder, depth=VIT_DEPTH)
    # `zoo convert` the timm file (its ImageNet head dropped), keeping timm's position resizing
    assert main(["zoo", "convert", str(path), "--out", str(folder / "converted"), "--drop", "head.*",
                 "--pos-interp", "timm"]) == 0
    via_timm = build_model(f"timm:vit_small_patch16_224.dino,weights={path},depth={VIT_DEPTH}", name="vit-timm")
    via_harness = build_model(f"checkpoint:{folder / 'converted.safetensors'}", name="vit-harness")
    return via_timm, via_harness


def test_timm_vit_features_equal_the_harness_vit_on_the_same_weights(vit_pair):
    a, b = vit_pair
    assert a.cache_key == b.cache_key  # one identity: the weights' content and one feature function
    assert a.meta["_weights_hash"] == b.meta["sha256"]  # the content hash is the converted file's sha256
    torch.manual_seed(0)
    for size in (224, 64, 96):  # the trained grid, and two that resize the position embeddings
        x = torch.randn(2, 3, size, size)
        with torch.no_grad():
            fa, fb = a.backbone.get_features(x, 4), b.backbone.get_features(x, 4)
        assert torch.allclose(fa.cls, fb.cls, atol=1e-6, rtol=0)
        assert torch.allclose(fa.patches, fb.patches, atol=1e-6, rtol=0)


def test_timm_vit_and_harness_vit_give_identical_records_and_share_the_cache(vit_pair, synth_tiny, isolated_home):
    a, b = vit_pair
    features = isolated_home / "home" / "features"
    for name, preset, values, root in (("dense_nn", "cribo", DENSE, synth_tiny),
                                       ("knn", "synth", KNN, synth_tiny / "imagenet")):
        protocol = build_protocol(name, preset, values)
        rec_a, _ = evaluate(a, protocol, root)
        cached = sorted(features.iterdir())
        rec_b, skipped = evaluate(b, protocol, root)
        assert not skipped and sorted(features.iterdir()) == cached  # b read a's cached features
        assert [r["metrics"] for r in rec_b] == [r["metrics"] for r in rec_a]
        assert {r["model"]["weights_key"] for r in rec_a + rec_b} == {a.cache_key}
        assert [r["protocol"]["fingerprint"] for r in rec_a] == [r["protocol"]["fingerprint"] for r in rec_b]
    source = DATASETS.get("voc")(str(synth_tiny), "val")
    transform = PatchMultipleResize(patch_size=16)
    first = extract_features(a, source, transform, progress=False)
    second = extract_features(b, source, transform, progress=False)
    assert second.from_cache and second.key == first.key


@pytest.mark.slow  # end to end (seconds); CI runs it with the slow suite
def test_a_bare_timm_name_reads_a_users_file_as_zoo_convert_does(vit_pair, synth_tiny, isolated_home):
    """docs/MODELS.md, "Identity": no pretrained tag's mean and std for the user's own file."""
    path, converted = vit_pair[0].meta["checkpoint"], vit_pair[1].meta["checkpoint"]
    bare = build_model(f"timm:vit_small_patch16_224,weights={path},depth={VIT_DEPTH}", name="vit-timm")
    harness_vit = build_model(f"checkpoint:{converted}", name="vit-harness")
    assert bare.record_info()["adapter"]["norm_source"] == "default imagenet"
    assert bare.cache_key == harness_vit.cache_key and bare.meta["_weights_hash"] == harness_vit.meta["sha256"]
    torch.manual_seed(0)
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        fa, fb = bare.backbone.get_features(x, 4), harness_vit.backbone.get_features(x, 4)
    assert (fa.cls - fb.cls).abs().max().item() <= 1e-6 and (fa.patches - fb.patches).abs().max().item() <= 1e-6
    knn = build_protocol("knn", "synth", {**KNN, "resize": 224, "crop": 224})
    rec_a, _ = evaluate(bare, knn, synth_tiny / "imagenet")
    rec_b, skipped = evaluate(harness_vit, knn, synth_tiny / "imagenet")
    assert not skipped and [r["metrics"] for r in rec_a] == [r["metrics"] for r in rec_b]
    assert {r["model"]["weights_key"] for r in rec_a + rec_b} == {bare.cache_key}


def test_a_timm_vit_with_its_own_normalisation_is_another_model(tmp_path, vit_pair):
    path = Path(vit_pair[0].meta["checkpoint"])
    # the tag named by the user declares mean = std = 0.5; stating it gives the same model
    augreg = build_model(f"timm:vit_small_patch16_224.augreg_in21k,weights={path},depth={VIT_DEPTH}")
    stated = build_model(f"timm:vit_small_patch16_224,weights={path},depth={VIT_DEPTH},mean=0.5/0.5/0.5,"
                         "std=0.5/0.5/0.5")
    info = augreg.record_info()["adapter"]
    assert info["input_norm"].startswith("mean=[0.5") and info["norm_source"] == "timm tag augreg_in21k"
    assert stated.record_info()["adapter"]["norm_source"] == "stated"
    assert augreg.cache_key == stated.cache_key != vit_pair[0].cache_key
    torch.manual_seed(0)
    x = torch.randn(1, 3, 64, 64)
    # the adapter maps ImageNet-normalised input onto the model's own normalisation, per channel
    mean_in, std_in = torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225])
    as_model = (x * std_in.view(1, 3, 1, 1) + mean_in.view(1, 3, 1, 1) - 0.5) / 0.5
    with torch.no_grad():
        got = augreg.backbone.get_features(x).cls
        expect = vit_pair[0].backbone.get_features(as_model).cls
    assert torch.allclose(got, expect, atol=1e-5, rtol=0)


# ----------------------------------------------------------------------------- transformers
def test_transformers_dinov2_equals_the_harness_dinov2_import(tmp_path):
    pytest.importorskip("transformers")
    hf_dir, official = tiny_dinov2(tmp_path)
    hf = build_model(f"hf:{hf_dir}")
    harness_vit, _ = import_checkpoint(official, layout="dinov2", num_heads=2)
    torch.manual_seed(0)
    x = torch.randn(2, 3, 56, 56)  # the trained grid
    with torch.no_grad():
        fa, fb = hf.backbone.get_features(x, 2), harness_vit.get_features(x, 2)
    assert torch.allclose(fa.cls, fb.cls, atol=1e-5, rtol=0)
    assert torch.allclose(fa.patches, fb.patches, atol=1e-5, rtol=0)
    # at another grid transformers resizes the position table to the target size, the official
    # DINOv2 by the scale factor (g + 0.1) / sqrt(N): the harness ViT with offset 0 is transformers'
    x = torch.randn(2, 3, 84, 84)
    harness_vit.pos_interp_offset = 0.0
    with torch.no_grad():
        assert torch.allclose(hf.backbone.get_features(x).patches, harness_vit.get_features(x).patches, atol=1e-5)
    info = hf.record_info()
    assert info["adapter"]["adapter"] == "transformers" and info["adapter"]["pos_interp"] == "transformers"


def test_transformers_vision_models_give_tokens_and_grids(tmp_path):
    pytest.importorskip("transformers")
    folders = tiny_transformers_folders(tmp_path)
    #            (patch, blocks, registers, global feature, dropped text-tower keys)
    expect = {"vit": (8, 2, 0, "token", False), "clip": (8, 2, 0, "token", True),
              "siglip": (8, 1, 0, "head", True), "dinov2_reg": (14, 2, 4, "token", False)}
    for name, folder in folders.items():
        model = build_model(f"hf:{folder}")
        patch, blocks, regs, pooling, dropped = expect[name]
        b = model.backbone
        assert (b.patch_size, b.num_blocks, b.num_reg_tokens, b.settings["pooling"]) == (patch, blocks, regs, pooling)
        assert bool(model.meta["dropped_keys"]) == dropped  # a CLIP / SigLIP folder's text tower
        size = 4 * patch
        with torch.no_grad():
            f = b.get_features(torch.randn(2, 3, size, size + patch), blocks)
        assert f.cls.shape == (2, blocks, 32) and f.patches.shape == (2, blocks, 4, 5, 32), name


def test_a_transformers_folder_states_why_its_normalisation(tmp_path):
    pytest.importorskip("transformers")
    from harness.models.feature_backbone import NAMED_NORMS

    folders = tiny_transformers_folders(tmp_path)
    (folders["vit"] / "preprocessor_config.json").write_text(json.dumps({"image_mean": [0.5, 0.4, 0.3],
                                                                         "image_std": [0.2, 0.2, 0.2]}))
    clip_mean, clip_std = NAMED_NORMS["clip"]
    expect = {  # saved without a preprocessor_config.json: the family's own, said so
        f"hf:{folders['clip']}": ("family clip", clip_mean, clip_std),
        f"hf:{folders['siglip']}": ("family siglip", (0.5,) * 3, (0.5,) * 3),
        f"hf:{folders['dinov2_reg']}": ("default imagenet", (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
        f"hf:{folders['vit']}": ("folder preprocessor_config.json", (0.5, 0.4, 0.3), (0.2,) * 3),
        f"hf:{folders['clip']},norm=imagenet": ("stated", (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    }
    for spec, (why, mean, std) in expect.items():
        b = build_model(spec).backbone
        assert b.adapter_info()["norm_source"] == why, spec
        assert b.input_norm.mean == pytest.approx(mean) and b.input_norm.std == pytest.approx(std), spec


def test_transformers_folder_with_missing_weights_is_refused(tmp_path):
    pytest.importorskip("transformers")
    from safetensors.torch import load_file, save_file

    folder = tiny_transformers_folders(tmp_path)["vit"]
    state = load_file(str(folder / "model.safetensors"))
    state.pop(next(k for k in state if "layernorm" in k))
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="missing or mismatched"):
        build_model(f"hf:{folder}")


def test_transformers_folder_without_weights_is_refused(tmp_path):
    pytest.importorskip("transformers")
    hf_dir, _ = tiny_dinov2(tmp_path)
    (hf_dir / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no weights"):
        build_model(f"hf:{hf_dir}")


# ----------------------------------------------------------------------------- CNNs, hub, user code
@pytest.mark.parametrize("spec, stride, dim", [("timm:resnet10t,weights=random", 32, 512),
                                               ("timm:convnext_atto,weights=random", 32, 320),
                                               ("timm:swin_tiny_patch4_window7_224,weights=random", 32, 768)])
def test_hierarchical_models_give_their_last_stage_as_the_patch_grid(spec, stride, dim):
    model = build_model(spec)
    assert (model.backbone.patch_size, model.backbone.embed_dim, model.backbone.num_blocks) == (stride, dim, 1)
    with torch.no_grad():
        f = model.backbone.get_features(torch.randn(2, 3, 64, 96))
    assert f.cls.shape == (2, 1, dim) and f.patches.shape == (2, 1, 2, 3, dim)
    with pytest.raises(ConfigError, match="n_last_blocks"):
        model.backbone.get_features(torch.randn(1, 3, 64, 64), n_last_blocks=2)


def test_random_timm_weights_are_seeded():
    key = build_model("timm:resnet10t,weights=random").cache_key
    assert build_model("timm:resnet10t,weights=random,seed=0").cache_key == key
    assert build_model("timm:resnet10t,weights=random,seed=1").cache_key != key


def test_hub_entry_and_user_code(tmp_path):
    repo, code = hub_repo(tmp_path), user_code(tmp_path)
    hub = build_model(f"hub:{repo}:small_resnet,weights=random")
    assert hub.backbone.patch_size == 32 and hub.record_info()["adapter"]["adapter"] == "timm"
    user = build_model(f"code:{code}:build,features={code}:features")
    assert (user.backbone.patch_size, user.backbone.embed_dim) == (8, 48)
    with torch.no_grad():
        f = user.backbone.get_features(torch.randn(1, 3, 64, 32))
    assert f.patches.shape == (1, 1, 8, 4, 48)
    with pytest.raises(CheckpointError, match="weights=FILE"):
        build_model(f"hub:{repo}:small_resnet")  # an entry's weights are always said
    with pytest.raises(ConfigError, match="not a torch.nn.Module"):
        build_model(f"code:{code}:not_a_module")
    with pytest.raises(ConfigError, match="feature function"):
        build_model(f"code:{code}:plain")  # a module with no spatial features and no feature function


def test_user_weights_are_loaded_strictly(tmp_path):
    from safetensors.torch import save_file

    code = user_code(tmp_path)
    good = build_model(f"code:{code}:build,features={code}:features")
    state = {k: v + 1 for k, v in good.backbone.model.state_dict().items()}
    save_file(state, str(tmp_path / "w.safetensors"))
    loaded = build_model(f"code:{code}:build,features={code}:features,weights={tmp_path / 'w.safetensors'}")
    assert loaded.cache_key != good.cache_key
    assert torch.equal(loaded.backbone.model.body[0].weight, state["body.0.weight"])
    save_file({"body.0.weight": state["body.0.weight"]}, str(tmp_path / "partial.safetensors"))
    with pytest.raises(CheckpointError, match="missing"):
        build_model(f"code:{code}:build,features={code}:features,weights={tmp_path / 'partial.safetensors'}")


def test_resnet_through_dense_nn_and_knn(synth_tiny, isolated_home):
    model = build_model("timm:resnet10t,weights=random", name="r10t")  # timm's smallest ResNet
    dense, _ = evaluate(model, build_protocol("dense_nn", "cribo", DENSE), synth_tiny)
    knn, _ = evaluate(model, build_protocol("knn", "synth", KNN), synth_tiny / "imagenet")
    for rec in dense + knn:
        assert rec["model"]["adapter"]["stride"] == 32 and rec["model"]["weights_key"] == model.cache_key
        assert rec["model"]["spec"] == "timm:resnet10t,weights=random"
    assert 0 <= dense[0]["metrics"]["mIoU"] <= 100 and 0 <= knn[0]["metrics"]["top1"] <= 100


# ----------------------------------------------------------------------------- the CLI
def _records(home: Path) -> list:
    runs = home / "results" / "runs"
    return list(runs.rglob("*.json")) if runs.exists() else []


def _features_cached(home: Path) -> list:
    feats = home / "home" / "features"
    return [p for p in feats.iterdir() if not p.name.startswith(".")] if feats.exists() else []


@pytest.mark.parametrize("spec, message", [
    ("nosuch:thing", "unknown model source 'nosuch'"),
    ("timm:resnet18,weights=/nowhere/r18.safetensors", "not found"),
    ("code:{code}:not_a_module", "not a torch.nn.Module"),
    ("code:{code}:plain", "feature function"),
    ("hf:/nowhere/dinov2", "not found"),
])
def test_bad_specs_are_one_error_line_and_exit_2(spec, message, synth_tiny, isolated_home, capsys):
    code = user_code(isolated_home)
    rc = main(["eval", "--protocol", "knn", "--preset", "synth", "--dataset", "imagefolder", "--data-root",
               str(synth_tiny / "imagenet"), "--model", spec.format(code=code), "--set", "progress=false"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error:") and message in err[0]
    assert not _records(isolated_home) and not _features_cached(isolated_home)


def test_eval_takes_a_model_spec(synth_tiny, isolated_home, capsys):
    rc = main(["eval", "--protocol", "knn", "--preset", "synth", "--dataset", "imagefolder", "--data-root",
               str(synth_tiny / "imagenet"), "--model", "timm:resnet10t,weights=random", "--name", "r18",
               "--set", "progress=false", "--set", "ks=[3]"])
    assert rc == 0 and "r18" in capsys.readouterr().out
    recs = [json.loads(p.read_text()) for p in _records(isolated_home)]
    assert recs and all(r["model"]["name"] == "r18" for r in recs)
    rc = main(["eval", "--protocol", "knn", "--dataset", "imagefolder", "--data-root", str(synth_tiny),
               "--model", "timm:resnet18,weights=random", "--random-init", "vit_cpu_tiny"])
    assert rc == 2 and "exactly one of --model" in capsys.readouterr().err


# ----------------------------------------------------------------------------- every protocol, every source
CPU_PROTOCOLS = [
    ("dense_nn", "cribo", DENSE, ""),
    ("dense_nn", "hbird_synth", {**DENSE, "fractions": ["1/1"]}, ""),
    ("knn", "synth", KNN, "imagenet"),
    ("linear", "synth", {"dataset": "imagefolder", "cached_features": True, "epochs": 2, "progress": False},
     "imagenet"),
    ("linear", "synth", {"dataset": "imagefolder", "epochs": 1, "progress": False}, "imagenet"),
]


@pytest.mark.slow
def test_every_source_through_every_cpu_protocol(synth_tiny, isolated_home):
    pytest.importorskip("transformers")
    hf_dir, _ = tiny_dinov2(isolated_home)
    repo, code = hub_repo(isolated_home), user_code(isolated_home)
    specs = ["timm:resnet18,weights=random", "timm:convnext_atto,weights=random",
             "timm:swin_tiny_patch4_window7_224,weights=random", f"hf:{hf_dir}",
             f"hub:{repo}:small_resnet,weights=random", f"code:{code}:build,features={code}:features"]
    for spec in specs:
        model = build_model(spec)
        size = 64 // model.backbone.patch_size * model.backbone.patch_size  # 56 for DINOv2's patch 14
        for name, preset, values, sub in CPU_PROTOCOLS:
            values = {**values, **({"input_size": size} if preset == "hbird_synth" else {}),
                      **({"resize": size, "crop": size} if name in ("knn", "linear") else {})}
            recs, _ = evaluate(model, build_protocol(name, preset, values), synth_tiny / sub if sub else synth_tiny)
            assert recs, (spec, name, preset)
            for rec in recs:
                metric = rec["metrics"].get("mIoU", rec["metrics"].get("top1"))
                assert metric is not None and 0 <= metric <= 100, (spec, name, rec["metrics"])
                assert rec["model"]["adapter"]["stride"] == model.backbone.patch_size


@pytest.mark.slow  # the run writes its leaderboard and report (a few seconds of plotting)
def test_a_suite_takes_any_model_spec(synth_tiny, isolated_home, tmp_path):
    from harness.running.suite import load_suite, run_suite

    code = user_code(tmp_path)
    path = tmp_path / "suite.yaml"
    path.write_text(f"""
synth: {{preset: tiny, root: {synth_tiny}}}
models:
  - name: r18
    model: {{source: timm, target: resnet18, weights: random}}
  - name: mine
    model: "code:{code}:build,features={code}:features"
  - name: vit
    random_init: {{arch: vit_cpu_tiny, seed: 0}}
protocols:
  - name: knn
    dataset: imagefolder
    data_root: "{{synth}}/imagenet"
    set: {{ks: [3], progress: false}}
""")
    suite, source = load_suite(path)
    out = run_suite(suite, source, progress=False, log=lambda *_: None, out_dir=tmp_path / "out")
    assert not out["failures"], out["failures"]
    adapters = {r["model"]["name"]: r["model"].get("adapter", {}).get("adapter") for r in out["records"]}
    assert adapters == {"r18": "timm", "mine": "function", "vit": None}
    path.write_text(path.read_text().replace("    random_init: {arch: vit_cpu_tiny, seed: 0}",
                                             "    random_init: {arch: vit_cpu_tiny, seed: 0}\n    zoo: synth_dino"))
    from harness.errors import ConfigError as Err

    suite, source = load_suite(path)
    with pytest.raises(Err, match="exactly one of"):
        run_suite(suite, source, progress=False, log=lambda *_: None, out_dir=tmp_path / "out")


def test_the_content_hash_is_the_sha256_of_the_safetensors_file():
    import hashlib

    from safetensors.torch import save

    from harness.models.feature_backbone import state_content_hash

    g = torch.Generator().manual_seed(0)
    state = {"blocks.0.w": torch.randn(3, 4, generator=g), "a": torch.randn(5, generator=g).half(),
             "bn.num_batches_tracked": torch.tensor(7), "z.bf": torch.randn(2, 2, generator=g).bfloat16(),
             "mask": torch.tensor([True, False]), "empty": torch.zeros(0), "i8": torch.arange(3, dtype=torch.int8),
             "u8": torch.arange(9, dtype=torch.uint8).reshape(3, 3)[:, 1],  # not contiguous
             "d": torch.randn(2, dtype=torch.float64, generator=g)}
    assert state_content_hash(state) == hashlib.sha256(save({k: v.contiguous() for k, v in state.items()})).hexdigest()
