"""The backward sampler's result (``mjsre`` Algorithm 1 with the batch bias control):
sub-perfect samples of the stationary ordered workload, their status, and the bias tests."""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from ....stats import Result, Status

__all__ = ["BackwardSamples", "BiasTest"]


class BiasTest(NamedTuple):
    """One batch-level bias test of the samples ``X(ell)`` (module docstring, 2).

    Attributes:
        ell: the batch horizon of the samples tested, ``X(ell)``.
        kind: ``"loynes"`` (the first test: increments ``M_{2 ell} - M_ell``) or ``"paired"``
            (the later ones: ``X(ell) - X(ell / 2)``).
        diff: mean paired difference of the mean wait (>= 0).
        diff_se: its standard error.
        diff_class: ``(classes,)`` the mean paired difference of each class's wait.
        half_width: half-width of the mean-wait interval of ``X(ell)`` at the test's level.
        bound: the bias bound of the mean wait of ``X(ell)``.
        bound_class: ``(classes,)`` the same bound for each class's mean wait.
        ok: ``bound <= bias_tol * half_width``.
        jump: ``(1 + classes,)`` mean nonzero difference of the mean wait and of each class's
            (this test's, else the previous one's): the size the rule-of-three floor of the
            bounds uses when fewer than 3 differ.
        step: ``(1 + classes,)`` upper bound of the mean differences themselves (the bound
            before the geometric factor): for a paired test, what ``X(ell / 2)`` lacks of
            ``X(ell)`` (:func:`_shortest_horizon`).
    """

    ell: int
    kind: str
    diff: float
    diff_se: float
    diff_class: np.ndarray
    half_width: float
    bound: float
    bound_class: np.ndarray
    ok: bool
    jump: np.ndarray | None = None
    step: np.ndarray | None = None

    def as_dict(self) -> dict:
        return {
            "ell": int(self.ell),
            "kind": self.kind,
            "diff": float(self.diff),
            "diff_se": float(self.diff_se),
            "half_width": float(self.half_width),
            "bias_bound": float(self.bound),
            "ok": bool(self.ok),
        }


class BackwardSamples(Result):
    """Sub-perfect samples of the stationary ordered workload seen by an arriving job.

    Attributes:
        W: ``(n, s)`` ascending workload vectors (Palm distribution at arrivals).
        converged: ``(n,)`` whether Algorithm 1 met its stopping rule before ``max_ell``.
        ell: ``(n,)`` the horizon at which each sample stopped.
        lam: the arrival rate.
        status: ``Status.ok``, ``Status.unconverged`` (some sample hit the cap) or
            ``Status.biased`` (the batch bias test failed at the horizon or work cap, or
            did not run).
        work_done: jobs processed, batch padding included.
        work_needed: jobs Algorithm 1 needs for these samples run one by one (each replay
            counted until it was seen to meet the previous trajectory, at the end of a
            block of ``_BLOCK`` jobs).
        key: the key the samples were drawn with (metrics draw job 0's size from it).
        bias_bound: bound of the downward bias of the mean wait (0 without bias control).
        bias_bound_class: ``(classes,)`` the same for each class's mean wait, or ``None``.
        ell_batch: the batch horizon ``F`` of the samples ``X(F)`` (0 without bias control).
        ell_more: the horizon ``H <= F`` of the samples drawn after the pilot under a time
            budget (module docstring, 4; 0 when none were).
        bias_tests: the batch tests run, oldest first (:class:`BiasTest`).
        elapsed_s: wall time of the sampling.
    """

    W: np.ndarray
    converged: np.ndarray
    ell: np.ndarray
    lam: float
    status: Status
    work_done: int
    work_needed: int
    key: jax.Array
    bias_bound: float = 0.0
    bias_bound_class: np.ndarray | None = None
    ell_batch: int = 0
    ell_more: int = 0
    bias_tests: tuple = ()
    elapsed_s: float = 0.0

    @property
    def n(self) -> int:
        return self.W.shape[0]

    @property
    def n_unconverged(self) -> int:
        return int(np.sum(~self.converged))

    def status_reason(self) -> str:
        """Why the status is not ``ok``, in one line."""
        if self.status == Status.unconverged:
            return (
                f"{self.n_unconverged} of {self.n} samples hit max_ell or the work budget "
                f"max_work (work done: {self.work_done:.3g} sample-jobs) before meeting "
                "Algorithm 1's stopping rule (lower bounds); raise max_ell or max_work"
            )
        if not self.bias_tests:
            return "Algorithm 1 alone (bias_control=None): the bias is not bounded"
        return (
            f"the batch bias test still failed at horizon {self.ell_batch} (max_ell / "
            f"max_work); bias bound {self.bias_bound:.4g}"
        )

    @property
    def work_ratio(self) -> float:
        """Work done over work needed (1 means no sample waited for another)."""
        return self.work_done / max(self.work_needed, 1)
