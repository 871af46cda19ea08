"""Traffic equations and the stability condition of a network (``bf-networks`` Sections 4-6)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .. import pools
from ._model import Network


def _traffic(P, nu, closed: np.ndarray, xp, dtype):
    o, c = np.flatnonzero(~closed), np.flatnonzero(closed)
    parts = []
    if o.size:
        A = xp.eye(o.size, dtype=dtype) - P[np.ix_(o, o)].T
        parts.append(xp.linalg.solve(A, nu[o].astype(dtype)))
    if c.size:
        A = xp.eye(c.size, dtype=dtype) - P[np.ix_(c, c)].T
        A = xp.concatenate([xp.ones((1, c.size), dtype), A[1:]], axis=0)
        b = xp.asarray(np.eye(c.size)[0], dtype=dtype)
        parts.append(xp.linalg.solve(A, b))
    return xp.concatenate(parts)[np.argsort(np.concatenate([o, c]))]


def traffic(net: Network):
    """Solve the traffic equations as linear systems (differentiable in ``routing`` and ``nu``).

    Open classes ``O``: ``lam_O = nu_O + P_OO^T lam_O`` (``bf-networks`` eq. (1)), i.e.
    ``(I - P_OO^T) lam_O = nu_O``. Closed classes ``J``: ``v_J = P_JJ^T v_J`` (eq. (11)), unique
    up to a constant; one equation is replaced by ``sum(v_J) = 1``.

    Args:
        net: the network.

    Returns:
        Per-class rates ``(C,)``: arrival rates of the open classes and visit ratios of the
        closed chain (summing to 1 over it).
    """
    dtype = jnp.result_type(net.routing, net.nu, net.mu)
    return _traffic(net.routing, net.nu, np.array(net.closed, bool), jnp, dtype)


def check_stability(net: Network, lam=None) -> None:
    """Refuse an unstable network, naming the bottleneck pool, classes and servers.

    The network is stable iff in every pool ``k`` and for every set ``A`` of its open classes,
    ``sum_{i in A} lam_i < mu(U_{i in A} S_i)`` (``bf-networks`` Sections 4 and 6, Appendices A-B);
    the closed classes do not enter the condition. Each pool is checked by the polynomial-time
    linear program of :func:`jaxqueue.pools.stability`, which returns the most loaded set.

    Args:
        net: the network (concrete arrays).
        lam: the traffic-equation solution (computed when omitted).

    Raises:
        ValueError: ``unstable: pool k, classes [...] on servers [...] ...`` for the most loaded
            subset of the first unstable pool.
    """
    closed = np.array(net.closed, bool)
    if lam is None:
        P, nu = (np.asarray(x, np.float64) for x in (net.routing, net.nu))
        lam = _traffic(P, nu, closed, np, np.float64)
    lam = np.asarray(lam, dtype=np.float64)
    mu = np.asarray(net.mu, dtype=np.float64)
    for k, (classes, servers) in enumerate(zip(net.pool_classes, net.pool_servers, strict=True)):
        opn = [i for i in classes if not closed[i]]
        if not opn:
            continue
        where = {s: j for j, s in enumerate(servers)}
        sets = [tuple(where[s] for s in net.server_sets[i]) for i in opn]
        st = pools.stability(pools.Pool(sets, mu[list(servers)]), lam[opn])
        if not st.stable:
            names = [opn[c] for c in st.bottleneck_classes]
            sv = [servers[s] for s in st.bottleneck_servers]
            raise ValueError(
                f"unstable: pool {k} is overloaded: classes {names} (arrival rate "
                f"{st.demand:.6g}) can only use servers {sv} (capacity {st.capacity:.6g}), "
                f"load {st.load:.4g} >= 1"
            )
