import gc
import os
import shutil
import tempfile

import jax
import pytest

# The test suite runs in float64 (the library itself never flips this flag).
jax.config.update("jax_enable_x64", True)

os.environ.setdefault("JAXQUEUE_FAST", "1")

# Tests check numbers and benchmarks check speed: without LLVM's optimisations and without
# XLA:CPU's fusion emitters a program compiles in a quarter of the time, and the kernels give
# the same floats (the exact solver's linear algebra to 1e-14). One LLVM module per program
# (no split for parallel codegen) and copy insertion without region analysis take a fifth
# off again (the simulators' floats unchanged, the exact solver's to 1e-14 again). Set
# before any backend starts; commands the tests start inherit it.
_FAST_COMPILE = (
    "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
    " --xla_cpu_use_fusion_emitters=false --xla_cpu_parallel_codegen_split_count=1"
    " --xla_cpu_copy_insertion_use_region_analysis=false"
)
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_FAST_COMPILE}".strip()

# One persistent compilation cache per run, shared by the xdist workers (they inherit the
# variable): a program compiled again (a fresh closure, the other worker, after
# jax.clear_caches) is read back instead of rebuilt. JAXQUEUE_TEST_CACHE=0 turns it off.
_OWN_CACHE = None
if os.environ.get("JAXQUEUE_TEST_CACHE", "1") != "0":
    if not os.environ.get("JAXQUEUE_TEST_CACHE_DIR"):
        _OWN_CACHE = tempfile.mkdtemp(prefix="jaxqueue-tests-xla-")
        os.environ["JAXQUEUE_TEST_CACHE_DIR"] = _OWN_CACHE
    jax.config.update("jax_compilation_cache_dir", os.environ["JAXQUEUE_TEST_CACHE_DIR"])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def pytest_collection_finish(session):
    """The modules and the collected tests live as long as the run: kept out of the cyclic
    garbage collector's full passes, which would otherwise walk them again and again."""
    gc.collect()
    gc.freeze()


def pytest_unconfigure(config):
    if _OWN_CACHE is not None:
        shutil.rmtree(_OWN_CACHE, ignore_errors=True)


# Tests that call the command line in-process leave the persistent compilation cache off
# (tests/pools/test_cli.py checks the cache in a subprocess).
os.environ["JAXQUEUE_NO_CACHE"] = "1"


def _mapped_regions() -> int:
    try:
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def _map_limit() -> int:
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 65530


_MAPS_BUDGET = _map_limit() // 2
# More than the maps one loaded program adds (a large kernel's included), so that counting can wait.
_MAPS_PER_PROGRAM = 100
# The maps at the last count and the programs loaded (compiled or read from the cache) since.
_maps = {"counted": 0, "programs": 0}


def _on_program(event, secs, **kwargs):
    if event == "/jax/core/compile/backend_compile_duration":
        _maps["programs"] += 1


jax.monitoring.register_event_duration_secs_listener(_on_program)


def pytest_runtest_teardown(item, nextitem):
    """Every compiled XLA:CPU executable (an eager op on a new shape included) keeps about 18
    memory maps until JAX's caches drop it; a worker that runs half the suite would pass the
    kernel's ``vm.max_map_count`` and crash inside the next compilation. Drop them in time.
    Counting reads a line per map, a cost per test that grows with the maps, so it waits until
    the programs loaded since the last count could have passed the budget."""
    if _maps["counted"] + _MAPS_PER_PROGRAM * _maps["programs"] <= _MAPS_BUDGET:
        return
    _maps["counted"], _maps["programs"] = _mapped_regions(), 0
    if _maps["counted"] > _MAPS_BUDGET:
        jax.clear_caches()
        _maps["counted"] = _mapped_regions()


@pytest.fixture
def getkey():
    """Fresh, deterministic PRNG keys: ``k = getkey()``."""
    base = jax.random.key(1234)
    counter = iter(range(10**9))

    def _getkey():
        return jax.random.fold_in(base, next(counter))

    return _getkey
