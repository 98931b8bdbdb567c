"""The generator of fixtures/davis_parity.json from DINO's eval_video_segmentation.py and
davis2017-evaluation (run from checkouts kept outside this repository:
``python benchmarks/davis/reference/gen_davis_parity.py --official DIR``), and the clip and metric
cases it shares with tests/test_davis.py (davis_common.py)."""
