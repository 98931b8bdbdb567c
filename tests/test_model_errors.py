"""Every way a model spec, a weights file, a folder, a hub repository or a user function can be
wrong ends in one `error:` line that names the input and the fix: exit 2, no record, nothing
cached. The cases are the table of docs/MODELS.md ("When a spec is wrong"), row for row."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from safetensors.torch import save_file

from harness.errors import SslBenchError
from harness.models.sources import build_model

ROOT = Path(__file__).resolve().parents[1]

CODE = '''
import torch
from torch import nn


def bn_cnn():
    layers = []
    for c_in, c_out in ((3, 16), (16, 24), (24, 32)):
        layers += [nn.Conv2d(c_in, c_out, 3, 2, 1), nn.BatchNorm2d(c_out), nn.ReLU()]
    return nn.Sequential(*layers)


def features(model, x, n_last_blocks, norm):
    fmap = model(x)
    return fmap.mean(dim=(2, 3))[:, None], fmap.permute(0, 2, 3, 1)[:, None]


def bad_features(model, x, n_last_blocks, norm):
    return model(x)


def not_a_module():
    return "a string"


def plain():
    return nn.Linear(3, 4)


def raises():
    raise RuntimeError("cannot build this model today")
'''

# (spec, what the one line says); {name} are the files of the `inputs` fixture
CASES = [
    ("nosuch:thing", "unknown model source 'nosuch'"),
    ("resnet18", "names no source"),
    ("timm:resnet18,weights", "is not key=value"),
    ("timm:resnet18,wieghts={r18}", "unknown option 'wieghts' (did you mean 'weights'?)"),
    ("timm:resnet18,weights=random,drop_rate_x=0.1", "unknown option 'drop_rate_x'"),
    ("timm:no_such_net,weights=random", "timm has no model 'no_such_net'"),
    ("timm:resnet18", "no weights in timm's local cache"),
    ("timm:resnet18,weights=/nowhere/r18.safetensors", "weights file /nowhere/r18.safetensors not found"),
    ("timm:resnet50,weights={r18}", "does not fit ResNet"),
    ("timm:resnet18,weights={truncated}", "cannot be read as a .safetensors file"),
    ("timm:resnet18,weights={text}", "cannot be read as a tensors-only torch file"),
    ("timm:resnet18,weights={folder}", "is a folder"),
    ("timm:resnet18,weights=random,seed=abc", "seed must be an integer"),
    ("timm:resnet18,weights=random,norm=imagnet", "norm must be one of imagenet, clip, inception"),
    ("timm:resnet18,weights=random,mean=0.5/0.5,std=0.5/0.5/0.5", "mean needs three numbers R/G/B"),
    ("timm:resnet18,weights=random,mean=0.5/0.5/0.5", "give both mean=R/G/B and std=R/G/B"),
    ("hf:/nowhere/dinov2", "transformers model folder /nowhere/dinov2 not found"),
    ("hf:{hf_no_config}", "no config.json"),
    ("hf:{hf_no_weights}", "no weights (model.safetensors or pytorch_model.bin)"),
    ("hf:{hf_bad_config}", "transformers cannot load this folder"),
    ("hf:{hf_no_weights},colour=blue", "unknown option(s) ['colour']"),
    ("hub:/nowhere:entry,weights=random", "torch.hub repository folder /nowhere not found"),
    ("hub:{repo}", "expected hub:REPO_DIR:ENTRY"),
    ("hub:{repo}:no_such_entry,weights=random", "has no entry 'no_such_entry'; its entries: bad_features, bn_cnn"),
    ("hub:{repo}:bn_cnn", "give weights=FILE"),
    ("hub:{repo}:bn_cnn,weights=random,depth=3", "takes no option 'depth'"),
    ("hub:{repo}:bn_cnn,weights=random,featurs={code}:features", "unknown option 'featurs' (did you mean 'features'?)"),
    ("code:{code}:missing_fn", "has no callable 'missing_fn'; it defines bad_features, bn_cnn"),
    ("code:{code}:not_a_module", "returned str, not a torch.nn.Module"),
    ("code:{code}:plain", "give a feature function"),
    ("code:{broken}:build", "cannot be imported: SyntaxError"),
    ("code:{code}:raises", "failed: RuntimeError: cannot build this model today"),
    ("code:{code}:bn_cnn,features={code}:bad_features", "must return (cls, patches) tensors"),
    ("code:{code}:bn_cnn,features={code}:features,patch_size=5", "patch_size 5 but the feature function gave"),
    ("code:{code}:bn_cnn,features={code}:features,weights={r18}", "does not fit Sequential"),
    ("checkpoint:/nowhere/x.safetensors", "checkpoint /nowhere/x.safetensors not found"),
    ("random_init:no_such_arch", "unknown architecture 'no_such_arch'"),
    ("zoo:no_such_model", "'no_such_model' is neither in the zoo nor imported under"),
    ("checkpoint:/nowhere/x.safetensors,pos_inter=timm", "unknown option(s) ['pos_inter'] (did you mean 'pos_interp'"),
    ("pixels:,patch_size=abc", "patch_size must be a whole number of pixels, found 'abc'"),
]
# through the command line in a subprocess: what a user sees, exit code and all
CLI_CASES = ["timm:resnet18,wieghts={r18}", "timm:resnet18,weights={truncated}",
             pytest.param("timm:resnet50,weights={r18}", marks=pytest.mark.slow),  # ~9 s each on 2 cores
             pytest.param("hub:{repo}:no_such_entry,weights=random", marks=pytest.mark.slow)]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("wrong")
    import timm

    r18 = folder / "resnet18.safetensors"
    save_file({k: v.contiguous() for k, v in timm.create_model("resnet18", num_classes=0).state_dict().items()},
              str(r18))
    truncated = folder / "truncated.safetensors"
    truncated.write_bytes(r18.read_bytes()[: r18.stat().st_size // 2])
    text = folder / "weights.pth"
    text.write_text("not a torch file\n")
    (folder / "a_folder").mkdir()
    hf_no_config, hf_no_weights, hf_bad = folder / "hf-empty", folder / "hf-no-weights", folder / "hf-bad"
    for f in (hf_no_config, hf_no_weights, hf_bad):
        f.mkdir()
    (hf_no_weights / "config.json").write_text(json.dumps({"model_type": "dinov2"}))
    (hf_bad / "config.json").write_text("{not json")
    (hf_bad / "model.safetensors").write_bytes(b"")
    repo = folder / "hubrepo"
    repo.mkdir()
    (repo / "hubconf.py").write_text(textwrap.dedent(CODE).replace("def not_a_module", "def _not_a_module")
                                     .replace("def plain", "def _plain").replace("def raises", "def _raises"))
    code = folder / "my_models.py"
    code.write_text(textwrap.dedent(CODE))
    broken = folder / "broken.py"
    broken.write_text("def build(:\n    pass\n")
    return {"r18": str(r18), "truncated": str(truncated), "text": str(text), "folder": str(folder / "a_folder"),
            "hf_no_config": str(hf_no_config), "hf_no_weights": str(hf_no_weights), "hf_bad_config": str(hf_bad),
            "repo": str(repo), "code": str(code), "broken": str(broken), "home": str(folder / "empty-hf")}


@pytest.mark.parametrize("spec, message", CASES, ids=[c[0] for c in CASES])
def test_a_wrong_spec_is_one_line_that_names_it(spec, message, inputs, monkeypatch):
    monkeypatch.setenv("HF_HOME", inputs["home"])  # timm's cache: empty, and never the network
    with pytest.raises(SslBenchError) as err:
        build_model(spec.format(**inputs))
    text = str(err.value)
    assert "\n" not in text and message in text, text


def _records_and_features(home: Path) -> list:
    return [p for p in home.rglob("*") if p.is_file() and (p.suffix == ".json" or "features" in p.parts)]


@pytest.mark.slow  # end to end (seconds); CI runs it with the slow suite
@pytest.mark.parametrize("spec", CLI_CASES)
def test_the_command_line_prints_one_error_line_and_exits_2(spec, inputs, synth_tiny, tmp_path):
    message = dict(CASES)[spec]
    env = {**os.environ, "SSL_BENCH_HOME": str(tmp_path / "home"), "SSL_BENCH_RESULTS": str(tmp_path / "results"),
           "HF_HOME": inputs["home"], "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, str(ROOT / "run_benchmark.py"), "eval", "--protocol", "knn", "--preset",
                          "synth", "--dataset", "imagefolder", "--data-root", str(synth_tiny / "imagenet"),
                          "--model", spec.format(**inputs)], capture_output=True, text=True, env=env, timeout=300)
    err = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(err) == 1 and err[0].startswith("error:") and message in err[0], out.stderr
    assert not _records_and_features(tmp_path)


def test_an_input_size_that_is_not_a_multiple_of_the_stride_is_refused_before_any_work(synth_tiny, isolated_home,
                                                                                      capsys):
    from harness.cli import main

    rc = main(["eval", "--protocol", "knn", "--preset", "synth", "--dataset", "imagefolder", "--data-root",
               str(synth_tiny / "imagenet"), "--model", "timm:resnet18,weights=random", "--set", "crop=60"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "knn: crop 60 is not a multiple of the stride 32 of model timm-resnet18" in err[0]
    assert "set crop=32 or 64" in err[0]
    assert not _records_and_features(isolated_home)


def test_each_protocol_states_its_input_sizes():
    from harness.running.evaluate import protocol_input_sizes
    from harness.protocol_info import build_protocol

    assert protocol_input_sizes(build_protocol("knn", "synth", {"dataset": "imagefolder"})) == {"crop": 64}
    assert protocol_input_sizes(build_protocol("linear", "synth", {"dataset": "imagefolder"})) == {"crop": 64}
    hbird = build_protocol("dense_nn", "hbird_synth", {"dataset": "voc"})
    assert protocol_input_sizes(hbird) == {"input_size": 64}
    # CrIBo's dense NN rounds every image to a multiple of the stride itself: no fixed size to check
    assert protocol_input_sizes(build_protocol("dense_nn", "cribo", {"dataset": "voc"})) == {}


def test_the_docs_table_lists_every_case():
    text = (ROOT / "docs" / "MODELS.md").read_text()
    section = text[text.index("## When a spec is wrong"):]
    rows = re.findall(r"^\| `([^`]+)` \|", section, flags=re.M)
    assert rows == [spec for spec, _ in CASES]
    assert len(rows) >= 20
