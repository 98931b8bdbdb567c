"""Official DINO / iBOT / CrIBo / SynCLR / StableRep checkpoints -> ViTBackbone.

All of these ViTs already use timm's parameter names (LayerNorm eps 1e-6, qkv bias, no
layer scale, final norm kept), so importing is: find the backbone's state dict inside
the file, strip its prefix, drop the known non-backbone parts, and check that what is
left is exactly the backbone. The audit is strict where the official loaders are not
(DINO's ``load_pretrained_weights`` uses ``strict=False`` and silently loads nothing for
a wrong key): every backbone weight must be found, every dropped key is reported by
pattern, and any other key is an error that names it.

Layouts (verified against the official save code; see docs/ZOO_AND_TABLES.md):

=================  ======================================  ====================================
layout             backbone location                        dropped
=================  ======================================  ====================================
dino_pretrain      flat dict                                -
dino_full          ``teacher`` -> ``backbone.*``             ``head.*``
                   (student: ``student`` -> ``module.backbone.*``)
ibot_teacher       ``state_dict`` -> flat (or flat)          ``masked_embed`` (student), ``head.*``
ibot_full          ``teacher`` -> ``backbone.*``             ``head.*`` (incl. ``last_layer2``),
                                                            student ``masked_embed``
cribo_full         ``teacher`` -> ``backbone.*``             ``head.*`` (incl. ``last_layer_c``)
synclr             ``model`` -> ``module.visual.*``          ``visual.head.*``
stablerep          ``model`` -> ``visual.*``                 ``image_mlp.*``
=================  ======================================  ====================================

Full training checkpoints also hold an ``argparse.Namespace`` under ``args``; torch >= 2.6
refuses those with ``weights_only=True``. They are unpickled only when the caller says
``trust=True`` (``--trust-checkpoint``), and the tensors are then re-saved in the
harness format so that later runs never unpickle again.
"""
from __future__ import annotations

import fnmatch
import math
import pickle
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from harness.backbone import ARCHS, ViTBackbone, create_backbone
from harness.checkpoints import load_state_into, save_checkpoint
from harness.errors import CheckpointError
from harness.io_utils import sha256_file


@dataclass(frozen=True)
class Layout:
    name: str
    method: str
    container: tuple[str, ...]  # top-level keys tried in order; () = the file is the state dict
    prefix: str  # stripped from backbone keys (after an all-keys `module.`)
    drop: tuple[str, ...]  # fnmatch patterns on the (container) keys, before prefix stripping
    student_container: str | None = None
    student_prefix: str | None = None
    student_drop: tuple[str, ...] = ()
    description: str = ""


LAYOUTS: dict[str, Layout] = {
    "dino_pretrain": Layout("dino_pretrain", "dino", (), "", (),
                            description="DINO *_pretrain.pth: the teacher backbone as a flat dict"),
    "dino_full": Layout("dino_full", "dino", ("teacher",), "backbone.", ("head.*",),
                        "student", "module.backbone.", ("module.head.*",),
                        description="DINO *_full_checkpoint.pth (main_dino.py save_dict)"),
    # extract_backbone_weights.py writes {'state_dict': backbone}; its --with_head keeps
    # the head keys; students (the 22K releases) carry iBOT's `masked_embed`.
    "ibot_teacher": Layout("ibot_teacher", "ibot", ("state_dict", None), "", ("masked_embed", "head.*"),
                           description="iBOT checkpoint_teacher.pth / checkpoint_student.pth"),
    "ibot_full": Layout("ibot_full", "ibot", ("teacher",), "backbone.", ("head.*",),
                        "student", "module.backbone.", ("module.head.*", "module.backbone.masked_embed"),
                        description="iBOT checkpoint.pth (main_ibot.py save_dict)"),
    "cribo_full": Layout("cribo_full", "cribo", ("teacher",), "backbone.", ("head.*",),
                         "student", "module.backbone.", ("module.head.*",),
                         description="CrIBo release = full training checkpoint (main_cribo.py)"),
    # The SynCLR eval code skips `visual.head*` (a classifier slot) when it loads.
    "synclr": Layout("synclr", "synclr", ("model", "state_dict"), "module.visual.", ("module.visual.head.*",),
                     description="SynCLR release synclr_vit_{b_16,l_14}.pth"),
    "stablerep": Layout("stablerep", "stablerep", ("model", "state_dict"), "visual.",
                        ("image_mlp.*", "visual.head.*"),
                        description="StableRep main_stablerep.py checkpoint"),
}

# Top-level entries of full training checkpoints that are not model weights.
_NOT_WEIGHTS = ("optimizer", "epoch", "args", "dino_loss", "ibot_loss", "fp16_scaler", "scaler",
                "centroids_queue_cpu", "cls_queue_cpu", "cpv_queue_cpu")


@dataclass
class ImportReport:
    source: str
    source_sha256: str
    layout: str
    method: str
    branch: str  # teacher / student / backbone
    container: str | None
    prefix: str
    arch: str
    arch_kwargs: dict
    loaded: int  # number of backbone tensors
    dropped: dict[str, list[str]] = field(default_factory=dict)  # pattern -> keys
    not_read: list[str] = field(default_factory=list)  # other top-level entries of the file
    pos_embed: str | None = None  # "resized 14x14 -> 28x28" when interpolated
    unpickled: bool = False  # True if the file needed trust=True
    saved: str | None = None

    def summary(self) -> str:
        lines = [f"{self.source}: layout {self.layout} ({self.branch}), arch {self.arch}, "
                 f"{self.loaded} backbone tensors"]
        for pattern, keys in self.dropped.items():
            lines.append(f"  dropped {len(keys):4d} key(s) matching {pattern!r}")
        if self.not_read:
            lines.append(f"  not read (not backbone weights): {', '.join(self.not_read)}")
        if self.pos_embed:
            lines.append(f"  position embeddings {self.pos_embed}")
        if self.unpickled:
            lines.append("  file was fully unpickled (trusted by the caller)")
        if self.saved:
            lines.append(f"  saved as {self.saved}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["dropped"] = {p: len(k) for p, k in self.dropped.items()}
        return d


# ----------------------------------------------------------------------------- reading
def _trust_hint(path: Path, exc: Exception) -> str:
    found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(exc))
    what = f"it holds a {found.group(1)} object" if found else "it holds Python objects"
    return (f"{path}: cannot be read weights-only ({what}). "
            f"Official full training checkpoints hold Python objects (an argparse.Namespace under "
            f"'args'), and unpickling them can run arbitrary code. Check that the file comes from "
            f"the official source (compare its sha256 with `ssl-bench zoo list`), then re-run with "
            f"--trust-checkpoint (trust=True); the tensors are then re-saved in the harness format "
            f"and never unpickled again.")


def read_file(path: str | Path, trust: bool = False) -> tuple[Any, bool]:
    """torch.load weights-only; with ``trust`` fall back to full unpickling. Returns
    (object, unpickled)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint file {path} not found")
    try:
        return torch.load(path, map_location="cpu", weights_only=True), False
    except pickle.UnpicklingError as exc:
        if not trust:
            raise CheckpointError(_trust_hint(path, exc)) from None
        weights_only_error = exc
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: not a readable torch checkpoint ({exc})") from exc
    try:
        return torch.load(path, map_location="cpu", weights_only=False), True
    except Exception as exc:
        raise CheckpointError(f"{path}: cannot be unpickled either ({exc}); weights-only load said: "
                              f"{weights_only_error}") from exc


def _is_state_dict(obj: Any) -> bool:
    return isinstance(obj, dict) and bool(obj) and all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items())


def _strip_module(state: dict) -> tuple[dict, bool]:
    if state and all(k.startswith("module.") for k in state):
        return {k[len("module."):]: v for k, v in state.items()}, True
    return state, False


def detect_layout(obj: Any) -> str:
    """Name the layout of a loaded checkpoint from its keys."""
    if isinstance(obj, dict) and "teacher" in obj and isinstance(obj["teacher"], dict):
        teacher, student = obj["teacher"], obj.get("student") or {}
        keys = set(teacher) | set(student)
        if any(k in obj for k in ("centroids_queue_cpu", "cpv_queue_cpu")) or any("last_layer_c" in k for k in keys):
            return "cribo_full"
        if "ibot_loss" in obj or any("last_layer2" in k or k.endswith("masked_embed") for k in keys):
            return "ibot_full"
        return "dino_full"
    if isinstance(obj, dict) and "model" in obj and isinstance(obj["model"], dict):
        keys = list(obj["model"])
        if any(k.startswith("module.visual.") for k in keys):
            return "synclr"
        if any(k.startswith("visual.") for k in keys):
            return "stablerep"
    if isinstance(obj, dict) and _is_state_dict(obj.get("state_dict")):
        inner = obj["state_dict"]
        if any(k.startswith("module.visual.") for k in inner):
            return "synclr"
        if any(k.startswith("visual.") for k in inner):
            return "stablerep"
        return "ibot_teacher"
    if _is_state_dict(obj):
        if "masked_embed" in obj:
            return "ibot_teacher"
        if any(k.startswith("module.visual.") for k in obj):
            return "synclr"
        return "dino_pretrain"
    top = sorted(obj)[:12] if isinstance(obj, dict) else type(obj).__name__
    raise CheckpointError(
        f"cannot recognise the checkpoint layout (top-level keys: {top}). Known layouts: "
        f"{', '.join(LAYOUTS)}; pass layout=... (--layout) if the file is one of them.")


def _select(obj: Any, layout: Layout, branch: str) -> tuple[dict, str | None, str, tuple[str, ...], list[str]]:
    """(state dict, container key, prefix, drop patterns, other top-level keys)."""
    if branch == "student":
        if layout.student_container is None:
            raise CheckpointError(f"layout {layout.name} holds a single backbone; which='student' "
                                  f"applies to full training checkpoints only")
        containers, prefix, drop = (layout.student_container,), layout.student_prefix, layout.student_drop
    else:
        containers, prefix, drop = layout.container, layout.prefix, layout.drop
    if not containers:
        if not _is_state_dict(obj):
            raise CheckpointError(f"layout {layout.name} expects a flat dict of tensors, found "
                                  f"{type(obj).__name__} with keys {sorted(obj)[:8] if isinstance(obj, dict) else ''}")
        return obj, None, prefix, drop, []
    for key in containers:
        if key is None and _is_state_dict(obj):
            return obj, None, prefix, drop, []
        if key is not None and isinstance(obj, dict) and isinstance(obj.get(key), dict):
            others = [k for k in obj if k != key]
            return obj[key], key, prefix, drop, others
    found = sorted(obj)[:12] if isinstance(obj, dict) else type(obj).__name__
    raise CheckpointError(f"layout {layout.name} expects the backbone under "
                          f"{[c for c in containers if c]} but the file has {found}")


def extract_backbone(obj: Any, layout: str, branch: str = "teacher",
                     extra_drop: tuple[str, ...] = ()) -> tuple[dict[str, torch.Tensor], dict]:
    """Pull the backbone state dict out of a loaded checkpoint. Returns (state, audit info)."""
    if layout not in LAYOUTS:
        raise CheckpointError(f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")
    lay = LAYOUTS[layout]
    state, container, prefix, drop, others = _select(obj, lay, branch)
    drop = tuple(drop) + tuple(extra_drop)
    # A DDP-wrapped teacher (BatchNorm in the head) is saved with `module.` in front of
    # everything; the student prefixes already spell it out.
    stripped_module = False
    if not prefix.startswith("module."):
        state, stripped_module = _strip_module(state)
    backbone, dropped, unexpected = {}, {}, []
    for key, value in state.items():
        pattern = next((p for p in drop if fnmatch.fnmatchcase(key, p)), None)
        if pattern is not None:
            dropped.setdefault(pattern, []).append(key)
        elif key.startswith(prefix):
            if not isinstance(value, torch.Tensor):
                unexpected.append(key)
                continue
            backbone[key[len(prefix):]] = value
        else:
            unexpected.append(key)
    if unexpected:
        raise CheckpointError(
            f"layout {layout}: {len(unexpected)} key(s) are neither backbone weights (prefix "
            f"{prefix!r}) nor a known part to drop ({list(drop)}): {sorted(unexpected)[:12]}"
            f"{' ...' if len(unexpected) > 12 else ''}. If they are heads of your own variant, "
            f"pass extra_drop patterns (--drop); otherwise the file is not a {layout} checkpoint.")
    if not backbone:
        raise CheckpointError(f"layout {layout}: no backbone weights found under prefix {prefix!r}")
    info = {"container": container, "prefix": ("module." if stripped_module else "") + prefix,
            "dropped": dropped, "not_read": list(others)}
    return backbone, info


# ----------------------------------------------------------------------------- arch
_HEADS_BY_DIM = {64: 2, 192: 3, 384: 6, 768: 12, 1024: 16, 1280: 16}


def detect_arch(state: dict[str, torch.Tensor], num_heads: int | None = None) -> tuple[str, dict]:
    """(arch name, arch kwargs) from tensor shapes: embed dim, depth, patch size, pos_embed
    length. The head count is not visible in shapes: the preset's, else ``num_heads``,
    else the usual value for the width (head dim 64)."""
    needed = ("cls_token", "pos_embed", "patch_embed.proj.weight")
    missing = [k for k in needed if k not in state]
    if missing:
        raise CheckpointError(f"cannot infer the architecture: keys {missing} are missing "
                              f"(found e.g. {sorted(state)[:6]})")
    dim = state["cls_token"].shape[-1]
    proj = state["patch_embed.proj.weight"]
    if proj.ndim != 4 or proj.shape[-1] != proj.shape[-2]:
        raise CheckpointError(f"patch_embed.proj.weight has shape {tuple(proj.shape)}; expected a square conv")
    patch = proj.shape[-1]
    depth = 1 + max((int(m.group(1)) for k in state if (m := re.match(r"blocks\.(\d+)\.", k))), default=-1)
    n_prefix = 1 + sum(1 for k in ("reg_token",) if k in state)
    n_grid = state["pos_embed"].shape[1] - n_prefix
    side = math.isqrt(n_grid)
    if side * side != n_grid:
        raise CheckpointError(f"pos_embed holds {n_grid} patch positions, not a square grid")
    mlp_ratio = state["blocks.0.mlp.fc1.weight"].shape[0] / dim if "blocks.0.mlp.fc1.weight" in state else 4.0
    img_size = side * patch
    for name, kw in ARCHS.items():
        if (kw["embed_dim"], kw["depth"], kw["patch_size"]) == (dim, depth, patch) and \
                kw.get("mlp_ratio", 4.0) == mlp_ratio and (num_heads is None or kw["num_heads"] == num_heads):
            out = dict(kw)
            out["img_size"] = img_size
            return name, out
    heads = num_heads or _HEADS_BY_DIM.get(dim) or max(1, dim // 64)
    kw = dict(img_size=img_size, patch_size=patch, embed_dim=dim, depth=depth, num_heads=heads)
    if mlp_ratio != 4.0:
        kw["mlp_ratio"] = mlp_ratio
    return f"vit_d{dim}_l{depth}_p{patch}", kw


def _check_arch(name: str, detected: str, kwargs: dict, source: str) -> dict:
    if name not in ARCHS:
        raise CheckpointError(f"unknown architecture {name!r}; known: {', '.join(sorted(ARCHS))}")
    want = ARCHS[name]
    diffs = [f"{k}: checkpoint {kwargs.get(k)} vs {name} {want[k]}"
             for k in ("embed_dim", "depth", "patch_size") if kwargs.get(k) != want[k]]
    if diffs:
        raise CheckpointError(f"{source} does not hold a {name}: {'; '.join(diffs)} "
                              f"(its shapes say {detected}). Pass the matching arch or none to auto-detect.")
    return {**want, "img_size": kwargs["img_size"]}


# ----------------------------------------------------------------------------- import
def read_official(path: str | Path, layout: str | None = None, *, which: str = "teacher",
                  arch: str | None = None, img_size: int | None = None, trust: bool = False,
                  extra_drop: tuple[str, ...] = (), num_heads: int | None = None,
                  ) -> tuple[dict[str, torch.Tensor], ImportReport]:
    """Read an official checkpoint and return (backbone state dict in harness names, report).

    ``layout`` None = auto-detect. ``which`` picks teacher (default, what the papers
    evaluate) or student in full checkpoints. ``arch`` None = detect from shapes, else a
    mismatch is an error. ``img_size`` resizes the position embeddings to that input size
    with the official bicubic interpolation.
    """
    path = Path(path)
    if which not in ("teacher", "student"):
        raise CheckpointError(f"which must be 'teacher' or 'student', found {which!r}")
    obj, unpickled = read_file(path, trust=trust)
    layout = layout or detect_layout(obj)
    state, info = extract_backbone(obj, layout, which, tuple(extra_drop))
    detected, kwargs = detect_arch(state, num_heads)
    arch_name = detected
    if arch is not None:
        kwargs = _check_arch(arch, detected, kwargs, str(path))
        arch_name = arch
    branch = which if LAYOUTS[layout].student_container else "backbone"
    report = ImportReport(
        source=str(path), source_sha256=sha256_file(path), layout=layout, method=LAYOUTS[layout].method,
        branch=branch, container=info["container"], prefix=info["prefix"], arch=arch_name,
        arch_kwargs=kwargs, loaded=len(state), dropped=info["dropped"], not_read=info["not_read"],
        unpickled=unpickled)
    if img_size is not None and img_size != kwargs["img_size"]:
        state = dict(state)
        state["pos_embed"], report.pos_embed = _resize_pos_embed(state, arch_name, kwargs, img_size)
        kwargs["img_size"] = img_size
    state = {k: v.float().contiguous() if v.is_floating_point() else v for k, v in state.items()}
    return state, report


def _resize_pos_embed(state: dict, arch: str, kwargs: dict, img_size: int) -> tuple[torch.Tensor, str]:
    patch = kwargs["patch_size"]
    if img_size % patch:
        raise CheckpointError(f"img_size {img_size} is not a multiple of the patch size {patch}")
    # The backbone's own run-time interpolation, so importing at size s and running at s
    # equals importing at the training size and running at s. Built on the meta device:
    # only pos_embed is real, nothing is allocated or initialised.
    with torch.device("meta"):
        model = _build(arch, kwargs)
    model.pos_embed = torch.nn.Parameter(state["pos_embed"].float(), requires_grad=False)
    g0, g1 = kwargs["img_size"] // patch, img_size // patch
    with torch.no_grad():
        new = model.interpolate_pos_embed(g1, g1).detach().clone()
    return new, f"resized {g0}x{g0} -> {g1}x{g1} (official bicubic interpolation)"


def _build(arch: str, kwargs: dict) -> ViTBackbone:
    if arch in ARCHS:
        return create_backbone(arch, **{k: v for k, v in kwargs.items() if k in ("img_size",)})
    return create_backbone(arch, **kwargs)


def import_checkpoint(path: str | Path, out: str | Path | None = None, *, layout: str | None = None,
                      which: str = "teacher", arch: str | None = None, img_size: int | None = None,
                      trust: bool = False, extra_drop: tuple[str, ...] = (), num_heads: int | None = None,
                      meta: dict | None = None) -> tuple[ViTBackbone, ImportReport]:
    """Read an official file, load it strictly into a ViTBackbone, and (if ``out``) save it in
    the harness format (``<out>.safetensors`` + ``.json``; metadata records method, arch,
    layout, the source file and its sha256, and the audit)."""
    state, report = read_official(path, layout, which=which, arch=arch, img_size=img_size, trust=trust,
                                  extra_drop=extra_drop, num_heads=num_heads)
    backbone = _build(report.arch, report.arch_kwargs)
    load_state_into(backbone, state, f"{path} ({report.layout})")
    backbone.eval()
    if out is not None:
        full_meta = {
            "method": report.method, "arch": report.arch, "arch_kwargs": backbone.arch_kwargs,
            "source_file": str(Path(path).resolve()), "source_sha256": report.source_sha256,
            "layout": report.layout, "branch": report.branch, "import_report": report.to_dict(),
            **(meta or {}),
        }
        saved = save_checkpoint(out, backbone.backbone_state_dict(), full_meta)
        report.saved = str(saved)
    return backbone, report
