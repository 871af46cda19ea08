import os
import shutil
import tempfile

import jax
import pytest

# The test suite runs in float64 (the library itself never flips this flag).
jax.config.update("jax_enable_x64", True)

os.environ.setdefault("JAXQUEUE_FAST", "1")

# Tests check numbers and benchmarks check speed: without LLVM's optimisations XLA compiles
# about twice as fast on a CPU, and the kernels give the same floats (the exact solver's
# linear algebra to 1e-14). Set before any backend starts; commands the tests start inherit it.
_FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_FAST_COMPILE}".strip()

# One persistent compilation cache per run, shared by the xdist workers and the commands the
# tests start: a program compiled by one process is read back by the others. The controller
# makes it; a worker finds it in the environment it inherits.
_CACHE_ENV = "JAXQUEUE_CACHE_DIR"


def pytest_configure(config):
    if os.environ.get("JAXQUEUE_TEST_RUN_CACHE") is None:
        path = tempfile.mkdtemp(prefix="jaxqueue-tests-xla-")
        os.environ["JAXQUEUE_TEST_RUN_CACHE"] = path
        os.environ[_CACHE_ENV] = path
        config._jaxqueue_cache_owner = path
    jax.config.update("jax_compilation_cache_dir", os.environ["JAXQUEUE_TEST_RUN_CACHE"])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


def pytest_unconfigure(config):
    path = getattr(config, "_jaxqueue_cache_owner", None)
    if path:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def getkey():
    """Fresh, deterministic PRNG keys: ``k = getkey()``."""
    base = jax.random.key(1234)
    counter = iter(range(10**9))

    def _getkey():
        return jax.random.fold_in(base, next(counter))

    return _getkey
