"""upernet: UperNet fine-tuning on ADE20K (iBOT Table 6, SynCLR Table 7), a protocol of ssl-bench. The
folder holds everything it is: declaration.py (what it reports), protocol.py (how), presets/ (its
recipes), README.md (its documentation) and tests/. Keep this file free of imports: the registry
reads declaration.py without importing torch."""
