"""The tests inside protocol folders (``benchmarks/<folder>/tests/``) share the fixtures of
``tests/conftest.py``: one definition, re-exported here because a conftest covers only its own tree.
It is loaded by path (a site-packages ``tests`` package can shadow the folder's name); its
collection hook is session-wide already, so only the fixtures are taken."""
import importlib.util
from pathlib import Path

_SHARED = Path(__file__).resolve().parent.parent / "tests" / "conftest.py"
_spec = importlib.util.spec_from_file_location("ssl_bench_shared_fixtures", _SHARED)
_shared = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_shared)

dino_cpu_checkpoint = _shared.dino_cpu_checkpoint
isolated_home = _shared.isolated_home
one_rank_group = _shared.one_rank_group
one_torch_thread = _shared.one_torch_thread
synth_tiny = _shared.synth_tiny
