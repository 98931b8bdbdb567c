"""Running work: suites and paper tables (one runner), evaluation of a model by a protocol, feature
extraction and caching, launchers."""
