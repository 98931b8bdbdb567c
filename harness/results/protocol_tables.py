"""A run's leaderboard split into one table per (protocol, dataset, split): the columns, their order
(headline metric first) and their headers; read by the leaderboard's views and the overview."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable

from harness.protocol_info import headline_metric, variant_text
from harness.results.run_table import RunTable, run_table
from harness.results.table import SHORT_FP


@dataclass
class ProtocolTable:
    """The columns of one (protocol, dataset, split): headline metric first, then the others."""

    protocol: str
    dataset: str
    split: str
    headline: str | None  # the headline metric's name
    columns: list[tuple]  # column keys (protocol, dataset, split, variant, metric, fingerprint)
    headers: dict[tuple, str]  # column key -> readable header ("top1 k=20 cls")

    @property
    def title(self) -> str:
        return f"{self.dataset}/{self.split}" if self.split else self.dataset

    def is_headline(self, col: tuple) -> bool:
        return col[4] == self.headline


def protocol_tables(df: RunTable | Iterable[dict], headline_only: bool = False) -> list[ProtocolTable]:
    """The leaderboard split into one table per (protocol, dataset, split), in table order.
    Headers read metric then variant as the protocol declares it (its ``variant_labels``), with the
    short fingerprint where one (protocol, dataset, split, variant, metric) has several.
    ``headline_only``: the headline metric's columns alone, and of a sweep that also reports its
    best (``lr=<value>`` and ``lr=best``) the best alone (the console's view)."""
    t = run_table(df)
    groups: dict[tuple, list[tuple]] = defaultdict(list)
    for c in t.keys:
        groups[c[:3]].append(c)
    tables = []
    for (protocol, dataset, split), keys in groups.items():
        headline = headline_metric(protocol, dict.fromkeys(c[4] for c in keys))
        metric_order = {m: i for i, m in enumerate(dict.fromkeys(c[4] for c in keys))}
        keys = sorted(keys, key=lambda c: (c[4] != headline, metric_order[c[4]]))  # stable: variants keep order
        if headline_only:
            keys = [c for c in keys if c[4] == headline]
            best = {(c[4], c[5]) for c in keys if t.variants[c].get("lr") == "best"}
            keys = [c for c in keys if (c[4], c[5]) not in best or t.variants[c].get("lr") in (None, "best")]
        headers = {}
        for c in keys:
            metric = c[4] if t.metric(c).higher_is_better else f"{c[4]} ↓"  # the arrow only where lower is better
            text = " ".join(x for x in (metric, variant_text(protocol, t.variants[c])) if x)
            headers[c] = f"{text} @{c[5][:SHORT_FP]}" if c[:5] in t.conflicted else text
        tables.append(ProtocolTable(protocol, dataset, split, headline, keys, headers))
    return tables
