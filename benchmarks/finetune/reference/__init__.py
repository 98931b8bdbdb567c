"""Reference numbers from iBOT's official fine-tuning code: the generator that runs it from a
checkout outside this repository, and the reader of what it wrote (benchmarks/finetune/fixtures/)."""
