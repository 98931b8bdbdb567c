"""How each shifted set's labels meet the 1000 training classes.

- ImageNet-A / ImageNet-R: 200-class sets whose class folders are wnids; hendrycks' eval.py
  (natural-adv-examples ``indices_in_1k``, imagenet-r ``imagenet_r_mask``) scores the argmax of the
  logits restricted to those 200 classes, in sorted-wnid order. The mask is derived here from the
  set's folder names against the training classes.
- ImageNetV2: class folders named by the class index 0..999 (the published layout), not by wnid.
- ImageNet-ReaL: ``real.json`` (google-research/reassessed-imagenet README; read by
  harness.data.imagenet_real): an empty list leaves the image out; a prediction counts when it is
  in the list.
- Backgrounds challenge (IN-9): the 1000-way argmax mapped to 9 classes (in_to_in9.json), classes
  outside the 9 mapped to -1 and so always wrong (tools/model_utils.py ``eval_model``).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.data.imagenet_real import read_real
from harness.errors import DataError

# in_to_in9.json of MadryLab/backgrounds_challenge @ 46d224bb02a296681eddbae44a49da9abb5ba038 (the
# same blob, 34d3fab, as bytedance/ibot analysis/backgrounds_challenge/in_to_in9.json @ da316d8),
# written as runs (first ImageNet index, last index, IN-9 class); every index outside a run maps
# to -1. IN-9 classes in folder order: 0 dog, 1 bird, 2 wheeled vehicle, 3 reptile, 4 carnivore,
# 5 insect, 6 musical instrument, 7 primate, 8 fish. benchmarks/robustness/tests/test_robustness.py checks the runs
# against the file's mapping as the fixture robustness_in9.json records it.
IN9_RUNS = (
    (0, 6, 8), (7, 24, 1), (33, 68, 3), (87, 100, 1), (127, 146, 1), (151, 170, 0), (173, 268, 0),
    (269, 280, 4), (286, 299, 4), (300, 326, 5), (356, 362, 4), (365, 384, 7), (387, 388, 4),
    (389, 397, 8), (401, 402, 6), (407, 408, 2), (420, 420, 6), (428, 428, 2), (432, 432, 6),
    (436, 436, 2), (444, 444, 2), (468, 468, 2), (486, 486, 6), (494, 494, 6), (511, 511, 2),
    (513, 513, 6), (541, 541, 6), (546, 546, 6), (547, 547, 2), (555, 555, 2), (558, 558, 6),
    (561, 561, 2), (565, 565, 2), (566, 566, 6), (569, 569, 2), (573, 573, 2), (577, 577, 6),
    (579, 579, 6), (586, 586, 2), (593, 594, 6), (603, 603, 2), (609, 609, 2), (612, 612, 2),
    (627, 627, 2), (641, 642, 6), (656, 656, 2), (661, 661, 2), (665, 665, 2), (670, 671, 2),
    (675, 675, 2), (683, 684, 6), (687, 687, 6), (690, 690, 2), (699, 699, 6), (705, 705, 2),
    (717, 717, 2), (734, 734, 2), (751, 751, 2), (757, 757, 2), (776, 776, 6), (791, 791, 2),
    (802, 803, 2), (817, 817, 2), (820, 820, 2), (822, 822, 6), (829, 829, 2), (847, 847, 2),
    (864, 864, 2), (866, 867, 2), (870, 870, 2), (875, 875, 6), (880, 880, 2), (881, 881, 6),
    (889, 889, 6),
)
IN9_NUM_IMAGENET = 1000


def in9_table() -> np.ndarray:
    """(1000,) int: the IN-9 class of each ImageNet class index, -1 for the unmapped ones."""
    table = np.full(IN9_NUM_IMAGENET, -1, dtype=np.int64)
    for first, last, cls in IN9_RUNS:
        table[first:last + 1] = cls
    return table


def class_table_by_name(set_classes: list[str], train_classes: list[str], where: str) -> np.ndarray:
    """(C_train,) int: for each training class, the index of the set's class of the same name, -1
    where the set has none (a SynthScenes or custom backgrounds set labelled with training names)."""
    index = {c: i for i, c in enumerate(set_classes)}
    unknown = [c for c in set_classes if c not in set(train_classes)]
    if unknown:
        raise DataError(f"{where}: class folder(s) {', '.join(unknown[:5])} are not training classes; with "
                        f"in9_mapping by_name the set's folders must be training class names")
    return np.array([index.get(c, -1) for c in train_classes], dtype=np.int64)


def subset_indices(set_classes: list[str], train_classes: list[str], where: str) -> np.ndarray:
    """Training-class indices of a subset set's classes, in the set's (sorted) class order: the
    columns of the logits its argmax is taken over. A folder that is not a training class is
    refused: its images could never be scored."""
    index = {c: i for i, c in enumerate(train_classes)}
    unknown = [c for c in set_classes if c not in index]
    if unknown:
        raise DataError(f"{where}: class folder(s) {', '.join(unknown[:5])} are not among the {len(train_classes)} "
                        f"training classes; an ImageNet-A/-R folder holds a subset of the training wnids")
    return np.array([index[c] for c in set_classes], dtype=np.int64)


def v2_labels(folder_names: list[str], folder_targets: list[int], num_classes: int, where: str) -> np.ndarray:
    """ImageNetV2's folders are class indices: each image's training label is int(folder name)."""
    try:
        by_folder = [int(name) for name in folder_names]
    except ValueError:
        bad = next(n for n in folder_names if not n.isdigit())
        raise DataError(f"{where}: class folder {bad!r} is not a class index; ImageNetV2's folders are named "
                        f"0..{num_classes - 1}") from None
    if max(by_folder) >= num_classes or min(by_folder) < 0:
        raise DataError(f"{where}: class folder {max(by_folder)} is beyond the {num_classes} training classes")
    return np.asarray(by_folder, dtype=np.int64)[np.asarray(folder_targets, dtype=np.int64)]


def read_real_labels(path: Path) -> list[list[int]]:
    """real.json (harness.data.imagenet_real), its absence naming this protocol's option."""
    if not path.is_file():
        raise DataError(f"ImageNet-ReaL labels {path} not found; put real.json of google-research/"
                        f"reassessed-imagenet there, or set real_labels")
    return read_real(path)


def real_hits(pred: np.ndarray, label_sets: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(kept, hits): which images have a ReaL label, and for those whether the prediction is one."""
    kept = np.array([bool(s) for s in label_sets])
    hits = np.array([int(p) in s for p, s in zip(pred, label_sets) if s], dtype=bool)
    return kept, hits
