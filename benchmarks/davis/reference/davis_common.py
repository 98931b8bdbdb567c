"""What gen_davis_parity.py and tests/test_davis.py share: the stand-in feature
extractor both sides run (a fixed random projection of each 32 x 32 patch of the normalised
frame, tanh; numpy-seeded so it is the same on every machine), the parity clip and the masks
of the metric cases (integer geometry only, so they are the same bytes everywhere)."""
from __future__ import annotations

import base64
import hashlib
import io
import zlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from torch import nn

PATCH, DIM, FEATURE_SEED = 32, 32, 5
CLIP_SEED = 11


def standin_tokens(x: torch.Tensor) -> torch.Tensor:
    """(B, h*w, DIM) patch tokens of (B, 3, H, W) frames, row-major over the patch grid."""
    w = np.random.default_rng(FEATURE_SEED).standard_normal((3 * PATCH * PATCH, DIM)).astype(np.float32)
    w = torch.from_numpy(w / np.float32(np.sqrt(3 * PATCH * PATCH)))
    b, c, h, wd = x.shape
    p = x.reshape(b, c, h // PATCH, PATCH, wd // PATCH, PATCH).permute(0, 2, 4, 1, 3, 5)
    p = p.reshape(b, (h // PATCH) * (wd // PATCH), c * PATCH * PATCH)
    return torch.tanh(torch.matmul(p, w.to(x.device)))


class OfficialStandIn(nn.Module):
    """What eval_video_segmentation.py asks of its model: get_intermediate_layers and
    patch_embed.patch_size; the first token stands for [CLS] (dropped there)."""

    def __init__(self):
        super().__init__()
        self.patch_embed = SimpleNamespace(patch_size=PATCH)

    def get_intermediate_layers(self, x, n=1):
        t = standin_tokens(x)
        return [torch.cat([torch.zeros(t.shape[0], 1, DIM), t], dim=1)]


class HarnessStandIn(nn.Module):
    """The same features through the harness's backbone interface (get_features().patches)."""

    patch_size, embed_dim = PATCH, DIM

    def get_features(self, x, n_last_blocks=1, final_norm=True):
        t = standin_tokens(x)
        h, w = x.shape[-2] // PATCH, x.shape[-1] // PATCH
        return SimpleNamespace(cls=torch.zeros(x.shape[0], 1, DIM), patches=t.reshape(x.shape[0], 1, h, w, DIM))


def build_clip(root: Path) -> dict[str, bytes]:
    """Writes the parity clip in DAVIS's layout under ``root`` and returns {relative path: bytes}:
    SynthScenes clips (seed CLIP_SEED) as a landscape 128x64, a square 64x64 (the official
    read_frame / read_seg transpose quirk) and a portrait 64x128 sequence of 5 frames."""
    from benchmarks.davis.synthetic import ClipPreset, draw_clip
    from harness.data import synthetic as ss

    cfg = ClipPreset(sequences=3, frames=5, max_objects=3)
    views = {"wide": lambda a: a, "square": lambda a: a[:, 32:96],
             "tall": lambda a: np.ascontiguousarray(np.swapaxes(a, 0, 1))}
    files = {}
    for i, (name, view) in enumerate(views.items()):
        images, labels = draw_clip(CLIP_SEED, i, cfg)
        for t, (img, lab) in enumerate(zip(images, labels)):
            for rel, save, arr in ((f"JPEGImages/480p/{name}/{t:05d}.jpg", ss._save_jpeg, view(img)),
                                   (f"Annotations/480p/{name}/{t:05d}.png", ss.save_palette_png, view(lab))):
                path = root / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                save(np.ascontiguousarray(arr), path)
                files[rel] = path.read_bytes()
    (root / "ImageSets" / "2017").mkdir(parents=True, exist_ok=True)
    (root / "ImageSets" / "2017" / "val.txt").write_text("wide\nsquare\ntall\n")
    files["ImageSets/2017/val.txt"] = (root / "ImageSets" / "2017" / "val.txt").read_bytes()
    return files


def write_files(root: Path, files: dict[str, str]) -> Path:
    """The clip from a fixture's {relative path: base64}."""
    for rel, b64 in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(b64))
    return root


def pack(a: np.ndarray) -> dict:
    a = np.ascontiguousarray(a, dtype=np.uint8)
    return {"shape": list(a.shape), "zlib_b64": base64.b64encode(zlib.compress(a.tobytes(), 9)).decode()}


def unpack(d: dict) -> np.ndarray:
    return np.frombuffer(zlib.decompress(base64.b64decode(d["zlib_b64"])), np.uint8).reshape(d["shape"])


# ----------------------------------------------------------------------------- metric cases
METRIC_CASES = [dict(h=48, w=64, frames=7, seed=1), dict(h=120, w=200, frames=9, seed=2),
                dict(h=480, w=854, frames=5, seed=3), dict(h=13, w=9, frames=6, seed=4)]


def _ellipses(rng, h, w, n) -> np.ndarray:
    yy, xx = np.mgrid[0:h, 0:w].astype(np.int64)
    m = np.zeros((h, w), bool)
    for _ in range(n):
        cy, cx = int(rng.integers(0, h)), int(rng.integers(0, w))
        a, b = int(rng.integers(1, max(2, w // 3))), int(rng.integers(1, max(2, h // 3)))
        m |= (xx - cx) ** 2 * b * b + (yy - cy) ** 2 * a * a <= a * a * b * b
    return m


def metric_case(case: dict) -> tuple[np.ndarray, np.ndarray]:
    """(annotation, segmentation): (T, H, W) bool masks of one object from integer geometry:
    unions of ellipses, a frame left empty in one, both, and salt noise in some frames."""
    rng = np.random.default_rng([case["seed"], 48])
    h, w, t = case["h"], case["w"], case["frames"]
    gt = np.stack([_ellipses(rng, h, w, int(rng.integers(1, 4))) for _ in range(t)])
    seg = np.stack([_ellipses(rng, h, w, int(rng.integers(1, 4))) if k % 3 else gt[k] ^ (rng.integers(0, 40, (h,
                                                                                                              w)) == 0)
                    for k in range(t)])
    seg[1] = False
    gt[2], seg[2] = False, False
    return gt, seg


def sha256(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def png_labels(data: bytes) -> np.ndarray:
    from PIL import Image

    return np.array(Image.open(io.BytesIO(data)))
