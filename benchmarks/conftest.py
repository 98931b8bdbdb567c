"""The tests inside protocol folders (``benchmarks/<folder>/tests/``) share the fixtures of
tests/shared_fixtures.py, as tests/conftest.py does (a conftest covers only its own tree; tests/ is on
the import path through pyproject's ``pythonpath``). The collection hooks of tests/conftest.py are
session-wide already."""
from shared_fixtures import (  # noqa: F401
    dino_cpu_checkpoint,
    isolated_home,
    one_rank_group,
    one_torch_thread,
    synth_tiny,
)
