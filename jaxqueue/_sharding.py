"""Spreading a batch axis (replications, samples) over devices with ``jax.sharding``.

One convention for every simulator: a one-dimensional mesh with axis :data:`BATCH` over the
devices used, the batch (leading) axis split over it, every other axis replicated. The kernels
draw their random numbers from ``(key, batch index, job index)``, so results do not depend on
the number of devices.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

__all__ = ["BATCH", "batch_devices", "batch_mesh", "shard_batch"]

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
    return tuple(jax.device_put(x, sh) for x in xs)
