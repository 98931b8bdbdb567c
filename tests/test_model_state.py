"""Building and measuring never change a model: every parameter and buffer (BatchNorm's
running statistics and batch counter included) is the same in the weights file, after the
build and after a protocol run, for every source, with and without a feature function, from
modules that their entries return in training mode; the weights key is the file's content."""
from __future__ import annotations

import hashlib
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from harness.models.feature_backbone import state_content_hash
from harness.models.sources import build_model
from harness.protocol_info import build_protocol
from harness.running.evaluate import evaluate

BN_CODE = '''
import torch
from torch import nn


def bn_cnn():
    """A stride-8 CNN with BatchNorm, returned in training mode (as torch.hub entries are)."""
    layers = []
    for c_in, c_out in ((3, 16), (16, 24), (24, 32)):
        layers += [nn.Conv2d(c_in, c_out, 3, 2, 1), nn.BatchNorm2d(c_out), nn.ReLU()]
    return nn.Sequential(*layers)


def bn_resnet():
    import timm

    return timm.create_model("resnet10t", pretrained=False, num_classes=0)  # timm's smallest ResNet


def features(model, x, n_last_blocks, norm):
    fmap = model(x)
    return fmap.mean(dim=(2, 3))[:, None], fmap.permute(0, 2, 3, 1)[:, None]
'''

KNN = {"dataset": "imagefolder", "feature": "cls", "ks": [3], "progress": False}


def _digests(state: dict[str, torch.Tensor]) -> dict[str, str]:
    """sha256 of every tensor's bytes, by name: a change in any one element shows."""
    return {k: hashlib.sha256(v.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
            .hexdigest() for k, v in state.items()}


def _weights_file(module: torch.nn.Module, path: Path, seed: int = 0) -> Path:
    """The module's state with BatchNorm statistics away from their init values (so a BatchNorm
    run in training mode would move them visibly), written as a user saves it."""
    g = torch.Generator().manual_seed(seed)
    state = {}
    for k, v in module.state_dict().items():
        if k.endswith("running_var"):
            v = torch.rand(v.shape, generator=g) + 0.5
        elif k.endswith("running_mean"):
            v = torch.randn(v.shape, generator=g) * 0.1
        elif k.endswith("num_batches_tracked"):
            v = torch.tensor(1000)
        state[k] = v.contiguous()
    save_file(state, str(path))
    return path


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """(spec, the weights file's state it must hold) for each source over BatchNorm models."""
    folder = tmp_path_factory.mktemp("state")
    repo = folder / "hubrepo"
    repo.mkdir()
    (repo / "hubconf.py").write_text('dependencies = ["torch"]\n' + textwrap.dedent(BN_CODE))
    code = folder / "bn_models.py"
    code.write_text(textwrap.dedent(BN_CODE))
    import importlib.util

    loader = importlib.util.spec_from_file_location("bn_models_for_files", code)
    mod = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(mod)
    cnn = _weights_file(mod.bn_cnn(), folder / "cnn.safetensors")
    resnet = _weights_file(mod.bn_resnet(), folder / "resnet10t.safetensors", seed=1)
    specs = [
        (f"hub:{repo}:bn_cnn,weights={cnn},features={code}:features", cnn),  # the probe's case
        (f"code:{code}:bn_cnn,weights={cnn},features={code}:features", cnn),
        (f"hub:{repo}:bn_resnet,weights={resnet}", resnet),  # a timm module, no feature function
        (f"code:{code}:bn_resnet,weights={resnet}", resnet),
        (f"timm:resnet10t,weights={resnet}", resnet),
    ]
    return repo, code, cnn, specs


def test_building_and_measuring_change_no_parameter_or_buffer(sources, synth_tiny, isolated_home):
    *_, specs = sources
    protocol = build_protocol("knn", "synth", KNN)
    files: dict = {}  # each file's tensors and digests, read once (two specs read each file)
    for spec, path in specs:
        if path not in files:
            before = load_file(str(path))
            files[path] = before, _digests(before)
        before, expect = files[path]
        model = build_model(spec)
        state = model.backbone.model.state_dict()
        assert _digests(state) == expect, spec  # the file, every buffer included
        assert model.meta["_weights_hash"] == state_content_hash(before), spec  # keyed by the file's content
        records, skipped = evaluate(model, protocol, synth_tiny / "imagenet")
        assert records and not skipped
        assert _digests(model.backbone.model.state_dict()) == expect, spec


def test_a_linear_probe_run_changes_nothing(sources, synth_tiny, isolated_home):
    *_, specs = sources
    spec, path = specs[0]
    model = build_model(spec)
    model.backbone.train()  # a caller's model left in training mode: the protocol sets eval itself
    linear = build_protocol("linear", "synth", {"dataset": "imagefolder", "epochs": 1, "progress": False})
    records, skipped = evaluate(model, linear, synth_tiny / "imagenet")
    assert records and not skipped and records[0]["metrics"]
    assert _digests(model.backbone.model.state_dict()) == _digests(load_file(str(path)))


def test_the_probe_leaves_each_module_in_its_own_mode(sources):
    from harness.models.sources.generic import FunctionBackbone
    from harness.models.feature_backbone import probing

    repo, code, cnn, _ = sources
    module = torch.hub.load(str(repo), "bn_cnn", source="local", trust_repo=True)
    module[1].eval()  # a mixed state: one BatchNorm frozen by its owner, the rest training
    modes = [m.training for m in module.modules()]
    with probing(module):
        assert not any(m.training for m in module.modules()) and not torch.is_grad_enabled()
    assert [m.training for m in module.modules()] == modes
    import importlib.util

    loader = importlib.util.spec_from_file_location("bn_models_probe", code)
    mod = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(mod)
    counts = [int(b) for k, b in module.state_dict().items() if k.endswith("num_batches_tracked")]
    FunctionBackbone(module, "bn_cnn", mod.features, "features")
    assert [int(b) for k, b in module.state_dict().items() if k.endswith("num_batches_tracked")] == counts
    assert [m.training for m in module.modules()] == modes


def test_a_hub_entry_with_batchnorm_gives_the_modules_own_eval_features(sources):
    repo, code, cnn, specs = sources
    model = build_model(specs[0][0])
    own = torch.hub.load(str(repo), "bn_cnn", source="local", trust_repo=True)
    own.load_state_dict(load_file(str(cnn)))
    own.eval()
    torch.manual_seed(0)
    x = torch.randn(2, 3, 64, 96)
    with torch.no_grad():
        fmap = own(x)
        got = model.backbone.get_features(x)
    # the harness's input is ImageNet-normalised, as the module's default normalisation: no change
    assert model.record_info()["adapter"]["norm_source"] == "default imagenet"
    assert (got.patches[:, 0] - fmap.permute(0, 2, 3, 1)).abs().max().item() <= 1e-6
    assert (got.cls[:, 0] - fmap.mean(dim=(2, 3))).abs().max().item() <= 1e-6


def test_a_transformers_folder_build_changes_nothing(tmp_path, synth_tiny, isolated_home):
    """The sources without BatchNorm too: every tensor the folder or file holds is the model's,
    before and after a k-NN run, and the key is their content."""
    pytest.importorskip("transformers")
    from model_zoo_fixtures import tiny_dinov2

    hf_dir, _ = tiny_dinov2(tmp_path)
    model = build_model(f"hf:{hf_dir}")
    before = load_file(str(hf_dir / "model.safetensors"))
    state = model.backbone.model.state_dict()
    # transformers may rename keys as it loads (4.x and 5.x spellings): the tensors are compared
    assert sorted(_digests(state).values()) == sorted(_digests(before).values())
    assert model.meta["_weights_hash"] == state_content_hash(state)
    knn = build_protocol("knn", "synth", {**KNN, "resize": 56, "crop": 56})
    records, _ = evaluate(model, knn, synth_tiny / "imagenet")
    assert records and _digests(model.backbone.model.state_dict()) == _digests(state)
