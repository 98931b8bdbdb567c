#!/usr/bin/env python
"""ssl-bench entry point. With no arguments: run the default suite on SynthScenes."""
import sys

from harness.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
