#!/usr/bin/env python
"""ssl-bench entry point. With no arguments: run the default suite on SynthScenes."""
import os
import sys

# OpenMP threads that busy-wait starve each other on a shared machine (measured: a DINO CPU
# step 3.4 s -> 0.24 s at load 4 on 2 cores); on an idle machine it makes no difference.
# Must be set before torch is imported; a value the user set wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from harness.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
