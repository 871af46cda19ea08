"""Per-replication sums of an event run, for callers that build their own estimator from
them (the common-random-numbers differences of :mod:`jaxqueue.mjqm`'s sensitivities)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from ..._workload import Workload
from ...policies import Policy
from ._accumulate import _wait_bins
from ._result import _with_zero_waits, response_halves
from ._simulate import _float, _runs

__all__ = ["ReplicationSums", "replication_sums"]


class ReplicationSums(NamedTuple):
    """The sums of each replication, replications first, float64: per class ``(R, K)`` the
    response and wait sums (``resp``, ``wait``), their squares' sums (``resp2``, ``wait2``)
    and the measured jobs (``cnt``); ``halves``: ``(early, late)``, each ``(R,)``, the mean
    response of the first and of the second half of the measured jobs (the drift test's
    input); ``wait_hists``: ``(R, K, bins)`` waiting-time counts, bin 0 the jobs that did
    not wait, binned at ``edges``; ``overflow``, ``capped``: whether a replication stopped
    early (its deque full at ``max_buffer``, the event cap): its sums are then partial."""

    resp: np.ndarray
    resp2: np.ndarray
    wait: np.ndarray
    wait2: np.ndarray
    cnt: np.ndarray
    halves: tuple
    wait_hists: np.ndarray
    edges: np.ndarray
    overflow: bool
    capped: bool


def replication_sums(
    policy: Policy,
    workload: Workload,
    lam: float,
    *,
    key,
    replications: int,
    warmup: int,
    n_jobs: int,
    dtype=None,
    max_buffer: int = 4096,
) -> ReplicationSums:
    """The event engine's run of ``policy`` (bound to ``workload``) at ``lam``, as
    :func:`simulate` runs it (the same key, the same replications), returned as its
    per-replication sums instead of a summary. The caller checks the arguments and the
    load."""
    sizes = (replications, warmup, n_jobs)
    acc, overflow, capped, _ = _runs(
        policy, workload, float(lam), key, sizes, None, max_buffer, _float(dtype)
    )
    a = jax.tree.map(lambda x: np.asarray(x, np.float64).T, acc)
    K = workload.n_classes
    return ReplicationSums(
        resp=a.resp,
        resp2=a.resp2,
        wait=a.wait,
        wait2=a.wait2,
        cnt=a.cnt,
        halves=response_halves(a),
        wait_hists=_with_zero_waits(a.hist.reshape(replications, K, -1), a.cnt),
        edges=_wait_bins(workload)[3],
        overflow=bool(overflow.any()),
        capped=bool(capped.any()),
    )
