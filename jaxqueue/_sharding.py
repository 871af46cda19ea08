"""Spreading a batch axis (replications, samples) over devices with ``jax.sharding``.

One convention for every simulator: a one-dimensional mesh with axis :data:`BATCH` over the
devices used, the batch (leading) axis split over it, every other axis replicated. The kernels
draw their random numbers from ``(key, batch index, job index)``, so results do not depend on
the number of devices.

Several hosts: after ``jax.distributed.initialize(...)`` on every process, ``jax.devices()``
lists the devices of all processes; every process runs the same program with the same
arguments, builds the same batch, places its own shards (:func:`shard_batch`) and gathers the
results (:func:`to_host`), so each process returns the whole answer.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

__all__ = ["BATCH", "batch_devices", "batch_mesh", "shard_batch", "to_host"]

BATCH = "batch"
"""Name of the mesh axis the batch is split over."""


def batch_devices(n: int, devices: Sequence | None = None) -> list:
    """The largest leading group of ``devices`` (default ``jax.devices()``) whose size
    divides ``n``, so that each device gets an equal share of a batch of ``n``."""
    devs = list(jax.devices() if devices is None else devices)
    if not devs:
        raise ValueError("devices must not be empty")
    d = len(devs)
    while n % d:
        d -= 1
    return devs[:d]


def batch_mesh(devices: Sequence) -> Mesh:
    """A one-dimensional mesh with axis :data:`BATCH` over ``devices``."""
    return Mesh(np.asarray(list(devices)), (BATCH,))


def shard_batch(mesh: Mesh | None, *xs):
    """Place each array with its leading axis split over ``mesh`` (unchanged if ``mesh`` is
    None or has one device). Returns a tuple."""
    if mesh is None or mesh.size == 1:
        return xs
    sh = NamedSharding(mesh, PartitionSpec(BATCH))
    if jax.process_count() == 1:
        return tuple(jax.device_put(x, sh) for x in xs)
    return tuple(_put_global(x, sh) for x in xs)


def _put_global(x, sharding):
    """Several processes: each holds the whole (identical) batch and places its own shards;
    arrays on a process-local device go through the host first (typed keys as key data)."""
    if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        data = jax.device_put(np.asarray(jax.random.key_data(x)), sharding)
        return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
    return jax.device_put(np.asarray(x), sharding)


def to_host(x) -> np.ndarray:
    """A (possibly sharded) array as a numpy array on this host; an array spread over the
    devices of several processes is gathered from all of them first."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)
