"""`ssl-bench show PROTOCOL --model SPEC`: a few of a protocol's examples on a model (the input
as the model saw it, the target, the prediction) drawn into the report's folder, listed in
``show/index.json`` there, which the report links. A newcomer sees what a probe does before
reading its numbers."""
from __future__ import annotations

import re
import time
from pathlib import Path

from harness.io_utils import atomic_write_json
from harness.models.handle import ModelHandle
from harness.protocol import Protocol
from harness.results.panels import INDEX, SHOW_DIR, draw_examples, read_index


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "x"


def show_examples(protocol: Protocol, model: ModelHandle, data_root: Path, out_dir: Path, *, preset: str | None,
                  count: int = 4, seed: int = 0) -> Path:
    """Draw ``count`` examples (drawn with ``seed``) of ``protocol`` on ``model`` into
    ``out_dir/show/`` and list them in its index (one entry per protocol, preset and model)."""
    examples = protocol.examples(model, Path(data_root), count, seed)
    name = f"{_slug(protocol.registry_name)}-{_slug(preset or 'default')}-{_slug(model.name)}.png"
    folder = Path(out_dir) / SHOW_DIR
    title = f"{protocol.registry_name} ({preset or 'default'}) on {model.name}: {len(examples)} examples, seed {seed}"
    png = draw_examples(examples, folder / name, title)
    entry = {"protocol": protocol.registry_name, "preset": preset, "model": model.name,
             "weights_key": model.cache_key, "data_root": str(Path(data_root).resolve()), "seed": seed,
             "count": len(examples), "png": f"{SHOW_DIR}/{name}", "title": title,
             "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
    kept = [e for e in read_index(out_dir) if e["png"] != entry["png"]]
    atomic_write_json(folder / INDEX, kept + [entry])
    return png
