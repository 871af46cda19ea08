"""A job log replayed: its own arrivals, cores and run times through the event engine
(:func:`jaxqueue.mjqm.engines.events.replay`) under any job-list policy, on the log's machine
(``MaxProcs``) or a given one. One replication and no random number: an exact replay, whose
figures are the log's own (the intervals beside them, for the process the log samples, come
from sections of the log in time order: ``_intervals``; the status is ``ok`` unless a job list
filled at its cap, ``overflow``, or the event cap was reached, ``unconverged``).

Beside the waits the log recorded, :meth:`Replay.compare_recorded` says how many jobs started
at another time. Where the log's scheduler is one the package has (FCFS; EASY backfilling,
with the run times or, as ``easy-backfilling:estimate=requested``, the log's requested times
as the estimates: ``_requested``) the replay reproduces the recorded starts up to what the log
leaves out (jobs cancelled while waiting, reservations, down time, other queues). A long log
under a non-preemptive policy is replayed in sections side by side, each checked exact
(``_split``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .._tables import pandas
from ..dist import Deterministic
from ..mjqm import Workload
from ..mjqm.engines.events import replay as engine_replay
from ..mjqm.policies import Policy, parse_policy
from ._intervals import SECTIONS, Sections
from ._read import JobLog
from ._read import read as read_log
from ._requested import REQUESTED, EasyBackfillingRequested, estimates
from ._split import replay_in_sections, timeline

__all__ = ["Replay", "replay", "trace_jobs"]

QUANTILES = (0.5, 0.9, 0.99)
SECTION_JOBS = 8192  # jobs per section of a long log (_split)
MAX_SECTIONS = 64
MARGIN = 512  # the first warm-up of a section, at least


def _sections(n: int) -> int:
    """How many sections a log of ``n`` jobs is replayed in by default."""
    return max(1, min(MAX_SECTIONS, n // SECTION_JOBS))


def trace_jobs(log, servers: int | None = None, jobs: int | None = None):
    """The jobs of ``log`` (a :class:`JobLog` or a path) that ran (the first ``jobs`` of them
    if given), the machine size and the classes: ``(log of those jobs, servers, class cores
    ascending, class of each job)``.

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
    ran = log.select(np.flatnonzero(log.runnable)[:jobs])
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
        estimates: under ``easy-backfilling:estimate=requested``, how many jobs were planned
            with which estimate (``_requested.estimates``), else ``None``.
        sections: how many sections side by side the log was replayed in (``_split``; 1: the
            whole log at once).
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
    estimates: dict | None = None
    sections: int = 1

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

    def as_dict(
        self, quantiles=QUANTILES, compare: bool = False, *, tails=(), level: float = 0.95
    ) -> dict:
        """The JSON object of ``jaxqueue mjqm simulate --trace LOG --json``: the keys of a
        policy run, overall and per class (the means, ``wait_quantiles`` and
        ``response_quantiles``, with ``tails`` ``wait_tail`` and ``response_tail``, each with
        ``..._ci`` beside it), ``jobs``, ``utilisation``, ``stability`` and, with ``compare``,
        ``recorded`` (:meth:`compare_recorded`).

        The values are the log's own, exactly; the intervals are for the process the log
        samples, by sections of the log in time order (``_intervals``; ``None`` where a class
        has too few jobs, the reason in ``intervals``). ``stability``: a replay runs the log's
        own arrivals and checks no load against a limit (``lambda_c`` ``None``, the reason
        given). ``response_quantiles`` are ``None`` under a preemptive policy (the replay
        knows each job's first start, not its end)."""
        preemptive = self.response is None

        def block(mask):
            w = Sections(self.wait[mask], level)
            r = None if preemptive else Sections(self.response[mask], level)
            out = {}
            m, ci = w.mean()
            out["wait_mean"], out["wait_mean_ci"] = m, ci
            for kind, sec in (("response", r), ("wait", w)):
                qs = {format(float(q), "g"): _at(sec, "quantile", q) for q in quantiles}
                out[f"{kind}_quantiles"] = {k: v[0] for k, v in qs.items()}
                out[f"{kind}_quantiles_ci"] = {k: v[1] for k, v in qs.items()}
                if tails:
                    ts = {str(t): _at(sec, "tail", float(t)) for t in tails}
                    out[f"{kind}_tail"] = {k: v[0] for k, v in ts.items()}
                    out[f"{kind}_tail_ci"] = {k: v[1] for k, v in ts.items()}
            x = self.wait[mask]
            out["wait_var"] = float(x.var()) if x.size else None
            out["wait_p90"] = float(np.quantile(x, 0.9)) if x.size else None
            out["p_wait"] = float(np.mean(x > 0)) if x.size else None
            return out, w

        classes, reasons = [], {}
        for c, cores in enumerate(self.cores):
            mask = self.cls == c
            row, w = block(mask)
            rm = float(self.response_mean_class[c])
            if preemptive:  # per class means from the engine's sums: no sections
                r_ci = None
            else:
                rm, r_ci = Sections(self.response[mask], level).mean()
            classes.append(
                {
                    "cores": int(cores),
                    "prob": float(mask.mean()),
                    "jobs": int(mask.sum()),
                    "work_share": float(
                        np.sum(cores * self.log.runtime[mask])
                        / max(np.sum(self.log.cores * self.log.runtime), 1e-300)
                    ),
                    **row,
                    "response_mean": rm,
                    "response_mean_ci": r_ci,
                }
            )
            if not w.ok:
                reasons[str(c)] = w.reason()
        overall, w = block(np.ones(len(self.wait), bool))
        if preemptive:
            counts = np.bincount(self.cls, minlength=len(self.cores))
            resp_mean = float(np.sum(self.response_mean_class * counts) / len(self.wait))
            resp_ci = None
        else:
            resp_mean, resp_ci = Sections(self.response, level).mean()
        if not w.ok:
            reasons["all"] = w.reason()
        span = float(self.log.submit[-1] - self.log.submit[0])
        out = {
            "trace": self.log.path,
            "policy": self.policy,
            "servers": self.servers,
            "servers_from": self.log.servers_from,
            "jobs": int(len(self.wait)),
            "lam": (len(self.wait) - 1) / span if span > 0 else None,
            "left_out": self.log_left_out,
            "classes": classes,
            **overall,
            "response_mean": resp_mean,
            "response_mean_ci": resp_ci,
            "utilisation": self.utilisation,
            "idle_servers": self.idle_servers,
            "hol_idle_servers": self.hol_idle_servers,
            "number_in_system": self.number_in_system,
            "makespan": self.makespan,
            "replications": 1,
            "sections": self.sections,
            "exact_replay": True,
            "intervals": {
                "method": "sections",
                "sections": SECTIONS,
                "level": level,
                "note": "the values are the log's own; each interval is for the process the "
                f"log samples, from {SECTIONS} consecutive sections of its jobs in submission "
                "order (batch means; Woodruff's interval for quantiles)",
                "none": reasons,
            },
            "stability": {
                "lambda_c": None,
                "ci": None,
                "lambda_c_ci": None,
                "method": "none",
                "reason": "a replay runs the log's own arrivals: no load is checked against a "
                "stability limit",
            },
            "status": self.status,
        }
        if preemptive:
            out["response_quantiles_reason"] = (
                f"{self.policy} preempts: the replay knows each job's first start, not its end"
            )
        if self.status != "ok":
            out["status_reason"] = self.status_reason()
        if self.estimates is not None:
            out["estimates"] = self.estimates
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


def _at(sections, what, x):
    """``sections.quantile(x)`` or ``.tail(x)``; ``(None, None)`` without sections."""
    return (None, None) if sections is None else getattr(sections, what)(x)


def replay(
    log,
    policy: str | Policy = "fcfs",
    *,
    servers: int | None = None,
    jobs: int | None = None,
    max_buffer: int = 1 << 20,
    sections: int | None = None,
    progress=None,
) -> Replay:
    """Replay the job log ``log`` (a :class:`JobLog` or a path) under ``policy``: the jobs
    that ran (:attr:`JobLog.runnable`) arrive at their submit times with their cores and run
    times on ``servers`` (default: the log's ``MaxProcs``); with ``jobs``, the first ``jobs``
    of them only. Needs float64 (``jax_enable_x64``).

    Args:
        sections: replay the log as this many sections side by side, each checked exact
            (``_split``; a non-preemptive policy without a state of its own; the whole log
            at once where a check cannot pass); default by the log's length
            (:data:`SECTION_JOBS` jobs a section), 1: the whole log at once.
        progress: optional ``callable(str)``, told of each batch of sections replayed.

    Returns:
        :class:`Replay`.

    Raises:
        ValueError: one line (a malformed log, no machine size, a job larger than the
            machine, a bad policy, float32).

    Examples:
        >>> r = replay("tests/traces/data/handwritten.swf", "fcfs")  # doctest: +SKIP
        >>> r.wait_mean, r.compare_recorded()["differ"]
    """
    requested = isinstance(policy, str) and policy.strip() == REQUESTED
    pol = EasyBackfillingRequested() if requested else parse_policy(policy)
    if getattr(pol, "name", "") == "server-filling-gittins":
        # its ranks read each class's size law; a log gives run times, not laws
        raise ValueError(
            "policy: server-filling-gittins needs the classes' size laws, which a log replay "
            "does not have; fit them (jaxqueue.traces.fit) and simulate the fitted workload"
        )
    source = log if isinstance(log, JobLog) else read_log(log)
    if jobs is not None and (isinstance(jobs, bool) or not int(jobs) == jobs or jobs < 1):
        raise ValueError(f"jobs must be an integer >= 1, got {jobs!r}")
    ran, s, cores, cls = trace_jobs(source, servers, jobs)
    means = [float(np.mean(ran.runtime[cls == c])) for c in range(len(cores))]
    counts = np.bincount(cls, minlength=len(cores))
    wl = Workload(
        s,
        cores,
        counts / counts.sum(),
        [Deterministic(m if m > 0 else 1.0) for m in means],
        name="trace",  # one name: logs of like sizes share one compiled kernel
    )
    sizes, chosen = estimates(ran.requested_time, ran.runtime) if requested else (None, None)
    C = _sections(len(ran.submit)) if sections is None else int(sections)
    start = None
    if C > 1 and not pol.preemptive and not pol.memory:
        margin = max(MARGIN, -(-len(ran.submit) // C) // 8)
        args = (wl, pol, ran.submit, cls, ran.runtime, sizes)
        start = replay_in_sections(
            *args, sections=C, margin=margin, max_buffer=max_buffer, progress=progress
        )
    if start is not None:  # every column exact (_split): the sums from the starts
        area_jobs, area_idle, area_hol, T = timeline(ran.submit, start, ran.runtime, ran.cores, s)
        wait = start - ran.submit
        resp = wait + ran.runtime
        resp_cls = np.bincount(cls, resp, len(cores)) / counts
        status, buffer, used = "ok", 0, C
    else:
        given = {"max_buffer": max_buffer, "sizes": sizes, "progress": progress}
        run = engine_replay(wl, pol, ran.submit, cls, ran.runtime, **given)
        status = "overflow" if run.overflow else "unconverged" if run.capped else "ok"
        start, buffer, used = run.start, run.buffer, 1
        wait = start - ran.submit
        with np.errstate(invalid="ignore", divide="ignore"):
            resp_cls = run.resp / run.cnt
        area_jobs, area_idle, area_hol, T = run.area_jobs, run.area_idle, run.area_hol, run.time
    makespan = T
    T = T if T > 0 else float("nan")
    return Replay(
        log=ran,
        policy=pol.label,
        servers=s,
        cores=cores,
        cls=cls,
        start=start,
        wait=wait,
        response=None if pol.preemptive else wait + ran.runtime,
        response_mean_class=resp_cls,
        idle_servers=area_idle / T,
        hol_idle_servers=area_hol / T,
        number_in_system=area_jobs / T,
        makespan=makespan,
        status=status,
        buffer=buffer,
        log_left_out=source.left_out(),
        estimates=chosen,
        sections=used,
    )
