import jax
import jax.numpy as jnp
import pytest

from jaxqueue._sharding import batch_devices, batch_mesh, shard_batch


def test_batch_devices_takes_the_largest_divisor_group():
    devs = ["d0", "d1", "d2", "d3"]
    assert batch_devices(12, devs) == devs
    assert batch_devices(10, devs) == ["d0", "d1"]
    assert batch_devices(7, devs) == ["d0"]
    with pytest.raises(ValueError, match="devices"):
        batch_devices(4, [])


def test_shard_batch_keeps_values():
    mesh = batch_mesh(batch_devices(6))
    x = jnp.arange(12.0).reshape(6, 2)
    (y,) = shard_batch(mesh, x)
    assert jnp.array_equal(x, y)
    assert shard_batch(None, x)[0] is x
    assert mesh.size == len(batch_devices(6, jax.devices()))
