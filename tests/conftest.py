import os

import jax
import pytest

# The test suite runs in float64 (the library itself never flips this flag).
jax.config.update("jax_enable_x64", True)

os.environ.setdefault("JAXQUEUE_FAST", "1")
# Tests that call the command line in-process leave the persistent compilation cache off
# (tests/pools/test_cli.py checks the cache in a subprocess).
os.environ["JAXQUEUE_NO_CACHE"] = "1"


@pytest.fixture
def getkey():
    """Fresh, deterministic PRNG keys: ``k = getkey()``."""
    base = jax.random.key(1234)
    counter = iter(range(10**9))

    def _getkey():
        return jax.random.fold_in(base, next(counter))

    return _getkey
