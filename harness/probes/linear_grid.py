"""A grid of linear classifiers trained at once on the same frozen features.

iBOT (eval_linear_multi.py) trains 45 ``LinearClassifier`` modules, one SGD optimizer
each, on one backbone forward per batch; StableRep (main_linear.py) does the same with
one optimizer and a parameter group per learning rate. Here the heads are one module
with stacked weights (H, C, D) and one einsum; each head's loss is its own mean
cross-entropy and the heads share no parameter, so summing the losses gives every head
exactly the gradient it would get alone. SGD with momentum is applied with a learning
rate per head (the same update rule as torch.optim.SGD: buf = m * buf + g, p -= lr * buf).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Literal

import torch
import torch.nn.functional as F
from torch import nn

from harness.probes.labelled_features import target_rank
from harness.per_image import accuracy_percent

Schedule = Literal["cosine_epoch", "cosine_iter", "constant"]


class LinearHeads(nn.Module):
    """H linear layers D -> C (weights N(0, init_std), bias 0, as DINO's LinearClassifier),
    optionally after BatchNorm1d(affine=False) (StableRep --use_bn). The BN has no
    parameters and sees the same input for every head, so one BN serves the whole grid."""

    def __init__(self, num_heads: int, dim: int, num_classes: int, *, batchnorm: bool = False,
                 bn_eps: float = 1e-6, init_std: float = 0.01, generator: torch.Generator | None = None):
        super().__init__()
        self.bn = nn.BatchNorm1d(dim, affine=False, eps=bn_eps) if batchnorm else None
        w = torch.empty(num_heads, num_classes, dim).normal_(0.0, init_std, generator=generator)
        self.weight = nn.Parameter(w)
        self.bias = nn.Parameter(torch.zeros(num_heads, num_classes))

    @property
    def num_heads(self) -> int:
        return self.weight.shape[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, D) -> logits (H, B, C)."""
        if self.bn is not None:
            x = self.bn(x)
        return torch.einsum("bd,hcd->hbc", x, self.weight) + self.bias.unsqueeze(1)


class GridSGD:
    """torch.optim.SGD (dampening 0, no Nesterov) with one learning rate per head."""

    def __init__(self, heads: LinearHeads, lrs: torch.Tensor, momentum: float = 0.9, weight_decay: float = 0.0):
        self.heads, self.lrs = heads, lrs.to(heads.weight.device, heads.weight.dtype)
        self.momentum, self.weight_decay = momentum, weight_decay
        self.buffers: dict[str, torch.Tensor] = {}

    @torch.no_grad()
    def step(self, factor: float) -> None:
        for name in ("weight", "bias"):
            p = getattr(self.heads, name)
            g = p.grad
            if self.weight_decay:
                g = g.add(p, alpha=self.weight_decay)
            buf = self.buffers.get(name)
            if buf is None or self.momentum == 0:
                buf = self.buffers[name] = g.clone()
            else:
                buf.mul_(self.momentum).add_(g)
            lr = (self.lrs * factor).view(-1, *([1] * (p.ndim - 1)))
            p.sub_(lr * buf)

    def zero_grad(self) -> None:
        self.heads.weight.grad = None
        self.heads.bias.grad = None


def cosine_factor(t: int, total: int) -> float:
    """Closed form of CosineAnnealingLR(T_max=total, eta_min=0) at step t."""
    return 0.5 * (1.0 + math.cos(math.pi * t / total))


@torch.no_grad()
def head_hit_flags(heads: LinearHeads, x: torch.Tensor, y: torch.Tensor,
                   chunk: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """Per head and image, whether the target is the top-1 / among the top-5 classes: (H, N)
    bool each (ties: lower class index first)."""
    was_training = heads.training
    heads.eval()
    h, n = heads.num_heads, x.shape[0]
    top1 = torch.zeros(h, n, dtype=torch.bool, device=x.device)
    top5 = torch.zeros(h, n, dtype=torch.bool, device=x.device)
    for a in range(0, n, chunk):
        logits = heads(x[a:a + chunk].float())  # (H, b, C)
        t = y[a:a + chunk]
        for j in range(h):
            rank = target_rank(logits[j], t)
            top1[j, a:a + chunk] = rank < 1
            top5[j, a:a + chunk] = rank < 5
    heads.train(was_training)
    return top1, top5


def evaluate_heads(heads: LinearHeads, x: torch.Tensor, y: torch.Tensor,
                   chunk: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-1 and top-5 hit counts per head, (H,) each (ties: lower class index first)."""
    top1, top5 = head_hit_flags(heads, x, y, chunk)
    return top1.sum(1), top5.sum(1)


@dataclass
class GridHistory:
    epochs: list[int] = field(default_factory=list)  # 1-based epochs at which the grid was evaluated
    top1: list[list[float]] = field(default_factory=list)  # [eval][head], percent
    top5: list[list[float]] = field(default_factory=list)
    train_loss: list[list[float]] = field(default_factory=list)  # [epoch][head], mean over steps
    # [epoch][head], percent: top-1 on the epoch's training batches as the head saw them while training
    train_top1: list[list[float]] = field(default_factory=list)
    # [eval][head], percent: top-1 on a selection split (a holdout of the training split), when given
    select_top1: list[list[float]] = field(default_factory=list)
    # the per-image top-1 / top-5 hits (N,) of select_best's (evaluation, head), and where it is
    best_hits: tuple[torch.Tensor, torch.Tensor] | None = None
    best_at: tuple[int, int] | None = None
    last_hits: tuple[torch.Tensor, torch.Tensor] | None = None  # (H, N) each, of the last evaluation

    @property
    def criterion(self) -> list[list[float]]:
        """What the best is chosen on: the selection split's top-1 when there is one, else the
        evaluation split's (the papers' rule)."""
        return self.select_top1 or self.top1

    def keep_if_best(self, f1: torch.Tensor, f5: torch.Tensor) -> None:
        """After an evaluation was appended: keep its per-image hits if it holds a new best
        criterion top-1 (select_best's rule: the first maximum over evaluations, then heads)."""
        crit = self.criterion
        row = crit[-1]
        j = max(range(len(row)), key=lambda h: (row[h], -h))
        if self.best_at is None or row[j] > crit[self.best_at[0]][self.best_at[1]]:
            self.best_at = (len(crit) - 1, j)
            self.best_hits = (f1[j].cpu(), f5[j].cpu())
        self.last_hits = (f1.cpu(), f5.cpu())


def select_best(top1: list[list[float]]) -> tuple[int, int]:
    """(eval index, head index) of the best top-1 over evaluations and heads.

    The first maximum wins: earliest evaluation, then the first head in grid order. The
    number reported is the maximum whichever tie rule is used (DINO: max over epochs;
    iBOT: max over epochs and heads; StableRep: the same with strict >, i.e. this rule)."""
    best, where = -math.inf, (0, 0)
    for e, row in enumerate(top1):
        for h, v in enumerate(row):
            if v > best:
                best, where = v, (e, h)
    return where


def train_grid(heads: LinearHeads, opt: GridSGD, batches: Callable[[int], Iterable[tuple[torch.Tensor, torch.Tensor]]],
               val_x: torch.Tensor, val_y: torch.Tensor, *, epochs: int, steps_per_epoch: int,
               schedule: Schedule = "cosine_epoch", eval_every: int = 1,
               on_epoch: Callable[[int, GridHistory], None] | None = None,
               select: tuple[torch.Tensor, torch.Tensor] | None = None) -> GridHistory:
    """Train every head for ``epochs`` epochs; ``batches(epoch)`` yields (features (B, D),
    labels (B,)). Evaluates after epoch e (0-based) when (e + 1) % eval_every == 0 and
    after the last epoch (DINO: every epoch; StableRep: every 10th). ``select``: a selection
    split (features, labels) evaluated with it, on which the best is then chosen."""
    hist = GridHistory()
    total_steps = epochs * steps_per_epoch
    step = 0
    n_val = val_x.shape[0]
    for epoch in range(epochs):
        heads.train()
        loss_sum = torch.zeros(heads.num_heads, dtype=torch.float64, device=heads.weight.device)
        train_hits = torch.zeros(heads.num_heads, dtype=torch.float64, device=heads.weight.device)
        n_steps = n_seen = 0
        for x, y in batches(epoch):
            if schedule == "cosine_epoch":
                factor = cosine_factor(epoch, epochs)
            elif schedule == "cosine_iter":
                factor = cosine_factor(step, total_steps)
            else:
                factor = 1.0
            logits = heads(x)  # (H, B, C)
            per_head = F.cross_entropy(logits.permute(1, 2, 0), y.view(-1, 1).expand(-1, heads.num_heads),
                                       reduction="none").mean(0)  # (H,)
            opt.zero_grad()
            per_head.sum().backward()
            opt.step(factor)
            loss_sum += per_head.detach().double()
            train_hits += (logits.detach().argmax(-1) == y).sum(1).double()
            n_steps += 1
            n_seen += len(y)
            step += 1
        hist.train_loss.append((loss_sum / max(n_steps, 1)).tolist())
        hist.train_top1.append(accuracy_percent(train_hits, max(n_seen, 1)).tolist())
        if (epoch + 1) % eval_every == 0 or epoch == epochs - 1:
            if select is not None:
                hist.select_top1.append(accuracy_percent(head_hit_flags(heads, *select)[0].sum(1).double(),
                                                         select[0].shape[0]).tolist())
            f1, f5 = head_hit_flags(heads, val_x, val_y)
            t1, t5 = f1.sum(1), f5.sum(1)
            hist.epochs.append(epoch + 1)
            hist.top1.append(accuracy_percent(t1.double(), n_val).tolist())
            hist.top5.append(accuracy_percent(t5.double(), n_val).tolist())
            hist.keep_if_best(f1, f5)
        if on_epoch is not None:
            on_epoch(epoch, hist)
    return hist
