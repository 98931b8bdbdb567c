"""Running work: suites, evaluation of a model by a protocol, feature extraction, devices, processes and launchers."""
