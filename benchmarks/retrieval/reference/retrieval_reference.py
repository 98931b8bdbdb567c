"""Parity fixtures for image_retrieval and copy_detection, from the official code run unmodified.

    python -m benchmarks.retrieval.reference.retrieval_reference --dino DINO_CHECKOUT \
        --revisitop REVISITOP_CHECKOUT [--out benchmarks/retrieval/fixtures]

Writes into ``--out``:

- ``data/``: a small revisitop layout (``roxford5k/``), a small Copydays layout (``copydays/``)
  with ``distractors/`` and ``whitening/`` (the SynthScenes drawings of
  benchmarks/retrieval/synthetic.py at the ``PARITY`` size below), and ``model.pth``'s recipe:
  the weights are ``ModelHandle.random_init("vit_cpu_tiny", seed=0)``, rebuilt by the test;
- ``compute_map.json``: revisitop ``python/evaluate.py`` ``compute_map`` on seeded random
  rankings and a synthetic ground truth with junk (E, M, H as example_evaluate.py builds them);
- ``image_retrieval_e2e.json``: DINO's ``eval_image_retrieval.py`` run as a script on ``data/``
  (single and multi scale), the model being DINO's own VisionTransformer with the weights above;
  its features, ranks and the per-query AP of its ``utils.compute_map`` calls (M, H) and of
  revisitop's compute_map on its ranks for E;
- ``copy_detection_e2e.json``: DINO's ``eval_copy_detection.py`` main block on ``data/``: its
  features and the per-query AP of every block, as ``score_ap_from_ranks_1`` returned them;
- ``MANIFEST.json``: the sha256 of every file written.

What the generator changes around the official code (nothing inside it): the distributed
init (``utils.init_distributed_mode`` needs a GPU and NCCL; here a one-process gloo group),
``Tensor.cuda`` as the identity (the scripts call it on every batch, on a CPU), Pillow's
``Image.ANTIALIAS`` (removed in Pillow 10) as its alias ``Image.LANCZOS``, numpy's
``in1d`` (removed in numpy 2) as ``isin``, the architecture
``vit_cpu_tiny`` added to ``vision_transformer``'s namespace, and Copydays' block sizes read from
the listing (the script writes down 157 and 229, the real data set's). Calls to the functions
named above are recorded by wrappers that return what the official function returned.
"""
from __future__ import annotations

import argparse
import ast
import datetime
import hashlib
import json
import os
import platform
import runpy
import sys
from functools import partial
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[3]
COMMITS = {"facebookresearch/dino": "7c446df5b9f45747937fb0d72314eb9f7b66930a",
           "filipradenovic/revisitop": "be398328edcd17b3ad2ee6141949b700b85d2eb8"}
MODEL = {"arch": "vit_cpu_tiny", "seed": 0, "img_size": 64, "patch_size": 8, "embed_dim": 64, "depth": 3,
         "num_heads": 2}
RETRIEVAL_IMSIZE = 40
COPY_IMSIZE = 64


def official_on_path(path: Path) -> None:
    """Put an official checkout (kept outside this repository) first on the import path: the
    one sys.path edit of this generator (tests/test_import_path.py)."""
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))


def blob_sha1(path: Path) -> str:
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ----------------------------------------------------------------------------- inputs
def write_data(out: Path) -> None:
    from benchmarks.retrieval import synthetic

    parity = synthetic.Preset(landmarks=3, easy=2, hard=2, junk=1, others=4, originals=3, strong=2,
                              distractors=20, whitening=140, view=(48, 36))
    if out.exists():
        import shutil
        shutil.rmtree(out)
    out.mkdir(parents=True)
    synthetic.write_revisited(out, parity, seed=0)
    synthetic.write_copydays(out, parity, seed=0)


def random_ground_truth(rng, n_db: int, n_q: int) -> list[dict]:
    gnd = []
    for q in range(n_q):
        perm = rng.permutation(n_db)
        ne, nh, nj = (int(x) for x in rng.integers(0, 6, 3))
        ne = max(ne, 1)
        g = {"easy": perm[:ne], "hard": perm[ne:ne + nh], "junk": perm[ne + nh:ne + nh + nj]}
        if q == 1:  # a query listing an image as both easy and junk (compute_map's quirk)
            g["junk"] = np.concatenate([g["junk"], g["easy"][:1]])
        gnd.append({k: v.astype(np.int64) for k, v in g.items()})
    gnd[2]["hard"] = np.zeros(0, dtype=np.int64)  # no hard positive: left out of the H mean
    return gnd


def setups(gnd: list[dict]) -> dict[str, list[dict]]:
    """example_evaluate.py's three ground truths (built here as it builds them)."""
    return {"easy": [{"ok": g["easy"], "junk": np.concatenate([g["junk"], g["hard"]])} for g in gnd],
            "medium": [{"ok": np.concatenate([g["easy"], g["hard"]]), "junk": g["junk"]} for g in gnd],
            "hard": [{"ok": g["hard"], "junk": np.concatenate([g["junk"], g["easy"]])} for g in gnd]}


def nan_list(x) -> list:
    return [None if np.isnan(v) else float(v) for v in np.asarray(x, dtype=np.float64)]


# ----------------------------------------------------------------------------- (a) compute_map
def numpy_shims() -> None:
    """numpy 2 removed ``np.in1d`` (both compute_maps call it); ``np.isin`` on 1-D input is it."""
    if not hasattr(np, "in1d"):
        np.in1d = np.isin


def run_compute_map(revisitop: Path) -> dict:
    numpy_shims()
    official_on_path(revisitop / "python")
    from evaluate import compute_map  # revisitop/python/evaluate.py

    cases = []
    for seed, (n_db, n_q) in enumerate([(40, 6), (200, 8)]):
        rng = np.random.default_rng(seed)
        gnd = random_ground_truth(rng, n_db, n_q)
        ranks = np.stack([rng.permutation(n_db) for _ in range(n_q)], axis=1)
        out = {}
        for name, g in setups(gnd).items():
            m, aps, _, _ = compute_map(ranks, g, [1, 5, 10])
            out[name] = {"map": float(m), "aps": nan_list(aps)}
        cases.append({"ranks": ranks.tolist(),
                      "gnd": [{k: v.tolist() for k, v in g.items()} for g in gnd], "official": out})
    return {"cases": cases}


# ----------------------------------------------------------------------------- the DINO scripts
def prepare_dino(dino: Path, work: Path) -> Path:
    """Import DINO's modules, patch the surroundings (module docstring) and write the weights."""
    official_on_path(dino)
    import torch.distributed as dist
    from PIL import Image

    import utils  # dino/utils.py
    import vision_transformer as vits

    if not hasattr(Image, "ANTIALIAS"):
        Image.ANTIALIAS = Image.LANCZOS

    def one_process(args):
        args.rank, args.world_size, args.gpu = 0, 1, 0
        if not dist.is_initialized():
            dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29571", world_size=1, rank=0)

    utils.init_distributed_mode = one_process
    torch.Tensor.cuda = lambda self, *a, **k: self
    vits.vit_cpu_tiny = lambda patch_size=8, **kw: vits.VisionTransformer(
        img_size=[MODEL["img_size"]], patch_size=patch_size, embed_dim=MODEL["embed_dim"], depth=MODEL["depth"],
        num_heads=MODEL["num_heads"], mlp_ratio=4, qkv_bias=True,
        norm_layer=partial(torch.nn.LayerNorm, eps=1e-6), **kw)

    from harness.models.handle import ModelHandle
    state = ModelHandle.random_init(MODEL["arch"], seed=MODEL["seed"]).backbone.state_dict()
    check = vits.vit_cpu_tiny(patch_size=MODEL["patch_size"], num_classes=0).load_state_dict(state, strict=True)
    print("weights load strictly into DINO's VisionTransformer:", check)
    ckpt = work / "model.pth"
    torch.save({"teacher": {f"backbone.{k}": v for k, v in state.items()}}, ckpt)
    return ckpt


def recorder(module, name: str, calls: list):
    fn = getattr(module, name)

    def wrapped(*a, **k):
        out = fn(*a, **k)
        calls.append((a, k, out))
        return out
    setattr(module, name, wrapped)
    return fn


def run_image_retrieval(dino: Path, revisitop: Path, data: Path, ckpt: Path) -> dict:
    import eval_knn
    import utils

    official_on_path(revisitop / "python")
    from evaluate import compute_map as revisitop_compute_map

    runs = {}
    for ms in (False, True):
        maps, feats = [], []
        orig_map, orig_feat = recorder(utils, "compute_map", maps), recorder(eval_knn, "extract_features", feats)
        sys.argv = ["eval_image_retrieval.py", "--data_path", str(data), "--dataset", "roxford5k",
                    "--multiscale", str(ms), "--imsize", str(RETRIEVAL_IMSIZE), "--pretrained_weights", str(ckpt),
                    "--use_cuda", "False", "--arch", MODEL["arch"], "--patch_size", str(MODEL["patch_size"]),
                    "--num_workers", "0"]
        runpy.run_path(str(dino / "eval_image_retrieval.py"), run_name="__main__")
        utils.compute_map, eval_knn.extract_features = orig_map, orig_feat
        ranks = maps[0][0][0]
        import pickle
        with open(data / "roxford5k" / "gnd_roxford5k.pkl", "rb") as f:
            gnd = pickle.load(f)["gnd"]
        easy = setups(gnd)["easy"]
        m_e, aps_e, _, _ = revisitop_compute_map(ranks, easy, [1, 5, 10])
        runs["multiscale" if ms else "single"] = {
            "database_features": feats[0][2].tolist(), "query_features": feats[1][2].tolist(),
            "ranks": np.asarray(ranks).tolist(),
            "medium": {"map": float(maps[0][2][0]), "aps": nan_list(maps[0][2][1])},
            "hard": {"map": float(maps[1][2][0]), "aps": nan_list(maps[1][2][1])},
            "easy": {"map": float(m_e), "aps": nan_list(aps_e),
                     "note": "revisitop compute_map on the script's ranks (the script prints M and H only)"}}
    return {"imsize": RETRIEVAL_IMSIZE, "runs": runs}


def run_copy_detection(dino: Path, data: Path, ckpt: Path) -> dict:
    """The script's definitions, then its main block, with the recorders in its namespace."""
    source = (dino / "eval_copy_detection.py").read_text()
    tree = ast.parse(source)
    main = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
    defs = ast.Module(body=[n for n in tree.body if n not in main], type_ignores=[])
    ns = {"__name__": "eval_copy_detection", "__file__": str(dino / "eval_copy_detection.py")}
    exec(compile(defs, str(dino / "eval_copy_detection.py"), "exec"), ns)

    official_dataset = ns["CopydaysDataset"]

    class ListedSizes(official_dataset):  # block sizes from the listing (the script: 157 / 229)
        def __init__(self, basedir):
            super().__init__(basedir)
            self.q_block_sizes = np.array([len(self.get_block(i)) for i in range(self.nblocks)])

    ns["CopydaysDataset"] = ListedSizes
    aps, feats = [], []
    ap_fn, feat_fn = ns["score_ap_from_ranks_1"], ns["extract_features"]
    ns["score_ap_from_ranks_1"] = lambda ranks, nres: aps.append((list(ranks), nres, ap_fn(ranks, nres))) or aps[-1][2]

    def features(image_list, model, args):
        out = feat_fn(image_list, model, args)
        feats.append(([Path(p).relative_to(data).as_posix() for p in image_list], out.clone()))
        return out
    ns["extract_features"] = features
    sys.argv = ["eval_copy_detection.py", "--data_path", str(data / "copydays"),
                "--whitening_path", str(data / "whitening"), "--distractors_path", str(data / "distractors"),
                "--imsize", str(COPY_IMSIZE), "--batch_size_per_gpu", "8", "--pretrained_weights", str(ckpt),
                "--use_cuda", "False", "--arch", MODEL["arch"], "--patch_size", str(MODEL["patch_size"]),
                "--num_workers", "0"]
    exec(compile(ast.Module(body=main[0].body, type_ignores=[]), str(dino / "eval_copy_detection.py"), "exec"), ns)
    dataset = ListedSizes(str(data / "copydays"))
    sizes = [int(s) for s in dataset.q_block_sizes]
    blocks, start = {}, 0
    for name, n in zip(dataset.block_names, sizes):
        blocks[name] = {"aps": [a[2] for a in aps[start:start + n]], "ranks": [a[0] for a in aps[start:start + n]],
                        "map": float(np.mean([a[2] for a in aps[start:start + n]]))}
        start += n
    # the whitening set's features are not kept (140 x 128 numbers): its file order is, and the
    # test recomputes them; every other extraction is kept whole
    extractions = [{"files": f, **({"features": x.tolist()} if not f[0].startswith("whitening/") else {})}
                   for f, x in feats]
    return {"imsize": COPY_IMSIZE, "blocks": blocks, "extractions": extractions,
            "order": "query blocks (20), originals, distractors, whitening: the script's order; its "
                     "distractor and whitening lists are os.listdir's order, recorded in 'files'"}


# ----------------------------------------------------------------------------- provenance
def provenance(args, official_files: dict[str, Path], what: str) -> dict:
    return {"what": what, "commits": COMMITS,
            "repositories": {k: f"https://github.com/{k}" for k in COMMITS},
            "official_files": {k: blob_sha1(p) for k, p in official_files.items()},
            "command": "python -m benchmarks.retrieval.reference.retrieval_reference --dino DINO_CHECKOUT "
                       "--revisitop REVISITOP_CHECKOUT",
            "generator": "benchmarks/retrieval/reference/retrieval_reference.py", "model": MODEL,
            "environment": {"python": platform.python_version(), "torch": torch.__version__,
                            "numpy": np.__version__, "platform": platform.platform(),
                            "torch_threads": torch.get_num_threads(),
                            "date": datetime.date.today().isoformat()}}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dino", type=Path, required=True, help="checkout of facebookresearch/dino")
    ap.add_argument("--revisitop", type=Path, required=True, help="checkout of filipradenovic/revisitop")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "retrieval" / "fixtures")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    for p in (args.dino, args.revisitop):
        if ROOT in p.resolve().parents:
            ap.error(f"{p}: keep official checkouts outside this repository")
    torch.set_num_threads(args.threads)
    out = args.out
    data = out / "data"
    write_data(data)
    work = Path(os.environ.get("TMPDIR", "/tmp")) / "retrieval_reference"
    work.mkdir(parents=True, exist_ok=True)
    files = {
        "compute_map.json": (run_compute_map(args.revisitop),
                             {"revisitop:python/evaluate.py": args.revisitop / "python" / "evaluate.py"},
                             "revisitop compute_map on seeded random rankings, E/M/H ground truths with junk")}
    ckpt = prepare_dino(args.dino, work)
    dino_files = {f"dino:{n}": args.dino / n for n in ("eval_knn.py", "utils.py", "vision_transformer.py")}
    files["image_retrieval_e2e.json"] = (
        run_image_retrieval(args.dino, args.revisitop, data, ckpt),
        {**dino_files, "dino:eval_image_retrieval.py": args.dino / "eval_image_retrieval.py",
         "revisitop:python/evaluate.py": args.revisitop / "python" / "evaluate.py"},
        "eval_image_retrieval.py end to end on data/roxford5k")
    files["copy_detection_e2e.json"] = (
        run_copy_detection(args.dino, data, ckpt),
        {**dino_files, "dino:eval_copy_detection.py": args.dino / "eval_copy_detection.py"},
        "eval_copy_detection.py end to end on data/copydays, data/distractors, data/whitening")
    manifest = {}
    for name, (payload, official, what) in files.items():
        (out / name).write_text(json.dumps({"provenance": provenance(args, official, what), **payload}))
        manifest[name] = sha256(out / name)
    for p in sorted(data.rglob("*")):
        if p.is_file():
            manifest[p.relative_to(out).as_posix()] = sha256(p)
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    print(f"wrote {len(manifest)} files under {out}")


if __name__ == "__main__":
    main()
