"""A job log replayed: its own arrivals, cores and run times through the event engine
(:func:`jaxqueue.mjqm.engines.events.replay`) under any job-list policy, on the log's machine
(``MaxProcs``) or a given one. One replication and no random number: an exact replay, whose
figures are the log's own (no interval; the status is ``ok`` unless a job list filled at its
cap, ``overflow``, or the event cap was reached, ``unconverged``).

Beside the waits the log recorded, :meth:`Replay.compare_recorded` says how many jobs started
at another time. Where the log's scheduler is one the package has (FCFS; EASY backfilling, here
with the run times as the estimates) the replay reproduces the recorded starts up to what the
log leaves out (jobs cancelled while waiting, reservations, down time, other queues).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .._tables import pandas
from ..dist import Deterministic
from ..mjqm import Workload
from ..mjqm.engines.events import replay as engine_replay
from ..mjqm.policies import Policy, parse_policy
from ._read import JobLog
from ._read import read as read_log

__all__ = ["Replay", "replay", "trace_jobs"]

QUANTILES = (0.5, 0.9, 0.99)


def trace_jobs(log, servers: int | None = None):
    """The jobs of ``log`` (a :class:`JobLog` or a path) that ran, the machine size and the
    classes: ``(log of the jobs that ran, servers, class cores ascending, class of each job)``.

    Raises:
        ValueError: one line: no machine size, no job that ran, a job needing more cores than
            the machine has (naming its line).
    """
    log = log if isinstance(log, JobLog) else read_log(log)
    if servers is not None:
        log = log.with_servers(servers)
    if log.servers is None:
        raise ValueError(
            f"{log.path}: the log gives no machine size (no MaxProcs header); pass servers "
            "(--servers N)"
        )
    ran = log.select(log.runnable)
    if len(ran) == 0:
        raise ValueError(f"{log.path}: no job that ran (left out: {log.left_out()})")
    over = ran.cores > ran.servers
    if over.any():
        i = int(np.argmax(over))
        raise ValueError(
            f"{log.path}:{int(ran.line[i])}: job {int(ran.job[i])} needs {int(ran.cores[i])} "
            f"cores, more than the machine's {ran.servers} ({ran.servers_from}); pass a larger "
            "servers (--servers N)"
        )
    cores, cls = np.unique(ran.cores, return_inverse=True)
    return ran, int(ran.servers), cores.astype(int), cls.astype(np.int64)


@dataclasses.dataclass(frozen=True, eq=False)
class Replay:
    """The replay of a job log under one policy (:func:`replay`).

    Attributes:
        log: the jobs that ran (a :class:`JobLog`, in order of submission).
        policy: the policy's label. servers: the machine size.
        cores: the classes' cores (ascending); cls: the class of each job.
        start, wait: each job's first start and its wait (``start - submit``).
        response: each job's response (wait plus run time) for a non-preemptive policy, else
            ``None`` (per class means in ``response_mean_class``).
        response_mean_class: per class mean response.
        idle_servers, hol_idle_servers, number_in_system: time averages from the first
            arrival to the last departure (``makespan``); ``utilisation`` = 1 - idle / servers;
            ``hol_idle_servers`` (idle servers while a job waits) is the waste.
        status: ``"ok"``, ``"overflow"`` or ``"unconverged"``; ``buffer``: job-list entries.
        log_left_out: the jobs of the log left out, by reason (:meth:`JobLog.left_out`).
    """

    log: JobLog
    policy: str
    servers: int
    cores: np.ndarray
    cls: np.ndarray
    start: np.ndarray
    wait: np.ndarray
    response: np.ndarray | None
    response_mean_class: np.ndarray
    idle_servers: float
    hol_idle_servers: float
    number_in_system: float
    makespan: float
    status: str
    buffer: int
    log_left_out: dict = dataclasses.field(default_factory=dict)

    @property
    def utilisation(self) -> float:
        return 1.0 - self.idle_servers / self.servers

    @property
    def wait_mean(self) -> float:
        return float(np.mean(self.wait))

    def wait_quantile(self, q: float, cls: int | None = None) -> float:
        """The empirical quantile ``q`` of the waits (of class ``cls``; all jobs if ``None``)."""
        if not 0.0 < q < 1.0:
            raise ValueError(f"q must lie in (0, 1), got {q}")
        w = self.wait if cls is None else self.wait[self.cls == cls]
        return float(np.quantile(w, q)) if w.size else float("nan")

    def status_reason(self) -> str:
        if self.status == "overflow":
            return f"a job list filled at {self.buffer} entries: the replay stopped there"
        if self.status == "unconverged":
            return "the event cap was reached before every job left"
        return ""

    def compare_recorded(self, tol: float = 1e-6) -> dict:
        """The replayed waits beside those the log recorded: jobs with a recorded wait
        (``compared``), how many started more than ``tol`` seconds (plus 1e-12 of the clock)
        away from the recorded start (``differ``), both mean waits, the largest difference and
        the line of the first job that differs."""
        rec = self.log.wait
        known = np.isfinite(rec)
        diff = np.abs(self.wait - rec)
        bad = known & ~(diff <= tol + 1e-12 * np.abs(self.log.submit + rec))
        first = int(self.log.line[np.argmax(bad)]) if bad.any() else None
        return {
            "compared": int(known.sum()),
            "differ": int(bad.sum()),
            "recorded_wait_mean": float(np.mean(rec[known])) if known.any() else None,
            "replayed_wait_mean": float(np.mean(self.wait[known])) if known.any() else None,
            "max_abs_difference": float(np.max(diff[known])) if known.any() else None,
            "first_line_differing": first,
            "tolerance": tol,
        }

    def as_dict(self, quantiles=QUANTILES, compare: bool = False) -> dict:
        """The JSON object of ``jaxqueue mjqm simulate --trace LOG --json``: the keys of a
        policy run (an exact replay: each interval is the value itself), ``jobs``,
        ``utilisation`` and, with ``compare``, ``recorded`` (:meth:`compare_recorded`)."""

        def qs(w):
            return {f"{q:g}": float(np.quantile(w, q)) if w.size else None for q in quantiles}

        classes = []
        for c, cores in enumerate(self.cores):
            mask = self.cls == c
            w = self.wait[mask]
            row = {
                "cores": int(cores),
                "prob": float(mask.mean()),
                "jobs": int(mask.sum()),
                "work_share": float(
                    np.sum(cores * self.log.runtime[mask])
                    / max(np.sum(self.log.cores * self.log.runtime), 1e-300)
                ),
                "wait_mean": float(w.mean()),
                "wait_mean_ci": [float(w.mean())] * 2,
                "wait_var": float(w.var()),
                "wait_p90": float(np.quantile(w, 0.9)),
                "wait_quantiles": qs(w),
                "p_wait": float(np.mean(w > 0)),
                "response_mean": float(self.response_mean_class[c]),
                "response_mean_ci": [float(self.response_mean_class[c])] * 2,
            }
            if self.response is not None:
                row["response_quantiles"] = qs(self.response[mask])
            classes.append(row)
        w = self.wait
        resp_mean = float(
            np.sum(self.response_mean_class * np.bincount(self.cls, minlength=len(self.cores)))
            / len(w)
        )
        out = {
            "trace": self.log.path,
            "policy": self.policy,
            "servers": self.servers,
            "servers_from": self.log.servers_from,
            "jobs": int(len(w)),
            "left_out": self.log_left_out,
            "classes": classes,
            "wait_mean": float(w.mean()),
            "wait_mean_ci": [float(w.mean())] * 2,
            "wait_var": float(w.var()),
            "wait_p90": float(np.quantile(w, 0.9)),
            "wait_quantiles": qs(w),
            "p_wait": float(np.mean(w > 0)),
            "response_mean": resp_mean,
            "response_mean_ci": [resp_mean] * 2,
            "utilisation": self.utilisation,
            "idle_servers": self.idle_servers,
            "hol_idle_servers": self.hol_idle_servers,
            "number_in_system": self.number_in_system,
            "makespan": self.makespan,
            "replications": 1,
            "exact_replay": True,
            "status": self.status,
        }
        if self.response is not None:
            out["response_quantiles"] = qs(self.response)
        if self.status != "ok":
            out["status_reason"] = self.status_reason()
        if compare:
            out["recorded"] = self.compare_recorded()
        return out

    def to_frame(self):
        """One row per job: the log's columns, ``class``, ``start``, ``replayed_wait``."""
        frame = self.log.to_frame()
        frame["class"] = self.cls
        frame["start"] = self.start
        frame["replayed_wait"] = self.wait
        pandas()
        return frame


def replay(
    log,
    policy: str | Policy = "fcfs",
    *,
    servers: int | None = None,
    max_buffer: int = 1 << 20,
    progress=None,
) -> Replay:
    """Replay the job log ``log`` (a :class:`JobLog` or a path) under ``policy``: the jobs
    that ran (:attr:`JobLog.runnable`) arrive at their submit times with their cores and run
    times on ``servers`` (default: the log's ``MaxProcs``). Needs float64
    (``jax_enable_x64``).

    Returns:
        :class:`Replay`.

    Raises:
        ValueError: one line (a malformed log, no machine size, a job larger than the
            machine, a bad policy, float32).

    Examples:
        >>> r = replay("tests/traces/data/handwritten.swf", "fcfs")  # doctest: +SKIP
        >>> r.wait_mean, r.compare_recorded()["differ"]
    """
    pol = parse_policy(policy)
    if getattr(pol, "name", "") == "server-filling-gittins":
        # its ranks read each class's size law; a log gives run times, not laws
        raise ValueError(
            "policy: server-filling-gittins needs the classes' size laws, which a log replay "
            "does not have; fit them (jaxqueue.traces.fit) and simulate the fitted workload"
        )
    source = log if isinstance(log, JobLog) else read_log(log)
    ran, s, cores, cls = trace_jobs(source, servers)
    means = [float(np.mean(ran.runtime[cls == c])) for c in range(len(cores))]
    counts = np.bincount(cls, minlength=len(cores))
    wl = Workload(
        s,
        cores,
        counts / counts.sum(),
        [Deterministic(m if m > 0 else 1.0) for m in means],
        name="trace",  # one name: logs of like sizes share one compiled kernel
    )
    run = engine_replay(
        wl, pol, ran.submit, cls, ran.runtime, max_buffer=max_buffer, progress=progress
    )
    status = "overflow" if run.overflow else "unconverged" if run.capped else "ok"
    wait = run.start - ran.submit
    with np.errstate(invalid="ignore", divide="ignore"):
        resp_cls = run.resp / run.cnt
    T = run.time if run.time > 0 else float("nan")
    return Replay(
        log=ran,
        policy=pol.label,
        servers=s,
        cores=cores,
        cls=cls,
        start=run.start,
        wait=wait,
        response=None if pol.preemptive else wait + ran.runtime,
        response_mean_class=resp_cls,
        idle_servers=run.area_idle / T,
        hol_idle_servers=run.area_hol / T,
        number_in_system=run.area_jobs / T,
        makespan=run.time,
        status=status,
        buffer=run.buffer,
        log_left_out=source.left_out(),
    )
