"""The hub model source on the official DINOv2 repository: its `dinov2_vits14` entry, built from
a local checkout through `hub:`, against the harness's DINOv2 import of the same weights.

    python -m scripts.official_parity.check_dinov2_hub --official /tmp/official/dinov2

The entry is built with its own random initialisation (``pretrained=false``: nothing is
downloaded, ``weights=random``), its state dict saved as the official ``.pth`` layout, read
back through ``hub:`` with ``weights=FILE`` and through ``harness.models.importers``
(layout ``dinov2``). Prints the largest absolute differences of the CLS and patch features of
the last 4 blocks at 224 and 98 (the released grid is 37 x 37 at 518: both sizes resize the
position embeddings), and whether two hub builds of the same weights share a weights key."""
from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

import torch

from harness.models.importers import import_checkpoint
from harness.models.sources import build_model


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--official", required=True, help="a checkout of github.com/facebookresearch/dinov2")
    a = p.parse_args(argv)
    repo = Path(a.official).resolve()
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    print(f"facebookresearch/dinov2 at {commit or '(not a git work tree)'}")
    with tempfile.TemporaryDirectory() as tmp:
        hub = build_model(f"hub:{repo}:dinov2_vits14,pretrained=false,weights=random")
        path = Path(tmp) / "dinov2_vits14.pth"
        torch.save(hub.backbone.model.state_dict(), path)
        again = build_model(f"hub:{repo}:dinov2_vits14,pretrained=false,weights={path}")
        harness_vit, _ = import_checkpoint(path, layout="dinov2")
        print(f"weights key shared by the two hub builds: {hub.cache_key == again.cache_key}")
        torch.manual_seed(0)
        for size in (224, 98):
            x = torch.randn(2, 3, size, size)
            with torch.no_grad():
                f_hub, f_harness = hub.backbone.get_features(x, 4), harness_vit.get_features(x, 4)
            print(f"{size}: max |cls diff| {(f_hub.cls - f_harness.cls).abs().max().item():.3g}, "
                  f"max |patch diff| {(f_hub.patches - f_harness.patches).abs().max().item():.3g}")


if __name__ == "__main__":
    main()
