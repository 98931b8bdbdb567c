"""Throwaway: SynthScenes small with thing texture periods scaled by FACTOR -> OUT."""
import sys
from pathlib import Path
import harness.data.synthetic as syn
factor, out = float(sys.argv[1]), Path(sys.argv[2])
for name, fn in list(syn._THING_TEXTURES.items()):
    syn._THING_TEXTURES[name] = (lambda f: (lambda rng, size, u: f(rng, size, u * factor)))(fn)
syn.generate(out, preset="small", seed=0, progress=False, workers=1)
print(out)
