import os
import sys
from pathlib import Path

# Same as the entry point: passive OpenMP waiting, set before torch is imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # numpy's and scipy's OpenBLAS ignore torch's thread count and OMP_WAIT_POLICY: two of its
    # spinning threads per worker beside the other worker made the sklearn fits of
    # test_transfer.py 5-10x slower (87.6 s -> 7.6 s for one test on a loaded machine). Read
    # when OpenBLAS loads, so set before numpy is imported; the tests' subprocesses inherit it.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# Compiled modules and rewritten test files are kept in __pycache__ (git ignores it) even where
# PYTHONDONTWRITEBYTECODE is set: without them each worker, and each subprocess a test starts,
# compiles the project and rewrites every test file again (collection 15.4 s -> 9.6 s, the fast
# suite 140 s -> 116 s on the idle 2-core machine). Set before the test files are collected.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

import pytest  # noqa: E402
import torch  # noqa: E402

# Tests are sized for 2 cores; more threads than cores only adds contention. Under
# pytest-xdist each worker process holds one core.
_THREADS = 1 if os.environ.get("PYTEST_XDIST_WORKER") else 2
torch.set_num_threads(min(_THREADS, torch.get_num_threads()))

# The shared test support modules (model_zoo_fixtures.py, image_folders.py, shared_fixtures.py, ...)
# import by their own names, from the protocol folders' tests too, as pytest makes them importable
# for the tests beside them.
_SUPPORT = str(Path(__file__).resolve().parent)
if _SUPPORT not in sys.path:
    sys.path.append(_SUPPORT)


# Module and class fixtures are made once per worker that runs a test needing them; session
# fixtures once per worker whatever the grouping.
_SHARED_SCOPES = ("module", "class", "package")


def _shares_a_module_fixture(item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    return any(d and d[-1].scope in _SHARED_SCOPES for d in defs)


# The slow tests that take minutes, longest first (measured durations: docs/TESTING.md, "Time of
# the slow suite"). Started first, on both workers at once, they leave the short tests to fill
# the gaps at the end instead of one of them ending the run alone.
_LONGEST_FIRST = (
    "tests/test_default_suite.py::test_default_run_end_to_end_then_cached",
    "tests/test_learning.py::test_dino_cpu_preset_beats_random_init",
    "tests/test_learning.py::test_synclr_cpu_preset_beats_random_init_on_dense_nn_and_linear",
    "benchmarks/dense_nn/tests/test_dense_nn_e2e.py::test_pretrained_beats_random_init_at_every_fraction[hbird]",
    "tests/test_dpt_probe.py::test_synth_dino_beats_random_init_on_synthscenes_small",
    "tests/test_zoo_recipes.py::test_first_steps_of_every_recipe_log_the_shipped_losses",
    "benchmarks/segmentation/tests/test_seg.py::test_smoke_linear_pretrained_beats_random_init",
    "tests/test_full_suite.py::test_the_full_suites_other_protocols_run_on_synthscenes_tiny",
    "benchmarks/dense_nn/tests/test_dense_nn_e2e.py::test_pretrained_beats_random_init_at_every_fraction[cribo]",
    "benchmarks/transfer/tests/test_transfer.py::test_synth_dino_against_random_init_on_synthscenes_small",
    "benchmarks/depth/tests/test_depth_presets.py::test_synth_dino_beats_random_init_with_the_presets",
)


def _slow_run(config) -> bool:
    expr = config.getoption("markexpr", "") or ""
    return "slow" in expr and "not slow" not in expr


def pytest_configure(config):
    # xdist's loadgroup hands out the groups with most tests first and the rest in collection
    # order; in the slow suite a group is not what takes long, so the order below decides
    if _slow_run(config) and hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def _rank(item) -> int:
    return next((i for i, prefix in enumerate(_LONGEST_FIRST) if item.nodeid.startswith(prefix)),
                len(_LONGEST_FIRST))


# tryfirst: xdist's worker reads the xdist_group marks in its own collection hook, which runs
# before a conftest's unless this one goes first.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``--dist loadgroup``), the tests that share the session's pretrained
    DINO checkpoint run on one worker: a second worker would find the pretraining folder locked.
    The fast tests of a file that share a module or class fixture run on one worker, so that the
    fixture is made once; every other test (and every slow one, minutes each) is spread one by
    one, so that no long file makes one worker the critical path. A slow run starts with its
    longest tests (``_LONGEST_FIRST``), the default run and DINO's pretraining on the two workers."""
    if _slow_run(config):
        items.sort(key=_rank)  # stable: the others keep their collection order
    for item in items:
        if "dino_cpu_checkpoint" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("dino_cpu_checkpoint"))
        elif (item.get_closest_marker("slow") is None and item.get_closest_marker("xdist_group") is None
              and _shares_a_module_fixture(item)):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
        if getattr(config.option, "loadgroup", False):
            _name_the_group_in_the_id(item)


def _name_the_group_in_the_id(item) -> None:
    """xdist's scheduler reads a test's group from its id (``nodeid@group``), which xdist 3.8 writes
    into ``item._nodeid``; pytest 9.2 builds the id from a structured ``item._id`` and ignores that
    field, so every group falls apart silently (pytest-dev/pytest-xdist#1386). Write it where this
    pytest reads it; on a pytest without ``_id`` xdist's own hook does it."""
    try:
        from _pytest.nodeid import NodeId
    except ImportError:
        return
    names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                    for m in item.iter_markers("xdist_group")})
    if names and isinstance(getattr(item, "_id", None), NodeId):
        item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")


# the fixtures every test tree shares (benchmarks/conftest.py takes the same ones)
from shared_fixtures import (  # noqa: E402,F401
    dino_cpu_checkpoint,
    isolated_home,
    one_rank_group,
    one_torch_thread,
    synth_tiny,
)


@pytest.fixture(scope="session")
def _cyanure_child():
    """One spawned process for a worker's cyanure fits (benchmarks.logreg.solver)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


@pytest.fixture
def logreg_fits_in_one_child(_cyanure_child, monkeypatch):
    """The logreg protocol's fits, each sweep as ``fit_sweep`` runs it, in one child kept for the
    session: cyanure stays out of the torch process (the reason ``fit_sweep`` spawns), and its
    1.3 s start (importing sklearn) is paid once per worker instead of once per sweep. The spawn
    and the arrays' way through files are benchmarks/logreg/tests' to check."""
    from benchmarks.logreg import protocol, solver

    def fit_sweep(train_x, train_y, test_x, lambdas, **kw):
        return _cyanure_child.submit(solver.fit_sweep, train_x, train_y, test_x, list(lambdas), isolate=False,
                                     **kw).result()

    monkeypatch.setattr(protocol, "fit_sweep", fit_sweep)
