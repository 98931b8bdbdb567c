"""End-to-end fine-tuning with a linear head (iBOT's / BEiT's run_class_finetuning.py): declaration.py
(what it reports), config.py, model.py, step.py, train.py, data.py, resume.py, checkpoint.py (how),
presets/ (its recipes), README.md (its page), RECIPES.md and PARITY.md, tests/. Keep this file free of
imports: the registry reads declaration.py without importing torch."""
