"""The HTML report without a browser: self-contained, headline metric from the protocol class,
best value, delta to random init, curves, provenance, paper verdicts, the CLI. (The page in
Chromium: tests/test_report_browser.py.)"""
from __future__ import annotations

import base64
import re
from html.parser import HTMLParser

import pytest

from harness.cli import main
from harness.protocol_info import headline_metric
from harness.paper.verdict import paper_cells
from harness.results.report import build_report
from harness.results.records import write_record
from report_records import BASE, all_records, paper_records, suite_records
from test_results_api import OLD_RECORD


class Tables(HTMLParser):
    """table id -> rows (one per tbody.item main row) of (text, class) cells."""

    def __init__(self):
        super().__init__()
        self.tables, self.table, self.row, self.cell, self.depth = {}, None, None, None, 0
        self.in_prov = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and a.get("id"):
            self.table = self.tables.setdefault(a["id"], [])
        elif tag == "tr" and self.table is not None:
            self.in_prov = "prov" in (a.get("class") or "")
            if not self.in_prov and "fp" not in (a.get("class") or ""):
                self.row = []
        elif tag == "td" and self.row is not None and not self.in_prov:
            self.cell = [a.get("class") or "", ""]

    def handle_endtag(self, tag):
        if tag == "td" and self.cell is not None:
            self.row.append((self.cell[1].strip(), self.cell[0]))
            self.cell = None
        elif tag == "tr" and self.row is not None and not self.in_prov:
            if self.row:
                self.table.append(self.row)
            self.row = None
        elif tag == "table":
            self.table = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell[1] += data


@pytest.fixture(scope="module")
def page() -> str:
    return build_report(all_records() + [OLD_RECORD], generated="2026-01-01T00:00:00+00:00")


def _table(page: str, table_id: str) -> list[list[tuple[str, str]]]:
    p = Tables()
    p.feed(page)
    return p.tables[table_id]


def _rows(page: str, table_id: str) -> dict[str, list[tuple[str, str]]]:
    """Rows by model (the first cell, without the provenance button's +)."""
    return {r[0][0].lstrip("+ ").strip(): r for r in _table(page, table_id)}


def test_self_contained(page):
    assert "<script src" not in page and "<link" not in page
    refs = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert refs and all(r.startswith(("data:",
                                      "#")) for r in refs), [r[:40] for r in refs if not r.startswith(("data:", "#"))]
    assert "http://" not in page and "https://" not in page
    assert "default-src 'none'" in page  # the CSP forbids requests even if something slipped in


def test_protocol_sections_best_and_delta(page):
    assert 'id="protocol-dense_nn"' in page and 'id="protocol-knn"' in page
    assert "headline metric <b>mIoU</b> (declared by the protocol" in page
    assert "headline metric <b>top1</b> (declared by the protocol" in page
    dense = _rows(page, "t-0-0")
    assert set(dense) == {"dino", "ibot", "random_init"}
    # ibot is best in every column, dino's 1/8 cell: 20.50 ± 0.50 (n=3), +15.00 over random init
    assert all("best" in cls for _, cls in dense["ibot"][3:])
    assert not any("best" in cls for _, cls in dense["dino"][3:] + dense["random_init"][3:])
    text = dense["dino"][3][0]
    assert text.startswith("20.50 ± 0.50 (n=3)") and "+15.00 vs random init" in text
    assert BASE["dino"] + 0.5 - (BASE["random_init"] + 0.5) == 15.0
    assert "baseline" in dense["random_init"][3][0]


def test_curves_are_embedded_svgs(page):
    uris = re.findall(r'<img class="plot" alt="([^"]*)" src="data:image/svg\+xml;base64,([^"]+)"', page)
    alts = [a for a, _ in uris]
    assert any("mIoU vs fraction" in a for a in alts)
    assert not any("top1 vs k" in a for a in alts)  # k = 10 and 20: two points are no curve (the table has them)
    for _, b64 in uris:
        svg = base64.b64decode(b64).decode()
        assert "<svg" in svg and "</svg>" in svg
    fraction_svg = base64.b64decode(next(b for a, b in uris if "fraction" in a)).decode()
    assert "1/8" in fraction_svg and "random_init" in fraction_svg  # x ticks as fractions, a line per model


def test_provenance_panel(page):
    m = re.search(r'<tbody class="item" data-text="dino dino vit_cpu_tiny">(.*?)</tbody>', page, re.S)
    assert m, "no dino row"
    panel = m.group(1)
    for what in ("/ckpt/dino/backbone.safetensors", "sha256", "git commit", "protocol preset", "synth",
                 "fingerprint", "device", "cpu", "date", "records (9)"):
        assert what in panel, what


def test_paper_section_verdicts(page):
    by_zoo = {}
    for r in _table(page, "paper-table"):  # a zoo's first cell: the ImageNet tables come before Table 12's subsets
        by_zoo.setdefault(r[3][0], r)
    assert set(by_zoo) == {"dino_vits16", "dino_vits8", "ibot_vits16"}
    assert by_zoo["dino_vits16"][-1] == ("ok (|delta| <= 0.3)", "verdict text ok")
    assert by_zoo["dino_vits16"][10][0] == "-0.10"
    assert by_zoo["dino_vits8"][-1][1] == "verdict text differs" and by_zoo["dino_vits8"][10][0] == "-8.30"
    assert by_zoo["ibot_vits16"][-1][0] == "other settings"  # records of other knn settings are refused


def test_paper_cells_refuse_other_fingerprints():
    cells = paper_cells("ibot-imagenet", paper_records())
    cell = cells[(cells["zoo_name"] == "ibot_vits16") & (cells["protocol"] == "knn")].iloc[0]
    assert cell["verdict"] == "other settings" and cell["n"] == 0
    assert "@c3c3c3c3" in cell["note"] and "not comparable" in cell["note"]


def test_headline_metric_comes_from_the_protocol_declaration(monkeypatch):
    import dataclasses

    import harness.registry as registry
    from harness.protocol_info import protocol_declaration

    assert headline_metric("knn", ["top5", "top1"]) == "top1"
    assert headline_metric("dense_nn", ["pixel_accuracy", "mIoU"]) == "mIoU"
    assert headline_metric("not_registered", ["b", "a"]) == "a"  # first by name
    # a built-in protocol's is read from its folder's declaration.py, without importing the protocol
    declared = dict(registry.protocol_declarations())
    declared["knn"] = dataclasses.replace(declared["knn"], headline="top5")
    monkeypatch.setattr(registry, "_DECLARATIONS", declared)
    protocol_declaration.cache_clear()
    try:
        assert headline_metric("knn", ["top5", "top1"]) == "top5"
    finally:
        monkeypatch.undo()
        protocol_declaration.cache_clear()


def test_cli_report(tmp_path, capsys):
    runs = tmp_path / "runs"
    for r in suite_records() + [OLD_RECORD]:
        write_record(r, runs)
    out = tmp_path / "page.html"
    assert main(["report", "--runs", str(runs), "--out", str(out), "--paper", "none", "--title", "T"]) == 0
    html = out.read_text()
    assert "<title>T</title>" in html and 'id="paper"' not in html and "dino-old" in html
    assert "report:" in capsys.readouterr().out
    assert main(["report", "--runs", str(tmp_path / "empty"), "--out", str(out)]) == 1
