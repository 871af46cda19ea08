"""Network files and specs: ``queues``, ``mu``, ``routing``, ``nu`` and / or ``population``
(the JSON / TOML spec of ``jaxqueue network solve``)."""

from __future__ import annotations

import numpy as np

from .._document import document, in_file
from ._model import Network

_NETWORK_KEYS = ("queues", "mu", "routing", "nu", "population")


def read_network(path, *, dtype=None) -> Network:
    """The :class:`Network` of a network file (:func:`network_from_spec`); errors
    ``"PATH: FIELD: ..."``."""
    with in_file(path, "network"):
        return network_from_spec(document(path), dtype=dtype)


def network_from_spec(spec: dict, *, dtype=None):
    """Build a :class:`jaxqueue.networks.Network` from a spec dict.

    Keys: ``queues`` (list of pools, each a list of class server sets, global server indices,
    classes numbered in order across pools), ``mu`` (server rates), ``routing`` (``C x C``
    matrix over classes), ``nu`` (external rates; open and mixed networks) and/or
    ``population`` (size of the closed chain).

    Args:
        spec: the parsed file.
        dtype: floating dtype of the arrays (default: numpy's float64, cast by JAX to its
            default precision).

    Returns:
        The validated network.

    Raises:
        ValueError: for unknown or missing keys and everything :class:`Network` refuses.
    """
    if not isinstance(spec, dict):
        raise ValueError("spec: expected a table/object with keys queues, mu, routing, ...")
    unknown = sorted(set(spec) - set(_NETWORK_KEYS))
    if unknown:
        raise ValueError(f"unknown keys {unknown} (expected some of {sorted(_NETWORK_KEYS)})")
    missing = [k for k in ("queues", "mu", "routing") if k not in spec]
    if missing:
        raise ValueError(f"missing keys {missing}")
    if "nu" not in spec and "population" not in spec:
        raise ValueError("give nu (open classes) and/or population (closed chain)")

    def arr(name):
        try:
            return np.asarray(spec[name], dtype=dtype or np.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{name}: not a numeric array ({err})") from None

    nu = arr("nu") if "nu" in spec else None
    return Network(
        spec["queues"], arr("mu"), arr("routing"), nu=nu, population=spec.get("population")
    )
