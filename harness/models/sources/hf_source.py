"""`hf:FOLDER`: a transformers vision model from a local folder, its adapter beside it (hf_adapter.py)."""
from __future__ import annotations

from pathlib import Path


from harness.errors import CheckpointError
from harness.models.feature_backbone import InputNorm
from harness.models.handle import ModelHandle
from harness.registry import register_model_source
from harness.models.sources.common import (BuildContext, ModelSpec, NORM_OPTIONS, Options, adapted_handle, existing,
                                           listed, one_line, require_target, stated_norm)


# normalisations of model families whose folders may come without a preprocessor_config.json
# (CLIP: OpenAI's mean/std; SigLIP: 0.5/0.5, as its image processor states)
HF_FAMILY_NORMS = {"clip": "clip", "clip_vision_model": "clip", "siglip": "inception",
                   "siglip_vision_model": "inception"}


@register_model_source("hf")
def hf_source(spec: ModelSpec, ctx: BuildContext) -> ModelHandle:
    """A transformers vision model saved in a local folder (config.json + weights). Its
    normalisation: the one stated (``norm=``, ``mean=``/``std=``), else the folder's
    preprocessor_config.json, else its family's (CLIP, SigLIP), else ImageNet's; the record says
    which. CLIP and SigLIP folders load as their vision tower."""
    from harness.models.sources.hf_adapter import HFBackbone

    opts = Options(spec)
    folder = existing(require_target(spec, "folder"), "transformers model folder")
    stated = stated_norm(opts)
    opts.done(NORM_OPTIONS)
    try:
        import transformers
    except ImportError:
        from harness.errors import MissingDependencyError

        raise MissingDependencyError("the hf model source needs transformers: pip install 'ssl-bench[hf]'") from None
    if not folder.is_dir() or not (folder / "config.json").is_file():
        raise CheckpointError(f"{folder}: no config.json (a transformers model folder holds config.json and "
                              f"model.safetensors, as save_pretrained writes them)")
    if not any((folder / f).is_file() for f in ("model.safetensors", "pytorch_model.bin",
                                                  "model.safetensors.index.json")):
        raise CheckpointError(f"{folder}: no weights (model.safetensors or pytorch_model.bin); ssl-bench never "
                              f"downloads them and never evaluates random weights in their place")
    kind, model, info = _hf_load(transformers, folder)
    # a weight the folder lacks would stay at its random initialisation: refused, never used
    missing = list(info.get("missing_keys") or []) + [str(k) for k in info.get("mismatched_keys") or []]
    if missing:
        raise CheckpointError(f"{folder}: the weights do not fit {type(model).__name__}: missing or mismatched "
                              f"{listed(missing, 8)}; save the folder again with save_pretrained")
    unused = sorted(info.get("unexpected_keys") or [])
    norm, why = stated or _folder_norm(folder, kind)
    meta = {"checkpoint": str(folder), "weights_from": "folder", "dropped_keys": len(unused)}
    return adapted_handle(HFBackbone(model, folder.name, norm, why), spec, f"hf-{folder.name}", meta)


def _hf_load(transformers, folder: Path):
    """(model_type, model, loading info) of a folder, quietly; a folder transformers cannot read
    is one error line."""
    hf_logging = transformers.utils.logging
    hf_logging.disable_progress_bar()  # one line per model, as the other sources
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # a CLIP folder's text tower is counted, not printed as a table
    try:
        kind = getattr(transformers.AutoConfig.from_pretrained(folder, local_files_only=True), "model_type", "")
        cls = {"clip": transformers.CLIPVisionModel, "siglip": transformers.SiglipVisionModel}.get(
            kind, transformers.AutoModel)
        model, info = cls.from_pretrained(folder, local_files_only=True, output_loading_info=True)
    except Exception as exc:  # noqa: BLE001 - transformers raises OSError, ValueError, KeyError, ... for a bad folder
        raise CheckpointError(f"{folder}: transformers cannot load this folder ({one_line(exc, 200)}); "
                              f"save it again with save_pretrained") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    return kind, model, info


def _folder_norm(folder: Path, kind: str) -> tuple[InputNorm, str]:
    from harness.models.feature_backbone import NAMED_NORMS

    pre = folder / "preprocessor_config.json"
    if pre.is_file():
        import json

        try:
            pcfg = json.loads(pre.read_text())
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{pre}: not readable JSON ({one_line(exc)}); fix or remove it") from None
        if pcfg.get("image_mean") is not None and pcfg.get("image_std") is not None:
            return InputNorm(pcfg["image_mean"], pcfg["image_std"]), "folder preprocessor_config.json"
    if kind in HF_FAMILY_NORMS:
        return InputNorm(*NAMED_NORMS[HF_FAMILY_NORMS[kind]]), f"family {kind.removesuffix('_vision_model')}"
    return InputNorm(), "default imagenet"
