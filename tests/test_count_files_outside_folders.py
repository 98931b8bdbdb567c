"""scripts/count_files_outside_folders.py: which protocol family a file outside benchmarks/ names
(by a path token, the longest name first, or by its folder in the text), and the per-folder count."""
from scripts.count_files_outside_folders import count, families, families_named

DECLARED = {"linear": "plugins_of.cls.linear_probe", "knn": "benchmarks.cls.knn",
            "seg_linear": "benchmarks.seg.seg_linear", "nnq": "benchmarks.nnq.protocol"}


def test_families_come_from_the_declarations_of_benchmarks_only():
    assert families(DECLARED) == {"cls": {"cls", "knn"}, "seg": {"seg", "seg_linear"},
                                  "nnq": {"nnq"}}


def test_a_file_names_a_family_by_a_whole_path_token_or_its_folder_in_the_text():
    fams = families({**DECLARED, "linear": "benchmarks.cls.linear_probe"})
    assert families_named("configs/protocols/seg_linear_paper.yaml", "", fams) == {"seg"}  # longest name
    assert families_named("tests/test_linear_probe.py", "", fams) == {"cls"}
    assert families_named("tests/test_knnish.py", "", fams) == set()  # not a whole token
    assert families_named("docs/x.md", "see benchmarks/nnq/index.py and benchmarks.seg.x", fams) == {
        "nnq", "seg"}
    assert families_named("docs/x.md", "benchmarks.nnq_extra", fams) == set()


def test_count_keeps_files_naming_one_family_and_counts_the_folders_own(tmp_path):
    fams = families({**DECLARED, "linear": "benchmarks.cls.linear_probe"})
    files = {"benchmarks/cls/knn.py": "", "benchmarks/cls/declaration.py": "", "tests/test_knn.py": "",
             "tests/fixtures/knn_golden.json": "{}", "configs/protocols/linear_dino.yaml": "",
             "docs/both.md": "benchmarks/cls and benchmarks/seg", "harness/probes/linear_grid.py": "",
             "scripts/tool.py": "import benchmarks.nnq.protocol"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    outside, extra = count(sorted(files), fams, tmp_path)
    assert dict(outside["cls"]) == {"tests": 1, "fixtures": 1, "configs": 1}
    assert dict(outside["nnq"]) == {"scripts": 1} and not outside["seg"]
    assert extra["inside"]["cls"] == 2
