"""A refused input under a plain ``jax.jit`` reaches the user inside XLA's long run-time error
(equinox's limit): the package's message says first that jaxqueue refused the input, and how
to see it without XLA's part (``eqx.filter_jit``)."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

from jaxqueue import pools

PREFIX = "jaxqueue refused the input"


def test_a_refusal_under_jit_says_so_first():
    pool = pools.preset_pool("m-model-sym")
    with pytest.raises(Exception) as info:
        jax.block_until_ready(jax.jit(lambda x: pools.solve(pool, x).T)(jnp.asarray([5.0, 5.0])))
    text = str(info.value)
    assert PREFIX in text and "eqx.filter_jit" in text
    assert text.index(PREFIX) < text.index("unstable arrival rates")
    with pytest.raises(Exception) as info:
        f = eqx.filter_jit(lambda x: pools.solve(pool, x).T)
        jax.block_until_ready(f(jnp.asarray([5.0, 5.0])))
    text = str(info.value)
    assert PREFIX in text and "CpuCallback" not in text, text[-500:]
