"""A protocol family's files live in its folder (benchmarks/<folder>/): a tracked file outside it
that names only that family -- by a path token, by the folder as a module or a path in its text,
or a paper table spec whose protocols are all the family's -- is reported, wherever it sits
(tests, fixtures, configs, docs, scripts). The rule is scripts/count_files_outside_folders.py's.
ALLOWED lists the exceptions, each with its reason; it starts empty."""
from __future__ import annotations

from scripts.count_files_outside_folders import count, families, strays, tracked_files

# the families whose files have their folder; the others follow as they are given theirs
ENFORCED = ("classification", "dense_nn", "detection", "logreg", "robustness", "transfer", "unsup_cls")
ALLOWED: dict[str, str] = {}  # path -> why it stays outside its family's folder


def _families() -> dict[str, set[str]]:
    from harness.registry import protocol_declarations  # torch-free: the declarations only

    return families({name: d.module for name, d in protocol_declarations().items()})


def test_no_file_outside_a_protocol_folder_belongs_to_its_family_alone():
    fams = _families()
    assert set(ENFORCED) <= set(fams), f"not protocol folders: {sorted(set(ENFORCED) - set(fams))}"
    _, extra = count(tracked_files(), fams)
    found = {f: paths for f, paths in strays(extra["listed"], ENFORCED, ALLOWED).items() if paths}
    assert not found, ("files that belong to one protocol family alone, outside its folder: move each into "
                       f"benchmarks/<folder>/ (presets/, tests/, fixtures/, reference/, paper/, README.md): {found}")


def test_a_stray_file_is_reported_and_an_allowed_or_shared_one_is_not(tmp_path):
    fams = families({"knn": "benchmarks.cls.knn", "seg_linear": "benchmarks.seg.seg_linear"})
    files = {"benchmarks/cls/knn.py": "", "tests/test_knn.py": "", "docs/guide.md": "see benchmarks/cls/README.md",
             "configs/paper/t.yaml": "protocols:\n  knn: {}\n",
             "configs/paper/both.yaml": "protocols: {knn: 1, seg_linear: 1}",
             "scripts/tool.py": "import benchmarks.seg.seg_linear", "experiments/knn_bench.py": "",
             "tests/experiments/test_knn_bench.py": "",
             "docs/both.md": "benchmarks/cls and benchmarks/seg"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    _, extra = count(sorted(files), fams, tmp_path)
    # a link to the folder's README is a reference; experiments/ (and their tests) are not a folder's to own
    assert strays(extra["listed"], ["cls", "seg"]) == {"cls": ["configs/paper/t.yaml", "tests/test_knn.py"],
                                                       "seg": ["scripts/tool.py"]}
    assert strays(extra["listed"], ["cls"], allowed=["tests/test_knn.py"]) == {"cls": ["configs/paper/t.yaml"]}
