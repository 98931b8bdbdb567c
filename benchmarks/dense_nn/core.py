"""The dense NN classifier itself, independent of models and datasets: patch labels from
masks, the memory bank (with the optional memory cap), neighbour aggregation, upsampling
and the confusion matrix. `benchmarks/dense_nn/protocol.py` feeds it extracted features; tests
and `dense_nn_from_features` feed it arrays.

Where a step reproduces open-hummingbird-eval v2.0.0 (`hbird/hbird_eval.py`), the same
torch operations are used in the same order, so that the same features give the same
pixels (checked against numbers produced by the reference code, tests/fixtures).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import numpy as np
import torch
import torch.nn.functional as F

from benchmarks.dense_nn.index import BankIndex, IndexSpec
from benchmarks.dense_nn.metric import ConfusionMatrix
from harness.errors import ConfigError, DataError

# How ignore pixels of a training mask enter the bank's patch labels.
#   drop        excluded (a patch with only ignore pixels is not in the bank)
#   zero        counted as class 0 (open-hummingbird-eval, Pascal VOC: `y[y == 255] = 0`
#               in HbirdEvaluation._create_memory)
#   extra_class counted as an extra class C (open-hummingbird-eval, ADE20K: the raw
#               annotation's 0 = "other" is one of its 151 bank classes)
IGNORE_MODES = ("drop", "zero", "extra_class")


@dataclass(frozen=True)
class CoreSettings:
    """What the core needs from the protocol config (resolved: no dataset-dependent values)."""

    num_classes: int
    ignore_index: int = 255
    patch_size: int = 16
    k: int = 50
    label_mode: str = "majority"     # "majority" | "soft"
    vote_mode: str = "majority"      # "majority" | "softmax"
    temperature: float = 0.02
    upsample: str = "nearest"        # "nearest" (patch label on all its pixels) | "bilinear"
    bank_ignore: str = "drop"        # one of IGNORE_MODES
    memory_size: int | None = None
    index: IndexSpec = IndexSpec()
    search_chunk: int = 8192         # query patches per search call
    add_chunk: int = 65536           # bank rows per index.add call

    @property
    def num_pred(self) -> int:
        """Classes a prediction can take (the extra class is predictable, never ground truth)."""
        return self.num_classes + (1 if self.bank_ignore == "extra_class" else 0)


# ============================================================================ patch labels
@dataclass
class ImageLabels:
    """Labels of one image's patches (row-major over the h x w grid).

    majority: ``hard`` (n,) int64, -1 = no valid pixel. soft: ``cls``/``frac`` (n, M)
    sparse class histograms, classes ascending, padding cls -1 / frac 0.
    """

    hard: np.ndarray | None = None
    cls: np.ndarray | None = None
    frac: np.ndarray | None = None

    @property
    def nonempty(self) -> np.ndarray:
        if self.hard is not None:
            return self.hard >= 0
        return self.frac[:, 0] > 0 if self.frac.shape[1] else np.zeros(len(self.frac), bool)

    def presence(self, num_pred: int) -> np.ndarray:
        """(n, num_pred) bool: classes with at least one counted pixel in the patch."""
        if self.hard is not None:
            out = np.zeros((len(self.hard), num_pred), bool)
            ok = self.hard >= 0
            out[np.nonzero(ok)[0], self.hard[ok]] = True
            return out
        out = np.zeros((len(self.cls), num_pred), bool)
        r, c = np.nonzero(self.frac > 0)
        out[r, self.cls[r, c]] = True
        return out


def check_mask(mask: np.ndarray, num_classes: int, ignore_index: int, where: str) -> None:
    """DataError if a mask holds a label that is neither a class nor the ignore index."""
    bad = (mask >= num_classes) & (mask != ignore_index)
    if bad.any():
        values = np.unique(mask[bad])
        raise DataError(
            f"{where}: mask holds label(s) {values[:10].tolist()} outside the {num_classes} classes "
            f"[0, {num_classes - 1}] (ignore index {ignore_index}); the annotation does not belong to "
            f"this dataset, or the dataset's class count is wrong")


def patch_counts(mask: np.ndarray, grid: tuple[int, int], s: CoreSettings, where: str = "mask") -> np.ndarray:
    """(h*w, C') int32 pixel counts per patch and class; C' = num_pred.

    ``mask`` must have the geometry of the image the features came from: (h*p, w*p).
    """
    h, w = grid
    p = s.patch_size
    if mask.shape != (h * p, w * p):
        raise DataError(f"{where}: mask is {mask.shape[0]}x{mask.shape[1]} but the feature grid "
                        f"{h}x{w} with patch {p} needs {h * p}x{w * p}")
    check_mask(mask, s.num_classes, s.ignore_index, where)
    c = s.num_pred
    lab = mask.astype(np.int64)
    ign = lab == s.ignore_index
    if s.bank_ignore == "zero":
        lab[ign] = 0
    elif s.bank_ignore == "extra_class":
        lab[ign] = s.num_classes
    else:
        lab[ign] = -1
    # patch id of every pixel, row-major over the grid
    pid = (np.arange(h * p)[:, None] // p) * w + (np.arange(w * p)[None, :] // p)
    ok = lab >= 0
    flat = pid[ok] * c + lab[ok]
    return np.bincount(flat, minlength=h * w * c).reshape(h * w, c).astype(np.int32)


def labels_from_counts(counts: np.ndarray, label_mode: str) -> ImageLabels:
    """Majority vote (ties -> smallest class) or soft class histograms (fractions of the
    counted pixels, float32 as `one_hot(...).float().mean()` in the reference)."""
    total = counts.sum(1)
    if label_mode == "majority":
        hard = counts.argmax(1).astype(np.int64)  # first maximum = smallest class index
        hard[total == 0] = -1
        return ImageLabels(hard=hard)
    m = max(1, int((counts > 0).sum(1).max(initial=0)))
    # classes with counts, ascending (argsort of a boolean puts True last: sort on -bool, stable)
    order = np.argsort(~(counts > 0), axis=1, kind="stable")[:, :m]
    cnt = np.take_along_axis(counts, order, 1)
    denom = np.maximum(total, 1).astype(np.float32)[:, None]
    frac = (cnt.astype(np.float32) / denom).astype(np.float32)
    cls = np.where(cnt > 0, order, -1).astype(np.int16)
    frac[cnt == 0] = 0.0
    return ImageLabels(cls=cls, frac=frac)


def image_labels(mask: np.ndarray, grid: tuple[int, int], s: CoreSettings, where: str = "mask") -> ImageLabels:
    return labels_from_counts(patch_counts(mask, grid, s, where), s.label_mode)


# ============================================================================ memory cap
def memory_per_image(memory_size: int, n_images: int, aug_epochs: int = 1) -> int:
    """Patches kept per image and epoch: ``memory_size // (n_images * epochs)``, at least 1
    (HbirdEvaluation.__init__, ``num_sampled_features``)."""
    return max(1, memory_size // max(1, n_images * aug_epochs))


def rarity_select(presence: np.ndarray, n_keep: int, rand: torch.Tensor) -> np.ndarray:
    """Indices of the ``n_keep`` patches to keep, favouring rare classes.

    As in HbirdEvaluation._sample_features: a patch's score is the sum, over the classes
    present in it, of the number of the image's patches containing that class; non-empty
    patches multiply it by U(0, 1) (``rand``, one draw per non-empty patch in order);
    empty patches score 1e6; the smallest scores are kept (torch.topk, largest=False).
    """
    pres = torch.from_numpy(presence)
    freq = pres.sum(0).to(torch.float32)
    scores = pres.to(torch.float32) @ freq
    nonzero = pres.any(1)
    scores.masked_fill_(~nonzero, 1e6)
    if int(nonzero.sum()):
        rmap = torch.ones_like(scores)
        rmap[nonzero] = rand
        scores.mul_(rmap)
    n_keep = min(n_keep, len(scores))
    _, idx = torch.topk(scores, n_keep, largest=False)
    return idx.numpy()


def seeded_rand(seed_words: list[int]) -> Callable[[int], torch.Tensor]:
    """U(0, 1) draws from a generator keyed by ``seed_words`` (e.g. seed, epoch, stem hash)."""
    g = torch.Generator().manual_seed(int(np.random.SeedSequence(seed_words).generate_state(1, np.uint64)[0] >> 1))
    return lambda n: torch.rand(n, generator=g)


# ============================================================================ bank
@dataclass
class Bank:
    index: BankIndex
    num_pred: int
    hard: np.ndarray | None = None   # (P,)
    cls: np.ndarray | None = None    # (P, M)
    frac: np.ndarray | None = None   # (P, M)
    n_images: int = 0

    def __len__(self) -> int:
        return self.index.ntotal

    def neighbour_hard(self, idx: np.ndarray) -> np.ndarray:
        if self.hard is not None:
            return self.hard[idx]
        # the class with the largest fraction; entries are ascending, argmax takes the first max
        f = self.frac[idx]
        j = f.argmax(-1)
        return np.take_along_axis(self.cls[idx], j[..., None], -1)[..., 0].astype(np.int64)

    def neighbour_dense(self, idx: np.ndarray) -> torch.Tensor:
        """(n, k, num_pred) float32 label vectors of the neighbours."""
        n, k = idx.shape
        out = torch.zeros(n * k, self.num_pred, dtype=torch.float32)
        rows = np.arange(n * k)
        if self.hard is not None:
            out[torch.from_numpy(rows), torch.from_numpy(self.hard[idx].reshape(-1))] = 1.0
        else:
            cls = self.cls[idx].reshape(n * k, -1)
            frac = self.frac[idx].reshape(n * k, -1)
            r, c = np.nonzero(frac > 0)
            out[torch.from_numpy(r), torch.from_numpy(cls[r, c].astype(np.int64))] = torch.from_numpy(frac[r, c])
        return out.reshape(n, k, self.num_pred)


def l2_normalise(x: torch.Tensor) -> torch.Tensor:
    """x / ||x|| without epsilon, as the reference stores its memory (zero rows stay 0)."""
    norm = torch.norm(x, dim=-1, keepdim=True)
    return x / torch.where(norm == 0, torch.ones_like(norm), norm)


def build_bank(features: Callable[[int], np.ndarray], labels: list[ImageLabels], s: CoreSettings, *,
               rand_for: Callable[[int], Callable[[int], torch.Tensor]] | None = None,
               n_keep: int | None = None, threads: int | None = None,
               max_bytes: float | None = None) -> Bank:
    """Memory bank over images 0..len(labels)-1.

    ``features(i)`` -> (n_patches_i, D) raw patch features of image i (row-major grid);
    ``n_keep`` (memory cap) keeps that many patches per image chosen by `rarity_select`
    with draws from ``rand_for(i)``; otherwise every patch with a label is kept.
    """
    rows_per_image = _bank_rows(labels, s, rand_for, n_keep)
    total = int(sum(len(r) for r in rows_per_image))
    if total == 0:
        raise DataError("the memory bank is empty: no training patch has a labelled pixel")
    dim = int(np.asarray(features(0)).shape[-1])
    if max_bytes is not None:
        _check_bank_budget(total, dim, s, max_bytes)
    index = BankIndex(dim, s.index, threads=threads)
    if index.needs_training:
        _train_index(index, features, rows_per_image, total, s)
    return _fill_bank(index, features, labels, rows_per_image, s)


def _bank_rows(labels: list[ImageLabels], s: CoreSettings,
               rand_for: Callable[[int], Callable[[int], torch.Tensor]] | None,
               n_keep: int | None) -> list[np.ndarray]:
    """The patch rows of each image that become memory entries."""
    rows_per_image: list[np.ndarray] = []
    for i, lab in enumerate(labels):
        keep_mask = lab.nonempty
        if n_keep is not None:
            pres = lab.presence(s.num_pred)
            n_nonempty = int(pres.any(1).sum())
            draw = rand_for(i) if rand_for is not None else seeded_rand([0, i])
            rand = draw(n_nonempty) if n_nonempty else torch.zeros(0)
            sel = rarity_select(pres, n_keep, rand)
            rows = sel[keep_mask[sel]]  # an all-ignore patch is never a memory entry
        else:
            rows = np.nonzero(keep_mask)[0]
        rows_per_image.append(rows)
    return rows_per_image


def _check_bank_budget(total: int, dim: int, s: CoreSettings, max_bytes: float) -> None:
    per_row = (s.index.pq_m * s.index.pq_nbits // 8 + 8 if s.index.kind == "ivfpq"
               else dim * (2 if s.index.dtype == "float16" else 4))
    if total * per_row > max_bytes:
        raise ConfigError(
            f"the memory bank would hold {total:,} patches x {per_row} bytes = "
            f"{total * per_row / 2**30:.1f} GiB, more than the budget of {max_bytes / 2**30:.1f} GiB; "
            f"use bank_dtype float16, a max_side cap, a memory_size cap or index 'ivfpq'")


def _train_index(index: BankIndex, features: Callable[[int], np.ndarray], rows_per_image: list[np.ndarray],
                 total: int, s: CoreSettings) -> None:
    """Train the index on ``s.index.train_size`` memory entries drawn uniformly (seeded)."""
    rng = np.random.default_rng(s.index.seed)
    n_train = min(total, s.index.train_size)
    pick = np.sort(rng.choice(total, n_train, replace=False))
    bounds = np.cumsum([0] + [len(r) for r in rows_per_image])
    sample = []
    for i in range(len(rows_per_image)):
        lo, hi = np.searchsorted(pick, [bounds[i], bounds[i + 1]])
        if hi > lo:
            local = rows_per_image[i][pick[lo:hi] - bounds[i]]
            sample.append(np.asarray(features(i), dtype=np.float32)[local])
    index.train(l2_normalise(torch.from_numpy(np.concatenate(sample))).numpy())


def _fill_bank(index: BankIndex, features: Callable[[int], np.ndarray], labels: list[ImageLabels],
               rows_per_image: list[np.ndarray], s: CoreSettings) -> Bank:
    """Add the memory entries to the index in chunks of ``s.add_chunk`` rows, with their labels."""
    buf: list[np.ndarray] = []
    n_buf = 0
    hard, cls, frac = [], [], []
    for i, rows in enumerate(rows_per_image):
        if len(rows):
            x = np.asarray(features(i), dtype=np.float32)
            buf.append(x[rows])
            n_buf += len(rows)
            lab = labels[i]
            if lab.hard is not None:
                hard.append(lab.hard[rows])
            else:
                cls.append(lab.cls[rows])
                frac.append(lab.frac[rows])
        if n_buf >= s.add_chunk or (i == len(rows_per_image) - 1 and n_buf):
            index.add(l2_normalise(torch.from_numpy(np.concatenate(buf))).numpy())
            buf, n_buf = [], 0
    bank = Bank(index=index, num_pred=s.num_pred, n_images=len(labels))
    if hard:
        bank.hard = np.concatenate(hard)
    else:
        m = max(c.shape[1] for c in cls)
        bank.cls = np.concatenate([np.pad(c, ((0, 0), (0, m - c.shape[1])), constant_values=-1) for c in cls])
        bank.frac = np.concatenate([np.pad(f, ((0, 0), (0, m - f.shape[1]))) for f in frac])
    return bank


# ============================================================================ prediction
def aggregate(bank: Bank, queries: np.ndarray, s: CoreSettings) -> torch.Tensor:
    """(n, num_pred) class scores of n query patches (raw features, not normalised: the
    inner-product ranking against a normalised bank is that of the cosine)."""
    _, idx = bank.index.search(queries, s.k)
    n = len(queries)
    if s.vote_mode == "majority":
        lab = bank.neighbour_hard(idx)  # (n, k)
        flat = (np.arange(n)[:, None] * bank.num_pred + lab).reshape(-1)
        counts = np.bincount(flat, minlength=n * bank.num_pred).reshape(n, bank.num_pred)
        return torch.from_numpy(counts.astype(np.float32))
    # softmax(cosine / T) over the k neighbours; the same ops as HbirdEvaluation._cross_attention
    q = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32))
    keys = torch.from_numpy(bank.index.reconstruct(idx))  # (n, k, D)
    q = F.normalize(q, dim=-1)
    keys = F.normalize(keys, dim=-1)
    d = q.shape[-1]
    attn = torch.bmm(q.reshape(n, 1, d), keys.reshape(n, s.k, d).transpose(1, 2)).squeeze(1) / s.temperature
    attn = F.softmax(attn, dim=-1)
    values = bank.neighbour_dense(idx)
    return torch.bmm(attn.unsqueeze(1), values).squeeze(1)


def predict_image(scores: torch.Tensor, grid: tuple[int, int], out_hw: tuple[int, int], s: CoreSettings) -> np.ndarray:
    """(H, W) predicted classes from (h*w, C') patch scores."""
    h, w = grid
    if s.upsample == "nearest":
        # each patch's label on all of its pixels (first maximum: ties -> smallest class)
        lab = scores.argmax(-1).reshape(h, w).numpy()
        H, W = out_hw
        if (H, W) != (h * s.patch_size, w * s.patch_size):
            raise ValueError(f"nearest upsampling needs a {h * s.patch_size}x{w * s.patch_size} mask, "
                             f"found {H}x{W}")
        return np.repeat(np.repeat(lab, s.patch_size, 0), s.patch_size, 1)
    # bilinear upsampling of the soft scores, then argmax (HbirdEvaluation.evaluate)
    grid_scores = scores.reshape(1, h, w, -1).permute(0, 3, 1, 2)
    up = F.interpolate(grid_scores.float(), size=tuple(out_hw), mode="bilinear")
    return up.argmax(dim=1)[0].numpy()


def evaluate(bank: Bank, items: Iterable[tuple[np.ndarray, tuple[int, int], np.ndarray]], s: CoreSettings,
             conf: ConfusionMatrix | None = None) -> ConfusionMatrix:
    """Stream (features (h*w, D), grid (h, w), mask (H, W)) of validation images; queries
    are searched in chunks of about ``search_chunk`` patches (whole images per chunk)."""
    conf = conf or ConfusionMatrix(s.num_classes, s.num_pred, s.ignore_index)
    pending: list[tuple[np.ndarray, tuple[int, int], np.ndarray]] = []
    n_pending = 0

    def flush():
        q = np.concatenate([p[0] for p in pending]).astype(np.float32, copy=False)
        scores = aggregate(bank, q, s)
        start = 0
        for feats, grid, mask in pending:
            n = feats.shape[0]
            pred = predict_image(scores[start:start + n], grid, mask.shape, s)
            conf.update(mask, pred)
            start += n

    for item in items:
        pending.append(item)
        n_pending += item[0].shape[0]
        if n_pending >= s.search_chunk:
            flush()
            pending, n_pending = [], 0
    if pending:
        flush()
    return conf


def iter_arrays(patches: Iterable[np.ndarray], masks: Iterable[np.ndarray]) -> Iterator[tuple]:
    """(h, w, D) patch arrays + masks -> the items `evaluate` takes."""
    for p, m in zip(patches, masks):
        p = np.asarray(p)
        yield p.reshape(-1, p.shape[-1]), (p.shape[0], p.shape[1]), np.asarray(m)
