"""Speed and learning experiments behind docs/BENCHMARKS.md; not part of the library.

Run each from the repository root as a module, e.g. ``python -m experiments.pretrain_step_bench``."""
