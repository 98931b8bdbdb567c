"""Official DINO / iBOT / CrIBo / SynCLR / StableRep / DINOv2 / MAE / CrOC / TimeT / Leopart /
NeCo checkpoints -> ViTBackbone.

All of these ViTs use timm's parameter names (LayerNorm eps 1e-6, qkv bias, final norm
kept; DINOv2 adds layer scale `ls1/ls2.gamma`, which timm names the same), so importing
is: find the backbone's state dict inside the file, strip its prefix, drop the known
non-backbone parts, apply the family's few renames (DINOv2's `register_tokens`, SwiGLU
`w12/w3`, chunked blocks), and check that what is left is exactly the backbone. The
audit is strict where the official loaders are not (DINO's ``load_pretrained_weights``,
MAE's, TimeT's, Leopart's and NeCo's README loaders all use ``strict=False`` and silently
load nothing for a wrong key): every backbone weight must be found, every dropped key is
reported by pattern, and any other key is an error that names it.

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
dinov2             flat dict (hub ``*_pretrain.pth``)         ``mask_token``
mae                ``model`` -> flat                         ``decoder_*``, ``mask_token``
croc_full          ``teacher`` -> ``backbone.*``             ``head.*`` (incl. ``last_layer_c``)
timet              flat: ``teacher.backbone.*`` (else the     ``teacher.head.*``, ``prototypes`` ...
                   student ``feature_extractor.backbone.*``)
leopart            flat / ``state_dict``: ``model.*``         ``model.projection_head.*``,
                   (student; teacher ``teacher.*``)          ``model.prototypes.*``, ``teacher.*``
neco               flat (README: load into the hub model)    ``projection_head.*``, ``prototypes.*``
=================  ======================================  ====================================

Forward settings that the shapes do not show come with the layout: MAE's and DINOv2-with-
registers' position interpolation (see harness.models.backbone.ARCH_KEYS), DINOv2's layer scale,
register tokens and SwiGLU are read off the keys.

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
from typing import TYPE_CHECKING, Any, Callable

import torch

from harness.models.archs import ARCH_KEYS, ARCHS, swiglu_hidden
from harness.models.checkpoints import load_state_into, save_checkpoint
from harness.errors import CheckpointError
from harness.io_utils import sha256_file

if TYPE_CHECKING:  # building a ViT imports timm: done inside the functions that build one
    from harness.models.backbone import ViTBackbone


Adapted = tuple[dict, dict, list[str]]  # (state in harness names, arch settings, notes)


@dataclass(frozen=True)
class Layout:
    name: str
    method: str
    container: tuple[str | None, ...]  # top-level keys tried in order; None / () = the file is the state dict
    prefix: str  # stripped from backbone keys (after an all-keys `module.`)
    drop: tuple[str, ...]  # fnmatch patterns on the (container) keys, before prefix stripping
    student_container: str | None = None  # None with a student_prefix: the student is in the same dict
    student_prefix: str | None = None  # None: the file holds one backbone
    student_drop: tuple[str, ...] = ()
    description: str = ""
    # the family's renames and the forward settings its official code uses (not in the shapes)
    adapt: Callable[[dict], Adapted] | None = None
    # the teacher branch is absent from some files of this layout: then the student is what
    # the official loader gives (TimeT's README loader, see below)
    fallback_to_student: bool = False
    # the branch the official loader reads when none is asked for (Leopart's: its student `model`)
    default_branch: str = "teacher"

    @property
    def has_student(self) -> bool:
        return self.student_prefix is not None


_CHUNKED = re.compile(r"^blocks\.(\d+)\.(\d+)\.")


def adapt_dinov2(state: dict) -> Adapted:
    """DINOv2's DinoVisionTransformer -> timm names and settings (dinov2/models/vision_transformer.py,
    dinov2/hub/backbones.py):

    - ``register_tokens`` (1, R, d) -> ``reg_token``. DINOv2 adds pos_embed to [CLS, patches]
      and only then inserts the registers (prepare_tokens_with_masks), so the registers have
      no position embedding while CLS has pos_embed[:, 0]: the harness keeps the grid part in
      pos_embed (``no_embed_class``) and folds pos_embed[:, 0] into ``cls_token`` (the same
      fp32 addition the official forward does each time; timm's dinov2 models do the same).
      The hub builds register models with interpolate_offset 0.0 and antialias True.
    - SwiGLU feed-forward (ViT-g, ffn_layer "swiglufused"): ``mlp.w12`` / ``mlp.w3`` ->
      ``mlp.fc1`` / ``mlp.fc2`` (timm's packed GLU computes silu(x1) * x2 on the same halves).
    - block_chunks > 0 (training checkpoints): ``blocks.<chunk>.<i>.`` -> ``blocks.<i>.``.
    - layer scale ``ls1/ls2.gamma`` keeps its name (init_values set so the model has it).
    Checkpoints without these keys (DINO-architecture NeCo files) pass through unchanged."""
    out, notes, extra = {}, [], {}
    chunked = any(_CHUNKED.match(k) for k in state)
    for k, v in state.items():
        if chunked and (m := _CHUNKED.match(k)):
            k = f"blocks.{m.group(2)}." + k[m.end():]
        if ".mlp.w12." in k or ".mlp.w3." in k:
            k = k.replace(".mlp.w12.", ".mlp.fc1.").replace(".mlp.w3.", ".mlp.fc2.")
        out[k] = v
    if chunked:
        notes.append("blocks.<chunk>.<i>.* -> blocks.<i>.* (block_chunks)")
    if any(k.endswith(".mlp.fc1.weight") for k in out) and any(".mlp.w12." in k for k in state):
        extra["ffn_layer"] = "swiglufused"
        notes.append("mlp.w12/w3 -> mlp.fc1/fc2 (SwiGLU)")
    if any(re.match(r"blocks\.\d+\.ls1\.gamma$", k) for k in out):
        extra["init_values"] = 1.0
    if "register_tokens" in out:
        reg = out.pop("register_tokens")
        if "pos_embed" not in out or "cls_token" not in out:
            raise CheckpointError("register_tokens without cls_token / pos_embed: not a DINOv2 backbone")
        pos = out["pos_embed"]
        out["reg_token"] = reg
        out["cls_token"] = out["cls_token"] + pos[:, :1]
        out["pos_embed"] = pos[:, 1:]
        extra.update(reg_tokens=int(reg.shape[1]), no_embed_class=True, pos_interp_offset=0.0,
                     pos_interp_antialias=True)
        notes.append(f"register_tokens -> reg_token ({reg.shape[1]} registers, no position embedding); "
                     f"pos_embed[:, 0] folded into cls_token (no_embed_class)")
    return out, extra, notes


def adapt_mae(state: dict) -> Adapted:
    """MAE resizes pos_embed with util/pos_embed.interpolate_pos_embed: bicubic to the target
    size, no antialias, no offset (the sin-cos table is stored in the checkpoint)."""
    return state, {"pos_interp_offset": 0.0, "pos_interp_antialias": False}, []


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
    # hub/backbones.py loads dinov2_*_pretrain.pth with strict=True into a model that has the
    # (unused at inference) mask_token.
    "dinov2": Layout("dinov2", "dinov2", (), "", ("mask_token",), adapt=adapt_dinov2,
                     description="DINOv2 dinov2_vit*14[_reg4]_pretrain.pth (torch.hub backbone)"),
    # mae_pretrain_vit_*.pth: {'model': encoder}; a main_pretrain.py checkpoint also holds the
    # decoder (decoder_*, the decoder's mask_token) and optimizer / epoch / scaler / args.
    "mae": Layout("mae", "mae", ("model",), "", ("decoder_*", "mask_token"), adapt=adapt_mae,
                  description="MAE mae_pretrain_vit_*.pth (encoder) or main_pretrain.py checkpoint"),
    # main_croc.py save_dict: student (DDP), teacher, optimizer, epoch, args, croc_loss,
    # fp16_scaler; the wrapper holds backbone + CrOCHead (last_layer and last_layer_c).
    "croc_full": Layout("croc_full", "croc", ("teacher",), "backbone.", ("head.*",),
                        "student", "module.backbone.", ("module.head.*",),
                        description="CrOC release = full training checkpoint (main_croc.py)"),
    # TimeT.save = TimeT.state_dict(): prototypes, [teacher_prototypes], feature_extractor
    # (backbone = the DINO hub ViT, head = projection MLP), [teacher = EMA copy]. The README
    # loader strips two key components and loads strict=False, so the teacher.backbone keys
    # (after feature_extractor's in the dict) win when the file has them (time_tuning.py
    # defaults use_teacher=True); without a teacher it loads the student.
    "timet": Layout("timet", "timet", (None, "model"), "teacher.backbone.",
                    ("teacher.head.*", "feature_extractor.*", "prototypes", "teacher_prototypes"),
                    None, "feature_extractor.backbone.",
                    ("feature_extractor.head.*", "teacher.*", "prototypes", "teacher_prototypes"),
                    fallback_to_student=True, description="TimeT release TimeT.pth (TimeT.state_dict())"),
    # Leopart's loader (experiments/utils.get_backbone_weights 'vit-*-ours'): the file's
    # 'state_dict' if present, keys starting with 'model' (the student), heads and prototypes
    # dropped; the README strips the first key component.
    "leopart": Layout("leopart", "leopart", (None, "state_dict"), "teacher.",
                      ("model.*", "teacher.projection_head.*", "teacher.prototypes.*"),
                      None, "model.", ("teacher.*", "model.projection_head.*", "model.prototypes.*"),
                      default_branch="student",
                      description="Leopart release leopart_vit*.ckpt (Lightning module state)"),
    # NeCo README: torch.load the file and load_state_dict(strict=False) into the DINOv2 hub
    # model (dinov2 architectures) or timm's vit_small_patch16_224 (dino architectures).
    "neco": Layout("neco", "neco", (), "", ("projection_head.*", "prototypes.*", "mask_token"),
                   adapt=adapt_dinov2, description="NeCo release neco_on_*_{model,teacher}.ckpt"),
}

# Top-level entries of full training checkpoints that are not model weights.
_NOT_WEIGHTS = ("optimizer", "epoch", "args", "dino_loss", "ibot_loss", "fp16_scaler", "scaler",
                "centroids_queue_cpu", "cls_queue_cpu", "cpv_queue_cpu", "croc_loss")


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
    renamed: list[str] = field(default_factory=list)  # the layout's renames / folds, in words
    forward: dict = field(default_factory=dict)  # settings the layout fixes (pos interpolation, ...)

    def summary(self) -> str:
        lines = [f"{self.source}: layout {self.layout} ({self.branch}), method {self.method}, arch {self.arch}, "
                 f"{self.loaded} backbone tensors"]
        if self.method == "unknown":
            lines.append("  method unknown: a plain ViT state dict does not say how it was trained "
                         "(--layout dino_pretrain for DINO's released files)")
        for pattern, keys in self.dropped.items():
            lines.append(f"  dropped {len(keys):4d} key(s) matching {pattern!r}")
        if self.not_read:
            lines.append(f"  not read (not backbone weights): {', '.join(self.not_read)}")
        for note in self.renamed:
            lines.append(f"  renamed: {note}")
        if self.forward:
            lines.append("  forward: " + ", ".join(f"{k}={v}" for k, v in sorted(self.forward.items())))
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


def _flat_layout(state: dict) -> str | None:
    """The layout of a flat dict of tensors, from its key prefixes, or None."""
    keys = list(state)
    if any(k.startswith("feature_extractor.backbone.") for k in keys):
        return "timet"
    if any(k.startswith("model.") and k.endswith("cls_token") for k in keys):
        return "leopart"
    if any(k.startswith(("projection_head.", "prototypes.")) for k in keys):
        return "neco"
    # the hub files always hold mask_token (loaded strict=True into a model that has one)
    if "register_tokens" in state or "mask_token" in state or any(k.endswith(".mlp.w12.weight") for k in keys):
        return "dinov2"
    return None


def detect_layout(obj: Any) -> str:
    """Name the layout of a loaded checkpoint from its keys."""
    if isinstance(obj, dict) and "teacher" in obj and isinstance(obj["teacher"], dict):
        teacher, student = obj["teacher"], obj.get("student") or {}
        keys = set(teacher) | set(student)
        if "croc_loss" in obj:  # CrOC's head has last_layer_c too
            return "croc_full"
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
        if any(k.startswith("feature_extractor.backbone.") for k in keys):
            return "timet"
        if "cls_token" in obj["model"] or any(k.startswith("decoder_") for k in keys):
            return "mae"
    if isinstance(obj, dict) and _is_state_dict(obj.get("state_dict")):
        inner = obj["state_dict"]
        if any(k.startswith("module.visual.") for k in inner):
            return "synclr"
        if any(k.startswith("visual.") for k in inner):
            return "stablerep"
        if _flat_layout(inner) == "leopart":
            return "leopart"
        return "ibot_teacher"
    if _is_state_dict(obj):
        if "masked_embed" in obj:
            return "ibot_teacher"
        if any(k.startswith("module.visual.") for k in obj):
            return "synclr"
        return _flat_layout(obj) or "dino_pretrain"
    top = sorted(obj)[:12] if isinstance(obj, dict) else type(obj).__name__
    raise CheckpointError(
        f"cannot recognise the checkpoint layout (top-level keys: {top}). Known layouts: "
        f"{', '.join(LAYOUTS)}; pass layout=... (--layout) if the file is one of them.")


def _select(obj: Any, layout: Layout, branch: str) -> tuple[dict, str | None, str, tuple[str, ...], list[str]]:
    """(state dict, container key, prefix, drop patterns, other top-level keys)."""
    if branch == "student":
        if not layout.has_student:
            raise CheckpointError(f"layout {layout.name} holds a single backbone; which='student' "
                                  f"applies to full training checkpoints only")
        containers = (layout.student_container,) if layout.student_container else layout.container
        prefix, drop = layout.student_prefix, layout.student_drop
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


def branch_state(obj: Any, layout: str, branch: str = "teacher") -> tuple[dict, str]:
    """(the state dict of one branch of a loaded checkpoint, its backbone key prefix)."""
    state, _, prefix, _, _ = _select(obj, LAYOUTS[layout], branch)
    return state, prefix


def extract_backbone(obj: Any, layout: str, branch: str = "teacher",
                     extra_drop: tuple[str, ...] = ()) -> tuple[dict[str, torch.Tensor], dict]:
    """Pull the backbone state dict out of a loaded checkpoint. Returns (state, audit info);
    ``info["branch"]`` is the branch actually read (a layout may fall back to the student)."""
    if layout not in LAYOUTS:
        raise CheckpointError(f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")
    lay = LAYOUTS[layout]
    if branch == "teacher" and lay.fallback_to_student:
        state, *_ = _select(obj, lay, branch)
        if not any(k.startswith(lay.prefix) for k in state):
            branch = "student"
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
            "dropped": dropped, "not_read": list(others), "branch": branch}
    return backbone, info


# ----------------------------------------------------------------------------- arch
_HEADS_BY_DIM = {64: 2, 192: 3, 384: 6, 768: 12, 1024: 16, 1280: 16, 1536: 24}
# What the shapes say about an architecture, beyond width / depth / patch: compared with the
# presets (a preset without the key has the default).
_SHAPE_KEYS = {"mlp_ratio": 4.0, "reg_tokens": 0, "init_values": None, "ffn_layer": "mlp", "no_embed_class": False}


def _shape_identity(kw: dict) -> tuple:
    return tuple((k, bool(kw.get(k)) if k == "init_values" else kw.get(k, d)) for k, d in _SHAPE_KEYS.items())


def detect_arch(state: dict[str, torch.Tensor], num_heads: int | None = None,
                settings: dict | None = None) -> tuple[str, dict]:
    """(arch name, arch kwargs) from tensor shapes: embed dim, depth, patch size, pos_embed
    length, MLP width, register tokens, layer scale. The head count is not visible in shapes:
    the preset's, else ``num_heads``, else the usual value for the width (head dim 64).
    ``settings``: what the layout knows besides the shapes (SwiGLU, no_embed_class, position
    interpolation); they are part of the returned kwargs."""
    settings = dict(settings or {})
    needed = ("cls_token", "pos_embed", "patch_embed.proj.weight")
    missing = [k for k in needed if k not in state]
    if missing:
        raise CheckpointError(f"cannot infer the architecture: keys {missing} are missing "
                              f"(found e.g. {sorted(state)[:6]}); the importers read ViTs. Any other model is "
                              f"evaluated as it is: --model timm:NAME,weights=FILE (a timm state dict), "
                              f"hf:FOLDER, hub:REPO_DIR:ENTRY,weights=FILE or code:FILE.py:FUNCTION "
                              f"(docs/MODELS.md)")
    dim = state["cls_token"].shape[-1]
    proj = state["patch_embed.proj.weight"]
    if proj.ndim != 4 or proj.shape[-1] != proj.shape[-2]:
        raise CheckpointError(f"patch_embed.proj.weight has shape {tuple(proj.shape)}; expected a square conv")
    patch = proj.shape[-1]
    depth = 1 + max((int(m.group(1)) for k in state if (m := re.match(r"blocks\.(\d+)\.", k))), default=-1)
    reg = state["reg_token"].shape[1] if "reg_token" in state else 0
    no_embed_class = bool(settings.get("no_embed_class", False))
    n_prefix = 0 if no_embed_class else 1 + reg
    n_grid = state["pos_embed"].shape[1] - n_prefix
    side = math.isqrt(max(n_grid, 0))
    if side * side != n_grid:
        raise CheckpointError(f"pos_embed holds {n_grid} patch positions, not a square grid")
    ffn = settings.get("ffn_layer", "mlp")
    fc1 = state.get("blocks.0.mlp.fc1.weight")
    if ffn == "swiglufused":
        if fc1 is not None and fc1.shape[0] != 2 * swiglu_hidden(dim):
            raise CheckpointError(f"SwiGLU fc1 has {fc1.shape[0]} outputs; DINOv2's fused SwiGLU of width "
                                  f"{dim} has {2 * swiglu_hidden(dim)}")
        mlp_ratio = 4.0
    else:
        mlp_ratio = fc1.shape[0] / dim if fc1 is not None else 4.0
    img_size = side * patch
    found = {"embed_dim": dim, "depth": depth, "patch_size": patch, "mlp_ratio": mlp_ratio, "reg_tokens": reg,
             "init_values": settings.get("init_values"), "ffn_layer": ffn, "no_embed_class": no_embed_class}
    for name, kw in ARCHS.items():
        if (kw["embed_dim"], kw["depth"], kw["patch_size"]) == (dim, depth, patch) and \
                _shape_identity(kw) == _shape_identity(found) and (num_heads is None or kw["num_heads"] == num_heads):
            return name, {**kw, **settings, "img_size": img_size}
    heads = num_heads or _HEADS_BY_DIM.get(dim) or max(1, dim // 64)
    kw = dict(img_size=img_size, patch_size=patch, embed_dim=dim, depth=depth, num_heads=heads)
    if mlp_ratio != 4.0:
        kw["mlp_ratio"] = mlp_ratio
    if reg:
        kw["reg_tokens"] = reg
    kw.update(settings)
    return f"vit_d{dim}_l{depth}_p{patch}", kw


def _check_arch(name: str, detected: str, kwargs: dict, source: str) -> dict:
    if name not in ARCHS:
        raise CheckpointError(f"unknown architecture {name!r}; known: {', '.join(sorted(ARCHS))}")
    want = ARCHS[name]
    diffs = [f"{k}: checkpoint {kwargs.get(k)} vs {name} {want[k]}"
             for k in ("embed_dim", "depth", "patch_size") if kwargs.get(k) != want[k]]
    diffs += [f"{k}: checkpoint {b} vs {name} {a}" for (k, a), (_, b) in
              zip(_shape_identity(want), _shape_identity(kwargs)) if a != b]
    if diffs:
        raise CheckpointError(f"{source} does not hold a {name}: {'; '.join(diffs)} "
                              f"(its shapes say {detected}). Pass the matching arch or none to auto-detect.")
    return {**want, **{k: v for k, v in kwargs.items() if k not in ("num_heads",)}}


# ----------------------------------------------------------------------------- import
def read_official(path: str | Path, layout: str | None = None, *, which: str | None = None,
                  arch: str | None = None, img_size: int | None = None, trust: bool = False,
                  extra_drop: tuple[str, ...] = (), num_heads: int | None = None,
                  ) -> tuple[dict[str, torch.Tensor], ImportReport]:
    """Read an official checkpoint and return (backbone state dict in harness names, report).

    ``layout`` None = auto-detect. ``which`` picks teacher or student in files holding both;
    None = the branch the official code evaluates (the teacher, what the papers evaluate;
    Leopart's loader reads its student). ``arch`` None = detect from shapes, else a
    mismatch is an error. ``img_size`` resizes the position embeddings to that input size
    with the family's official interpolation.
    """
    path = Path(path)
    if which not in (None, "teacher", "student"):
        raise CheckpointError(f"which must be 'teacher' or 'student', found {which!r}")
    obj, unpickled = read_file(path, trust=trust)
    stated = layout is not None
    layout = layout or detect_layout(obj)
    if layout in LAYOUTS and which is None:
        which = LAYOUTS[layout].default_branch
    state, info = extract_backbone(obj, layout, which, tuple(extra_drop))
    lay = LAYOUTS[layout]
    settings, renamed = {}, []
    if lay.adapt is not None:
        state, settings, renamed = lay.adapt(state)
    detected, kwargs = detect_arch(state, num_heads, settings)
    arch_name = detected
    if arch is not None:
        kwargs = _check_arch(arch, detected, kwargs, str(path))
        arch_name = arch
    branch = info["branch"] if lay.has_student else "backbone"
    forward = {k: v for k, v in settings.items() if k in ("pos_interp_offset", "pos_interp_antialias")}
    report = ImportReport(
        source=str(path), source_sha256=sha256_file(path), layout=layout, method=_method(lay, stated),
        branch=branch, container=info["container"], prefix=info["prefix"], arch=arch_name,
        arch_kwargs=kwargs, loaded=len(state), dropped=info["dropped"], not_read=info["not_read"],
        unpickled=unpickled, renamed=renamed, forward=forward)
    if img_size is not None and img_size != kwargs["img_size"]:
        state = dict(state)
        # the trained table is kept beside the resized one: a later run at a third size resizes
        # from it (once, as the official model does), not from the table resized here
        state["pos_embed_native"] = state["pos_embed"]
        state["pos_embed"], report.pos_embed = _resize_pos_embed(state, arch_name, kwargs, img_size)
        kwargs["native_img_size"], kwargs["img_size"] = kwargs["img_size"], img_size
    state = {k: v.float().contiguous() if v.is_floating_point() else v for k, v in state.items()}
    return state, report


def _method(layout: Layout, stated: bool) -> str:
    """The method a file's layout attributes it to. A flat ViT state dict that no key marks as
    a family's (DINO's release, but also any timm ViT, anyone's fine-tune) is detected as
    ``dino_pretrain`` only because it loads the same way: unless the layout was named, its
    method is ``unknown``."""
    if layout.name == "dino_pretrain" and not stated:
        return "unknown"
    return layout.method


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
    return new, (f"resized {g0}x{g0} -> {g1}x{g1} (official bicubic interpolation); the {g0}x{g0} table "
                 f"is kept for other sizes")


def _build(arch: str, kwargs: dict) -> ViTBackbone:
    from harness.models.backbone import create_backbone

    return create_backbone(arch, **{k: v for k, v in kwargs.items() if k in ARCH_KEYS})


def import_checkpoint(path: str | Path, out: str | Path | None = None, *, layout: str | None = None,
                      which: str | None = None, arch: str | None = None, img_size: int | None = None,
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
