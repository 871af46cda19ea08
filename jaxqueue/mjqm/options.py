"""Option objects of the MJQM simulators: small immutable groups of related settings (as
diffrax's ``SaveAt`` / ``StepSizeController``), each with its defaults and its checks.

* :func:`~jaxqueue.mjqm.sample_backward` (Algorithm 1 of ``mjsre``): ``bias_control=``
  :class:`BiasControl` (``None``: Algorithm 1 alone), ``budget=`` :class:`Budget`,
  ``batching=`` :class:`Batching`;
* :func:`~jaxqueue.mjqm.simulate` on the recurrence engine (the forward scan, Section 7.4):
  ``init=`` :class:`InitialState`, ``histogram=`` :class:`Histogram`;
* :func:`~jaxqueue.mjqm.simulate` on either engine: ``execution=`` :class:`Execution` (how
  the work is laid out; no field of it changes a number);
* :func:`~jaxqueue.mjqm.sensitivity`: ``start=`` :class:`Start` (where the replications start,
  the warm-up left out), ``differences=`` :class:`Differences` (the central-difference steps),
  ``coupling=`` :class:`Coupling` (the class changes of the logits' measure-valued derivative).

The options every entry point shares stay plain keywords (``key``, ``n_jobs`` /
``n_samples``, ``dtype``, ``level``, ``limit``, ``override``, ``progress``, ``throw``).
"""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Integral
from typing import Any

import equinox as eqx

__all__ = [
    "BiasControl",
    "Budget",
    "Batching",
    "InitialState",
    "Histogram",
    "Execution",
    "Start",
    "Differences",
    "Coupling",
]


def _positive_int(owner: str, name: str, value, *, allow_none: bool = False) -> None:
    if allow_none and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
        raise ValueError(f"{owner}.{name} must be a positive integer, got {value!r}")


class _Option(eqx.Module):
    """The base of the option objects: :meth:`check`, the one refusal of a wrong type."""

    @classmethod
    def check(cls, where: str, name: str, value, *, none: bool = False):
        """``value`` when it is a ``cls`` (or ``None`` where ``none``), else a one-line
        ``ValueError`` naming the option and the class it takes."""
        if isinstance(value, cls) or (none and value is None):
            return value
        raise ValueError(
            f"{where}: {name} must be a jaxqueue.mjqm.options.{cls.__name__}"
            f"{' or None' if none else ''}, got {type(value).__name__}"
        )


class BiasControl(_Option):
    """The batch-level bias control of :func:`~jaxqueue.mjqm.sample_backward` (the backward
    driver's module docstring): the batch horizon doubles until the bound of the bias of the
    mean wait is at most ``tol`` of the half-width of its interval.

    Attributes:
        tol: the test passes when the bias bound is at most this fraction of the half-width
            of the mean-wait interval (> 0).
        level: confidence level of the test (its bound and the half-width).
    """

    tol: float = 0.25
    level: float = 0.95

    def __check_init__(self):
        if not self.tol > 0:
            raise ValueError(f"BiasControl.tol must be > 0, got {self.tol!r}")
        if not 0 < self.level < 1:
            raise ValueError(f"BiasControl.level must be in (0, 1), got {self.level!r}")


class Budget(_Option):
    """The caps of :func:`~jaxqueue.mjqm.sample_backward`: no doubling (of Algorithm 1 or of
    the batch test) starts that would pass one (samples still doubling then give
    ``unconverged``, a bias test still failing ``biased``).

    Attributes:
        max_ell: cap on the horizon (jobs), per sample and for the batch test.
        max_work: sample-jobs of Algorithm 1 and the batch doublings together (the result's
            ``work_done``); ``None``: ``2^39 / s``.
        max_seconds: time budget: the bias control runs on a pilot of 1000 samples and
            further samples are drawn while the budget lasts (fewer than ``n_samples`` may
            come back; the pilot runs to its end whatever the budget). ``None``: exactly
            ``n_samples``, all in the bias test.
    """

    max_ell: int = 1 << 22
    max_work: int | None = None
    max_seconds: float | None = None

    def __check_init__(self):
        _positive_int("Budget", "max_ell", self.max_ell)
        _positive_int("Budget", "max_work", self.max_work, allow_none=True)
        if self.max_seconds is not None and not self.max_seconds >= 0:
            raise ValueError(f"Budget.max_seconds must be >= 0 or None, got {self.max_seconds!r}")


class Batching(_Option):
    """How :func:`~jaxqueue.mjqm.sample_backward` batches its samples over device calls
    (``mjsre`` Remark 2); no field changes a number.

    Attributes:
        split_chunks: longest segment per device call, in chunks of 256 jobs.
        min_batch: smallest batch run (remainders are padded up to it; at least the device
            count); the pasts of the later doublings run in batches of ``min_batch * 8^k``
            up to ``max_batch`` (one compilation per size).
        max_batch: largest batch per device call, and largest group of samples run together
            by the side-by-side kernels; ``None``: on a CPU the batch whose workload states
            fit in a core's cache, else 4096.
    """

    split_chunks: int = 1 << 12
    min_batch: int = 8
    max_batch: int | None = None

    def __check_init__(self):
        _positive_int("Batching", "split_chunks", self.split_chunks)
        _positive_int("Batching", "min_batch", self.min_batch)
        _positive_int("Batching", "max_batch", self.max_batch, allow_none=True)


class InitialState(_Option):
    """Where the forward scan of the recurrence engine starts instead of the empty system.

    Continuing a run ``res`` with ``init=InitialState(res.final_state,
    job_offset=res.n_jobs), warmup=0`` uses fresh jobs and reproduces the longer run exactly.

    Attributes:
        state: the ascending workload vectors, ``(s,)`` (every replication) or
            ``(replications, s)``; sorted per resource type on entry.
        job_offset: index of the first job (job ``n`` of replication ``r`` depends on
            ``(key, r, n)`` only).
        stationary: ``state`` is (nearly) a stationary sample (backward samples whose sampler
            said ok, or the final state of such a run): the rule "at least ``MIN_EFFECTIVE``
            effective waits per replication" is then not applied.
    """

    state: Any
    job_offset: int = 0
    stationary: bool = False

    def __check_init__(self):
        off = self.job_offset
        if isinstance(off, bool) or not isinstance(off, Integral) or off < 0:
            raise ValueError(f"InitialState.job_offset must be an integer >= 0, got {off!r}")


class Histogram(_Option):
    """The log-spaced waiting-time histograms of the forward scan (the quantiles and their
    intervals).

    Attributes:
        bins_per_octave: resolution, a power of 2 up to 64: the bin edges are the floats
            ``2^e (1 + j / bins_per_octave)``.
        range: ``(low, high)`` of the histogram; ``None``: ``1e-4`` to ``1e6`` times the mean
            service time.
    """

    bins_per_octave: int = 16
    range: tuple[float, float] | None = None


class Execution(_Option):
    """How a simulation of :func:`~jaxqueue.mjqm.simulate` lays out its work: the numbers do
    not depend on any field (job ``n`` of replication ``r`` depends on ``(key, r, n)``
    only), only the memory and the speed do.

    Attributes:
        devices: devices to shard the replications over (default ``jax.devices()``; the
            largest count dividing the replications run is used).
        chunk: the recurrence engine's jobs per block of the forward scan (memory ~
            replications x chunk); ``None``: 256.
        buffer: the event engine's entries per job deque to start with (the replications
            that fill theirs go on with twice the entries, up to ``max_buffer``); ``None``:
            chosen from the workload.
    """

    devices: Sequence | None = None
    chunk: int | None = None
    buffer: int | None = None

    def __check_init__(self):
        _positive_int("Execution", "chunk", self.chunk, allow_none=True)
        _positive_int("Execution", "buffer", self.buffer, allow_none=True)

    def only(self, engine: str, *fields: str) -> Execution:
        """``self`` when every field the ``engine`` does not read is unset, else a one-line
        ``ValueError`` naming it."""
        for name in ("chunk", "buffer"):
            if name not in fields and getattr(self, name) is not None:
                raise ValueError(f"Execution.{name} does not apply to the {engine} engine")
        return self


class Start(_Option):
    """Where the replications of :func:`~jaxqueue.mjqm.sensitivity` start.

    Attributes:
        kind: ``"backward"`` (a sub-perfect backward sample, Algorithm 1 of ``mjsre``; FCFS)
            or ``"empty"``.
        n_warmup: jobs of each replication left out of the statistics; ``None``: 0 from a
            backward start, ``n_jobs // 5`` from empty.
    """

    kind: str = "backward"
    n_warmup: int | None = None

    def __check_init__(self):
        if self.kind not in ("backward", "empty"):
            raise ValueError(f"Start.kind: expected backward or empty, got {self.kind!r}")


class Differences(_Option):
    """The central differences (common random numbers) of :func:`~jaxqueue.mjqm.sensitivity`.

    Attributes:
        h: the step (relative for ``lam``); ``None``: 0.02, 0.05 for the logits.
        everywhere: central differences for every parameter, also where a pathwise or
            measure-valued estimate applies (a check of those).
    """

    h: float | None = None
    everywhere: bool = False


class Coupling(_Option):
    """The measure-valued derivative of :func:`~jaxqueue.mjqm.sensitivity` with respect to the
    class logits (FCFS, a mean metric): jobs whose class is changed, each run beside its
    original path until the two couple.

    Attributes:
        samples: jobs per replication whose class is changed, spread over its measured jobs;
            ``None``: one per 256 jobs (closer samples share most of their congestion) or
            per mean coupling time of a pilot (one sample per replication), the longer.
        horizon: most jobs a changed path runs to couple; a sample still apart then is cut
            and the status says ``biased``.
    """

    samples: int | None = None
    horizon: int = 1 << 20

    def __check_init__(self):
        _positive_int("Coupling", "samples", self.samples, allow_none=True)
        _positive_int("Coupling", "horizon", self.horizon)
