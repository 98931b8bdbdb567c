"""What open-hummingbird-eval's quirks do to a dense-NN number, on the same model and data.

The ``hbird`` preset reproduces open-hummingbird-eval v2.0.0 by default: its normalisation
std (0.229, 0.224, 0.255) -- 0.255 a typo for ImageNet's 0.225 -- and its metric (Hungarian
matching, mean over every class). This runs the preset four times, std x metric, on one
SynthScenes split and prints the mIoU of each (1/1, seed 42), so the effect of each opt-in
departure (``norm_std``, ``hungarian`` / ``count_absent_classes`` / ``count_ignored_class``)
is measured on identical inputs:

    python -m experiments.dense_nn_hbird_quirks [--synth tiny] [--dataset voc] [--checkpoint CKPT]

Without ``--checkpoint`` the model is ``vit_cpu_tiny`` at random init (seed 0). The metric's
own effect on fixed features and masks is pinned by ``benchmarks/dense_nn/tests/test_dense_nn_golden.py``.
"""
from __future__ import annotations

import argparse

import torch

from benchmarks.dense_nn.protocol import DenseNN
from harness.data.synthetic import default_root, generate
from harness.models.handle import ModelHandle

REFERENCE_STD = [0.229, 0.224, 0.255]
IMAGENET_STD = [0.229, 0.224, 0.225]
PLAIN = {"hungarian": False, "count_absent_classes": False, "count_ignored_class": False}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--synth", default="tiny", help="SynthScenes preset (generated once under the data home)")
    ap.add_argument("--dataset", default="voc", choices=["voc", "ade20k"])
    ap.add_argument("--checkpoint", default=None)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    root = generate(default_root(args.synth, 0), preset=args.synth, seed=0, progress=False)
    model = (ModelHandle.from_checkpoint(args.checkpoint) if args.checkpoint
             else ModelHandle.random_init("vit_cpu_tiny", seed=0))
    rows = []
    for std_name, std in (("0.255 (reference)", REFERENCE_STD), ("0.225 (ImageNet)", IMAGENET_STD)):
        for metric_name, metric in (("reference (Hungarian, all classes)", {}), ("plain mIoU", PLAIN)):
            proto = DenseNN.from_preset("hbird", {"dataset": args.dataset, "input_size": 64, "fractions": ["1/1"],
                                                  "seeds": [42], "norm_std": std, "progress": False,
                                                  "threads": args.threads, "write_subsets": False, **metric})
            result = proto.run(model, root)[0]
            rows.append((std_name, metric_name, result.metrics["mIoU"]))
    print(f"\nhbird preset, SynthScenes {args.synth} {args.dataset}, 1/1, {model.name}")
    print(f"{'std (blue)':<20} {'metric':<36} {'mIoU':>8}")
    for std_name, metric_name, miou in rows:
        print(f"{std_name:<20} {metric_name:<36} {miou:8.4f}")


if __name__ == "__main__":
    main()
