import os

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

# No persistent compilation cache, in-process or in the commands the tests start: a worker
# writing one crashed inside XLA's serialisation of an event-engine executable.
# tests/pools/test_cli.py checks the command line's cache in a subprocess of its own.
os.environ["JAXQUEUE_NO_CACHE"] = "1"


@pytest.fixture
def getkey():
    """Fresh, deterministic PRNG keys: ``k = getkey()``."""
    base = jax.random.key(1234)
    counter = iter(range(10**9))

    def _getkey():
        return jax.random.fold_in(base, next(counter))

    return _getkey
