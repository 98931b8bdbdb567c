"""The model x protocol matrix: every protocol of the full suite on SynthScenes tiny against
architectures that are not ssl-bench's own, each built here with random weights from local files
(nothing is downloaded): a ResNet, a ConvNeXt, a ViT with one and one with two prefix tokens, a
Swin, a transformers DINOv2 with patch 14 and registers, an open_clip ViT and a user-code CNN.

    python -m scripts.model_matrix --out /tmp/matrix [--models r18,deit] [--protocols knn,lost]
        [--write-docs]

It runs one suite (`ssl-bench run`'s steps in this process; a failing pair does not stop it), then
prints a table with one row per model and one column per protocol (the worst of its entries):
`ok`; `ok (null)`, a metric without a value, its reason recorded; `ok (flag)`, a grid below the
protocol's minimum; `n/a`, the protocol cannot measure the model, or a part of it; `refused`, one
error line that says what to set (e.g. a crop the stride does not divide); `FAILED`, an exception
(a bug). The reasons are listed below it. ``--write-docs`` puts the table into docs/MODELS.md
between its markers. Exit status 1 when a pair FAILED (a refusal is not a failure of the matrix).
tests/test_model_matrix.py runs a cheap subset of it.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import textwrap
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
START, END = "<!-- model-matrix:start -->", "<!-- model-matrix:end -->"

USER_CNN = '''
from torch import nn


def build():
    """A three-layer CNN of stride 8 without any feature API of its own."""
    return nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(),
                         nn.Conv2d(32, 48, 3, 2, 1))


def features(model, x, n_last_blocks, final_norm):
    fmap = model(x)
    return fmap.mean(dim=(2, 3))[:, None], fmap.permute(0, 2, 3, 1)[:, None]
'''

TIMM_SMALL = {"weights": "random", "depth": 2, "img_size": 64}


def _hf_dinov2(folder: Path) -> Path:
    import torch
    import transformers

    config = transformers.Dinov2WithRegistersConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                                    intermediate_size=128, patch_size=14, image_size=56,
                                                    num_register_tokens=4)
    out = folder / "hf-dinov2-reg"
    with torch.random.fork_rng():
        torch.manual_seed(0)
        transformers.Dinov2WithRegistersModel(config).save_pretrained(out)
    return out


def _open_clip(folder: Path) -> dict:
    import open_clip
    import torch
    from safetensors.torch import save_file

    config = folder / "tiny_clip.json"
    config.write_text(json.dumps({"embed_dim": 32, "vision_cfg": {"image_size": 64, "layers": 2, "width": 64,
                                                                  "patch_size": 16},
                                  "text_cfg": {"context_length": 16, "vocab_size": 100, "width": 32, "heads": 2,
                                               "layers": 1}}))
    open_clip.add_model_config(config)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = open_clip.create_model("tiny_clip", pretrained=None)
    weights = folder / "tiny_clip.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(weights))
    return {"source": "open_clip", "target": str(config), "weights": str(weights)}


def model_specs(folder: Path) -> dict[str, object]:
    """Name -> model spec of each architecture, its files written under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    code = folder / "my_cnn.py"
    code.write_text(textwrap.dedent(USER_CNN))
    return {
        "resnet18": "timm:resnet18,weights=random",
        "convnext_atto": "timm:convnext_atto,weights=random",
        "vit_tiny16": {"source": "timm", "target": "vit_tiny_patch16_224", **TIMM_SMALL},
        "deit_tiny_distilled": {"source": "timm", "target": "deit_tiny_distilled_patch16_224", **TIMM_SMALL},
        "swin_tiny": {"source": "timm", "target": "swin_tiny_patch4_window7_224", "weights": "random",
                      "embed_dim": 16, "depths": [1, 1, 1, 1], "num_heads": [1, 2, 2, 4]},
        "hf_dinov2_reg14": f"hf:{_hf_dinov2(folder)}",
        "open_clip_vit16": _open_clip(folder),
        "user_cnn": f"code:{code}:build,features={code}:features",
    }


def matrix_suite(specs: dict, protocols: list[str] | None, models: list[str] | None) -> dict:
    """The full suite's protocol entries on SynthScenes tiny, on the chosen models."""
    full = yaml.safe_load((REPO / "configs" / "suites" / "full.yaml").read_text())
    entries = [p for p in full["protocols"] if protocols is None or p["name"] in protocols]
    chosen = {n: s for n, s in specs.items() if models is None or n in models}
    return {"synth": {"preset": "tiny", "seed": 0}, "device": "cpu",
            "models": [{"name": n, "model": s} for n, s in chosen.items()], "protocols": entries}


def cell_states(out_dir: Path) -> dict[tuple[str, str], tuple[str, str]]:
    """(model, protocol) -> (state, reason) from the run's pairs.json and records: the worst of
    the protocol's entries (failed over n/a over flagged over ok)."""
    from harness.results.pair_status import read_pairs, undefined_parts
    from harness.results.records import iter_records

    order = {"FAILED": 5, "refused": 4, "n/a": 3, "ok (flag)": 2, "ok (null)": 1, "ok": 0}
    seen: dict[tuple[str, str], tuple[str, str]] = {}

    def put(model, protocol, state, reason=""):
        old = seen.get((model, protocol))
        if old is None or order[state] > order[old[0]]:
            seen[(model, protocol)] = (state, reason)

    states = {"measured": "ok", "cached": "ok", "failed": "FAILED", "not applicable": "n/a", "flagged": "ok (flag)",
              "no value": "ok (null)"}
    for p in read_pairs(out_dir / "pairs.json"):
        put(p.model, p.protocol, "refused" if p.refused else states[p.state], p.reason)
    for p in undefined_parts(list(iter_records(out_dir / "runs"))):
        put(p.model, p.protocol, "n/a" if p.state == "not applicable" else states[p.state], p.reason)
    return seen


def _general(reason: str, model: str) -> str:
    """A reason with the model's own name (and architecture) left out, so that models sharing it
    share one note."""
    reason = re.sub(rf"(the )?model {re.escape(model)} \([^)]*\)", "the model", reason)
    reason = re.sub(rf"(the |model ){re.escape(model)}\b", "the model", reason)
    return re.sub(r"shift=occlusion_(non_)?salient top1: ", "occlusion: ", reason).replace("  ", " ")


def table(models: list[str], protocols: list[str], cells: dict) -> str:
    """Markdown: a row per model, a column per protocol; the reasons numbered below."""
    reasons: list[str] = []
    lines = ["| model | " + " | ".join(protocols) + " |", "|---|" + "---|" * len(protocols)]
    for m in models:
        row = []
        for p in protocols:
            state, reason = cells.get((m, p), ("–", ""))
            if reason and state != "ok":
                general = _general(reason, m)
                note = general if general.lower().startswith(p) else f"{p}: {general}"
                if note not in reasons:
                    reasons.append(note)
                state = f"{state} [{reasons.index(note) + 1}]"
            row.append(state)
        lines.append(f"| {m} | " + " | ".join(row) + " |")
    return "\n".join(lines + [""] + [f"{i}. {r.replace('|', '/')}" for i, r in enumerate(reasons, 1)]) + "\n"


def write_docs(text: str, doc: Path = REPO / "docs" / "MODELS.md") -> None:
    page = doc.read_text()
    if START not in page or END not in page:
        raise SystemExit(f"{doc} has no {START} ... {END} markers")
    head, rest = page.split(START, 1)
    doc.write_text(head + START + "\n" + text + END + rest.split(END, 1)[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the models' files, the suite and its results")
    parser.add_argument("--models", default=None, help="comma-separated model names (default: all)")
    parser.add_argument("--protocols", default=None, help="comma-separated protocol names (default: all)")
    parser.add_argument("--write-docs", action="store_true", help="write the table into docs/MODELS.md")
    args = parser.parse_args(argv)
    from harness.running.suite import load_suite, run_suite

    out = Path(args.out).resolve()
    os.environ["SSL_BENCH_RESULTS"] = str(out / "results")  # the records beside the table they make
    split = lambda s: s.split(",") if s else None  # noqa: E731
    suite = matrix_suite(model_specs(out / "models"), split(args.protocols), split(args.models))
    path = out / "matrix.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    loaded, source = load_suite(path)
    ran = run_suite(loaded, source, progress=False, out_dir=out / "results", log=lambda *_: None)
    protocols = list(dict.fromkeys(p["name"] for p in suite["protocols"]))  # a protocol's entries: one column
    text = table([m["name"] for m in suite["models"]], protocols, cell_states(out / "results"))
    print(text)
    if args.write_docs:
        write_docs(text)
    return 1 if any(p.state == "failed" and not p.refused for p in ran["pairs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
