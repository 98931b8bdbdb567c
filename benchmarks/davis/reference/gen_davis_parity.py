"""Regenerate benchmarks/davis/fixtures/davis_parity.json from DINO's eval_video_segmentation.py and the
DAVIS-2017 evaluation (davisvideochallenge/davis2017-evaluation).

(a) Propagation end to end: the official script's own loop (``read_frame_list``, ``read_seg``,
``eval_video_tracking_davis`` with ``read_frame``, ``label_propagation``, ``norm_mask``,
``imwrite_indexed``), unmodified, on a three-sequence clip (landscape, square, portrait) in
DAVIS's layout, with a stand-in model (davis_common.OfficialStandIn: a fixed random projection
of each 32x32 patch, tanh) and its defaults (n_last_frames 7, size_mask_neighborhood 12, topk 5;
a patch of 32 keeps the grids at 15x30 so the test runs in seconds); the masks it writes are stored. Then
davis2017-evaluation's ``DAVISEvaluation``
(semi-supervised, val) on them: per object J and F mean / recall / decay and the global row as
``evaluation_method.py`` aggregates it.
(b) J and F per frame (``db_eval_iou``, ``db_eval_boundary``) and ``db_statistics`` on the masks
of davis_common.METRIC_CASES.

Changes around the official code (none in its files): ``torch.Tensor.cuda`` returns the tensor
itself (CPU run); the module-level ``args`` that ``restrict_neighborhood`` reads is set; the
UVC palette the script downloads is replaced by DAVIS's colour map (colours only, labels are the
indices). Needs opencv-python and scikit-image (the official code's imports).

    python benchmarks/davis/reference/gen_davis_parity.py --official <dino checkout> --commit
    7c446df5b9f45747937fb0d72314eb9f7b66930a \
        --davis-eval <davis2017-evaluation checkout> [--davis-commit ac7c43fca936f9722837b7fbd337d284ba37004b]
"""
from __future__ import annotations

import argparse
import base64
import importlib.util
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _shared_helpers():
    """tests/reference/common.py, the helpers every fixture generator shares, loaded by its path: a
    generator runs as a script (``python benchmarks/<folder>/reference/gen_X.py``), and tests/ is no
    package (common.py says why)."""
    spec = importlib.util.spec_from_file_location("common", HERE.parents[2] / "tests" / "reference" / "common.py")
    module = sys.modules["common"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


common = sys.modules.get("common") or _shared_helpers()

REPOSITORY = "https://github.com/facebookresearch/dino"
COMMIT = "7c446df5b9f45747937fb0d72314eb9f7b66930a"
FIXTURE = "davis_parity.json"
DAVIS_REPOSITORY = "https://github.com/davisvideochallenge/davis2017-evaluation"
DAVIS_COMMIT = "ac7c43fca936f9722837b7fbd337d284ba37004b"
SETTINGS = dict(n_last_frames=7, size_mask_neighborhood=12, topk=5, patch_size=32)


def extra(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--davis-eval", required=True, type=Path, help=f"a checkout of {DAVIS_REPOSITORY}")
    parser.add_argument("--davis-commit", default=DAVIS_COMMIT, help="its commit (default: the fixture's)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/davis_parity_work"), help="scratch folder")


def run_propagation(evs, work: Path, palette) -> dict:
    """The official __main__ loop over val.txt (l. 284-292), outputs read back as label arrays."""
    import numpy as np
    from PIL import Image

    data = work / "DAVIS"
    out = {}
    for name in (data / "ImageSets" / "2017" / "val.txt").read_text().split():
        video_dir = os.path.join(str(data), "JPEGImages/480p/", name)
        frame_list = evs.read_frame_list(video_dir)
        seg_path = frame_list[0].replace("JPEGImages", "Annotations").replace("jpg", "png")
        first_seg, seg_ori = evs.read_seg(seg_path, evs.args.patch_size)
        evs.eval_video_tracking_davis(evs.args, OfficialStandIn(), frame_list, video_dir, first_seg, seg_ori, palette)
        masks = [np.array(Image.open(work / "out" / name / (Path(f).stem + ".png"))) for f in frame_list]
        out[name] = np.stack(masks)
    return out


def run_davis_eval(davis_eval: Path, work: Path) -> dict:
    import numpy as np

    evaluation = common.import_official(davis_eval, "davis2017.evaluation")
    res = evaluation.DAVISEvaluation(davis_root=str(work / "DAVIS"), task="semi-supervised",
                                     gt_set="val").evaluate(str(work / "out"))
    J, F = res["J"], res["F"]
    names = list(J["M_per_object"])
    objects = {n: {"J": [float(J[s][i]) for s in "MRD"], "F": [float(F[s][i]) for s in "MRD"]}
               for i, n in enumerate(names)}
    glob = {"J&F-Mean": (np.mean(J["M"]) + np.mean(F["M"])) / 2, "J-Mean": np.mean(J["M"]),
            "J-Recall": np.mean(J["R"]), "J-Decay": np.mean(J["D"]), "F-Mean": np.mean(F["M"]),
            "F-Recall": np.mean(F["R"]), "F-Decay": np.mean(F["D"])}
    return {"objects": objects, "global": {k: float(v) for k, v in glob.items()}}


def run_metric_cases(davis_eval: Path) -> list[dict]:
    metrics = common.import_official(davis_eval, "davis2017.metrics")
    utils = common.import_official(davis_eval, "davis2017.utils")
    out = []
    for case in davis_common.METRIC_CASES:
        gt, seg = davis_common.metric_case(case)
        j = metrics.db_eval_iou(gt, seg)
        f = metrics.db_eval_boundary(gt, seg)
        out.append({**case, "masks_sha256": davis_common.sha256(gt, seg), "J": [float(v) for v in j],
                    "F": [float(v) for v in f], "J_stats": [float(v) for v in utils.db_statistics(j)],
                    "F_stats": [float(v) for v in utils.db_statistics(f)]})
    return out


def main() -> None:
    args = common.parse_args(__doc__, HERE.parent / "fixtures" / FIXTURE, REPOSITORY, COMMIT, extra=extra)
    import torch

    from harness.data.synthetic import voc_palette

    davis_eval = args.davis_eval.resolve()
    if davis_eval.is_relative_to(common.ROOT):
        raise SystemExit("--davis-eval must be outside this repository")
    shutil.rmtree(args.work, ignore_errors=True)
    files = davis_common.build_clip(args.work / "DAVIS")
    torch.Tensor.cuda = lambda self, *a, **k: self          # a CPU run
    evs = common.import_official(args.official, "eval_video_segmentation")
    evs.args = argparse.Namespace(output_dir=str(args.work / "out"), **SETTINGS)
    import numpy as np

    palette = np.asarray(voc_palette(), dtype=np.uint8).reshape(-1, 3)
    masks = run_propagation(evs, args.work, palette)
    official = common.loaded_official_files(args.official)
    evaluation = run_davis_eval(davis_eval, args.work)
    cases = run_metric_cases(davis_eval)
    davis_files = ["davis2017/davis.py", "davis2017/evaluation.py", "davis2017/metrics.py", "davis2017/results.py",
                   "davis2017/utils.py", "evaluation_method.py"]
    prov = common.provenance(args, __file__, {**SETTINGS, "features": "davis_common.OfficialStandIn",
                                              "clip_seed": davis_common.CLIP_SEED}, official,
                             extra_modules=("cv2", "skimage", "scipy", "PIL"))
    prov["also"] = {"repository": DAVIS_REPOSITORY, "commit": args.davis_commit,
                    "official_files": {f: common.git_blob_sha1(davis_eval / f) for f in davis_files}}
    data = {
        "provenance": prov,
        "how": "eval_video_tracking_davis per sequence of val.txt, then DAVISEvaluation(semi-supervised, val); "
               "db_eval_iou / db_eval_boundary / db_statistics on the metric cases",
        "clip": {rel: base64.b64encode(b).decode() for rel, b in sorted(files.items())},
        "masks": {name: davis_common.pack(m) for name, m in masks.items()},
        "evaluation": evaluation,
        "metric_cases": cases,
    }
    common.finish(args, data, skip=("provenance", "how", "clip", "masks"))


import davis_common  # noqa: E402  (beside this script, on the path when it runs)
from davis_common import OfficialStandIn  # noqa: E402

if __name__ == "__main__":
    main()
