"""`ssl-bench show`: a protocol's examples (input as the model saw it, target, prediction)
drawn into the report's folder and listed in its index."""
from __future__ import annotations

import numpy as np
import pytest

from harness.errors import NotApplicable
from harness.examples import Panel, chosen_items, seen_by_model
from harness.models.handle import ModelHandle
from harness.protocol_info import build_protocol
from harness.running.show import read_index, show_examples


@pytest.fixture(scope="module")
def tiny_vit():
    return ModelHandle.random_init("vit_cpu_tiny", seed=0, name="random_s0")


def test_knn_examples_show_the_input_its_class_the_vote_and_the_neighbours(synth_tiny, tiny_vit, isolated_home):
    protocol = build_protocol("knn", "synth", {"dataset": "imagefolder", "ks": [5], "progress": False})
    examples = protocol.examples(tiny_vit, synth_tiny / "imagenet", count=3, seed=1)
    assert len(examples) == 3
    for e in examples:
        kinds = [p.kind for p in e.panels]
        assert kinds == ["rgb", "text", "text", "rgb", "rgb", "rgb"]
        assert e.panels[0].image.shape == (64, 64, 3) and e.panels[0].image.dtype == np.uint8
        assert e.correct == (e.panels[1].text == e.panels[2].text)
    again = protocol.examples(tiny_vit, synth_tiny / "imagenet", count=3, seed=1)
    assert [e.title for e in again] == [e.title for e in examples]  # the seed chooses the items


def test_dense_nn_examples_show_mask_and_prediction_at_the_features_geometry(synth_tiny, tiny_vit, isolated_home):
    protocol = build_protocol("dense_nn", "hbird_synth", {"dataset": "voc", "progress": False})
    examples = protocol.examples(tiny_vit, synth_tiny, count=2, seed=0)
    for e in examples:
        seen, target, prediction = e.panels
        assert seen.image.shape[:2] == target.image.shape == prediction.image.shape
        assert "pixel acc" in prediction.text


def test_show_draws_into_the_report_folder_and_lists_each_drawing_once(synth_tiny, tiny_vit, tmp_path,
                                                                       isolated_home):
    protocol = build_protocol("knn", "synth", {"dataset": "imagefolder", "ks": [5], "progress": False})
    for _ in range(2):
        png = show_examples(protocol, tiny_vit, synth_tiny / "imagenet", tmp_path, preset="synth", count=2)
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (entry,) = read_index(tmp_path)
    assert entry["protocol"] == "knn" and entry["model"] == "random_s0" and entry["png"] == f"show/{png.name}"
    assert entry["weights_key"] == tiny_vit.cache_key


def test_a_protocol_without_examples_says_so(tiny_vit, tmp_path):
    protocol = build_protocol("linear", "synth", {"dataset": "imagefolder"})
    with pytest.raises(NotApplicable, match="draws no examples"):
        protocol.examples(tiny_vit, tmp_path)


def test_panels_are_checked_and_images_undo_only_the_normalisation():
    import torch

    with pytest.raises(ValueError, match="needs an image"):
        Panel("x", kind="labels")
    with pytest.raises(ValueError, match=r"\(H, W, 3\)"):
        Panel("x", image=np.zeros((4, 4), np.uint8))
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.5)
    x = torch.full((3, 2, 2), 1.0)
    got = seen_by_model(x, mean, std)
    assert got.shape == (2, 2, 3) and tuple(got[0, 0]) == (179, 166, 204)
    assert chosen_items(10, 3, 0) == chosen_items(10, 3, 0) and len(set(chosen_items(10, 20, 0))) == 10


def test_the_show_command_draws_or_says_in_one_line_why_not(synth_tiny, tmp_path, isolated_home, capsys):
    from harness.cli import main

    base = ["show", "knn", "--preset", "synth", "--dataset", "imagefolder", "--data-root", str(synth_tiny / "imagenet"),
            "--random-init", "vit_cpu_tiny", "--out", str(tmp_path / "report"), "--count", "2"]
    assert main(base) == 0
    assert "show:" in capsys.readouterr().out and len(read_index(tmp_path / "report")) == 1
    assert main([*base[:1], "linear", *base[2:]]) == 2
    assert "draws no examples" in capsys.readouterr().err
    assert main([*base, "--set", "crop=60"]) == 2
    assert "not a multiple of the stride" in capsys.readouterr().err


def test_the_report_inlines_what_show_drew_beside_it(synth_tiny, tiny_vit, tmp_path, isolated_home):
    from harness.results.report import write_report
    from report_records import suite_records

    protocol = build_protocol("knn", "synth", {"dataset": "imagefolder", "ks": [5], "progress": False})
    show_examples(protocol, tiny_vit, synth_tiny / "imagenet", tmp_path, preset="synth", count=2)
    html = write_report(tmp_path / "report.html", suite_records(), paper_tables=[]).read_text()
    assert 'id="examples"' in html and 'href="#examples"' in html
    assert "data:image/png;base64," in html and "show/knn-synth-random_s0.png" in html
    bare = write_report(tmp_path / "elsewhere" / "report.html", suite_records(), paper_tables=[]).read_text()
    assert 'id="examples"' not in bare  # no drawings beside that report


def test_lines_over_a_panel_are_checked_and_drawn(tmp_path):
    from harness.examples import Example
    from harness.results.panels import draw_examples

    canvas = np.zeros((8, 16, 3), np.uint8)
    with pytest.raises(ValueError, match="2 line_ok flags for 1 lines"):
        Panel("matches", image=canvas, lines=[[0, 0, 8, 4]], line_ok=np.array([True, False]))
    with pytest.raises(ValueError, match="no image to draw lines on"):
        Panel("caption", kind="text", text="x", lines=[[0, 0, 1, 1]])
    panel = Panel("matches", image=canvas, lines=[[1, 1, 9, 2], [2, 5, 12, 6]], line_ok=np.array([True, False]))
    assert panel.lines.shape == (2, 4)
    plain = draw_examples([Example("pair", [Panel("matches", image=canvas)])], tmp_path / "plain.png", "t")
    drawn = draw_examples([Example("pair", [panel])], tmp_path / "lines.png", "t")
    assert drawn.read_bytes() != plain.read_bytes()
