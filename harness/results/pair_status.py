"""What became of each (model, protocol) pair of a run: measured, reused, not applicable, or
failed with its one error line. A suite keeps going past a failing pair; these say so in the
console, leaderboard.md, the report and ``pairs.json`` beside the leaderboard."""
from __future__ import annotations

import html
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.io_utils import atomic_write_text

MEASURED, CACHED, NOT_APPLICABLE, FAILED = "measured", "cached", "not applicable", "failed"
NO_VALUE = "no value"  # a measured pair with a metric that has none (its record says why)
FLAGGED = "flagged"  # a measured pair whose numbers say little (its record's flags say why)
STATES = (MEASURED, CACHED, NOT_APPLICABLE, FAILED, NO_VALUE, FLAGGED)


@dataclass
class PairStatus:
    model: str
    protocol: str
    preset: str | None
    state: str  # one of STATES
    reason: str = ""  # the error line (failed) or why the protocol cannot measure the model
    refused: bool = False  # failed with one of ssl-bench's own errors: a refusal that says what to set

    @property
    def label(self) -> str:
        return pair_label(self.protocol, self.preset, self.model)

    def line(self) -> str:
        return f"{self.label}: {self.reason}" if self.reason else f"{self.label}: {self.state}"


def pair_label(protocol: str, preset: str | None, model: str) -> str:
    """How a run names a pair: ``robustness/synth on vit``, ``knn on r18`` (no preset)."""
    return f"{protocol}{'/' + preset if preset else ''} on {model}"


def one_line(exc: BaseException) -> str:
    """An exception as one line: its message's first line, the type named when it is not one of
    ssl-bench's own (those already say what is wrong and what to do)."""
    from harness.errors import SslBenchError

    text = (str(exc).strip().splitlines() or [""])[0]
    if isinstance(exc, SslBenchError):
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def not_run(pairs: list[PairStatus]) -> list[PairStatus]:
    """The pairs (and parts of pairs) that gave no number, failed ones first."""
    return sorted((p for p in pairs if p.state in (FAILED, NOT_APPLICABLE, NO_VALUE, FLAGGED)),
                  key=lambda p: p.state != FAILED)


def undefined_parts(records: list[dict]) -> list[PairStatus]:
    """A row per metric a record holds as null (its ``metrics_undefined`` reason): a part of a
    pair that does not apply to the model ("not applicable: ...", e.g. occlusion without
    attention) or a number that is undefined on the data (an empty bin); and a row per flag the
    records of a pair carry (a feature grid below the protocol's minimum)."""
    return parts_of([part for rec in records for part in record_parts(rec)])


def record_parts(rec: dict) -> list[tuple]:
    """One record's parts without a number, as (model, protocol, preset, state, reason) tuples: its
    null metrics (state ``NOT_APPLICABLE`` or ``NO_VALUE``), then its flags (``FLAGGED``); what a
    records folder's index keeps of it (harness.results.index), read back by :func:`parts_of`."""
    from harness.variants import variant_label

    proto = rec.get("protocol") or {}
    return _parts(rec["model"]["name"], proto.get("name", "?"), proto.get("preset"),
                  variant_label(rec.get("variant") or {}), rec.get("metrics_undefined"), rec.get("flags"))


def _parts(model, name, preset, variant: str, undefined: dict | None, flags: list | None) -> list[tuple]:
    out = []
    for metric, reason in (undefined or {}).items():
        state = NOT_APPLICABLE if str(reason).startswith("not applicable") else NO_VALUE
        text = str(reason).removeprefix("not applicable: ")
        out.append((model, name, preset, state, f"{variant + ' ' if variant else ''}{metric}: {text}"))
    return out + [(model, name, preset, FLAGGED, flag) for flag in flags or []]


def frame_parts(df) -> list[tuple]:
    """:func:`record_parts` of each record of a harness.results.records.load_results() frame,
    read off its columns (``rec.metrics_undefined``, ``rec.flags``), in its rows' order."""
    import pandas as pd

    raw = [c for c in ("rec.metrics_undefined", "rec.flags") if c in df.columns]
    if not raw or not len(df):
        return []
    def none(v) -> bool:
        return v is None or v is pd.NA

    seen, out = set(), []
    cols = ("record_id", "model", "protocol", "preset", "variant", *raw)
    for rid, model, name, preset, variant, *extra in zip(*(df[c].astype(object).tolist() for c in cols)):
        if rid in seen:
            continue
        seen.add(rid)
        got = dict(zip(raw, extra))
        undefined, flags = (got.get(c) for c in ("rec.metrics_undefined", "rec.flags"))
        out += _parts(model, "?" if none(name) else name, None if none(preset) else preset,
                      "" if none(variant) else variant, None if none(undefined) else undefined,
                      None if none(flags) else flags)
    return out


def parts_of(parts: list[tuple]) -> list[PairStatus]:
    """The PairStatus rows of records' parts (:func:`record_parts`, in record order): each null
    metric, then each distinct (model, protocol, preset, flag) once, sorted."""
    flagged = {(m, p, preset, flag) for m, p, preset, state, flag in parts if state == FLAGGED}
    return ([PairStatus(m, p, preset, state, reason) for m, p, preset, state, reason in parts if state != FLAGGED]
            + [PairStatus(m, p, preset, FLAGGED, flag) for m, p, preset, flag in sorted(flagged, key=str)])


def console_block(pairs: list[PairStatus]) -> str:
    """Plain text: one line per pair that gave no number (empty when every pair ran)."""
    rows = not_run(pairs)
    if not rows:
        return ""
    lines = (f"  {p.state.upper() if p.state == FAILED else p.state}: {p.line()}" for p in rows)
    return "pairs without a number, or flagged:\n" + "\n".join(lines)


def _md(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_section(pairs: list[PairStatus]) -> str:
    rows = not_run(pairs)
    if not rows:
        return ""
    out = ["## Pairs without a number, or flagged", "",
           "A failed pair stopped with the error shown; a pair that is not applicable is one the protocol "
           "cannot measure (the reason says why); a flagged pair has numbers that say little (the flag says "
           "why). The run goes on past all of them; a failed pair makes its exit status non-zero.", "",
           "| model | protocol | preset | state | reason |", "|---|---|---|---|---|"]
    out += [f"| {_md(p.model)} | {_md(p.protocol)} | {_md(p.preset or '-')} | {p.state} | {_md(p.reason)} |"
            for p in rows]
    return "\n".join(out) + "\n"


def html_section(pairs: list[PairStatus]) -> str:
    rows = not_run(pairs)
    if not rows:
        return ""
    esc = html.escape
    body = "".join(f"<tr><td>{esc(p.model)}</td><td>{esc(p.protocol)}</td><td>{esc(p.preset or '-')}</td>"
                   f'<td class="{"fail" if p.state == FAILED else ""}">{esc(p.state)}</td><td>{esc(p.reason)}</td></tr>'
                   for p in rows)
    return ('<section id="pairs"><h2>Pairs without a number, or flagged</h2><p class="note">Failed pairs '
            "stopped with the error shown; pairs that are not applicable are ones the protocol cannot measure; "
            "flagged pairs have numbers that say little.</p>"
            "<table><tr><th>model</th><th>protocol</th><th>preset</th><th>state</th><th>reason</th></tr>"
            f"{body}</table></section>")


def write_pairs(path: Path, pairs: list[PairStatus]) -> Path:
    """Every pair of the run, as JSON (strict: no NaN)."""
    return atomic_write_text(path, json.dumps([asdict(p) for p in pairs], indent=1, allow_nan=False) + "\n")


def read_pairs(path: Path) -> list[PairStatus]:
    """The pairs a run wrote beside its leaderboard; [] where there is no such file."""
    if not Path(path).is_file():
        return []
    return [PairStatus(**row) for row in json.loads(Path(path).read_text())]
