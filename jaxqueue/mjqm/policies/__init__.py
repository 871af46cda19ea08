"""Scheduling policies of the multiserver-job queue, one file each.

``parse_policy("window:4")`` gives the policy object of a command-line name; ``POLICIES``
lists the names. The engine that runs them on job lists is :mod:`jaxqueue.mjqm.engines.events`;
those with ``recurrence = True`` (``FCFS``, ``RandomAssignment``) also have a form on the
ordered workload vector that :mod:`jaxqueue.mjqm.engines.recurrence` runs.
"""

from __future__ import annotations

from ._base import Jobs, Order, Policy, fcfs_start
from ._base import first_fit as _first_fit_rule
from .balanced_splitting import BalancedSplitting
from .easy_backfilling import EasyBackfilling
from .easy_backfilling_estimate import EasyBackfillingEstimate
from .fcfs import FCFS
from .first_fit import FirstFit
from .first_fit_srpt import FirstFitSRPT
from .least_servers_first import LeastServersFirst
from .maxweight import MaxWeight
from .msf import MostServersFirst
from .msfq import MSFQ
from .preemptive_first_fit import PreemptiveFirstFit
from .random_assignment import RandomAssignment
from .server_filling import ServerFilling
from .server_filling_gittins import ServerFillingGittins
from .server_filling_srpt import ServerFillingSRPT
from .srpt_greedy import SRPTGreedy
from .window import Window

# `from .first_fit import ...` binds the submodule to the package name `first_fit`
first_fit = _first_fit_rule

__all__ = [
    "Policy",
    "Order",
    "Jobs",
    "FCFS",
    "FirstFit",
    "Window",
    "PreemptiveFirstFit",
    "MostServersFirst",
    "LeastServersFirst",
    "ServerFilling",
    "EasyBackfilling",
    "EasyBackfillingEstimate",
    "MaxWeight",
    "SRPTGreedy",
    "FirstFitSRPT",
    "ServerFillingSRPT",
    "ServerFillingGittins",
    "MSFQ",
    "BalancedSplitting",
    "RandomAssignment",
    "POLICIES",
    "parse_policy",
    "first_fit",
    "fcfs_start",
]

_SIMPLE = {
    cls.name: cls
    for cls in (
        FCFS,
        FirstFit,
        PreemptiveFirstFit,
        MostServersFirst,
        LeastServersFirst,
        ServerFilling,
        EasyBackfilling,
        MaxWeight,
        SRPTGreedy,
        FirstFitSRPT,
        ServerFillingSRPT,
        ServerFillingGittins,
    )
}

#: Policy names as on the command line (``window`` takes ``:W``, ``easy-backfilling``
#: optionally ``:estimate=F``, ``msfq`` ``:L``, ``balanced-splitting`` one partition size per
#: class and the helpers, ``:R0/R1/.../Rm-1+H``, or none: default partitions, ``:psi=X``).
POLICIES = (
    "fcfs",
    "first-fit",
    "window:W",
    "preemptive-first-fit",
    "msf",
    "least-servers-first",
    "server-filling",
    "easy-backfilling",
    "easy-backfilling:estimate=F",
    "maxweight",
    "srpt-greedy",
    "first-fit-srpt",
    "server-filling-srpt",
    "server-filling-gittins",
    "msfq:L",
    "balanced-splitting:R0/.../Rm-1+H",
)


def _keyed_number(param: str, key: str) -> float | None:
    """The number ``X`` of a parameter ``KEY=X`` (``None`` for another key or no number)."""
    name, eq, value = param.partition("=")
    try:
        return float(value) if eq and name.strip() == key else None
    except ValueError:
        return None


def parse_policy(name: str | Policy) -> Policy:
    """The policy of a name ``NAME[:PARAM]`` (``POLICIES``); a policy object passes through.

    Raises:
        ValueError: an unknown name, a parameter where none is taken, or a bad ``W``,
            ``F``, ``L`` or partition.
    """
    if isinstance(name, Policy):
        return name
    base, sep, param = str(name).strip().partition(":")
    if base == "window":
        if not param.strip().isdigit() or int(param) < 1:
            raise ValueError(f"policy {name!r}: window needs an integer W >= 1, as window:4")
        return Window(int(param))
    if base == "msfq":
        if not param.strip().isdigit():
            raise ValueError(f"policy {name!r}: msfq needs an integer L >= 0, as msfq:2")
        return MSFQ(int(param))
    if base == "balanced-splitting" and (not sep or param.strip().startswith("psi")):
        psi = _keyed_number(param, "psi") if sep else 1.0
        if psi is None or not 0.0 < psi < float("inf"):
            raise ValueError(
                f"policy {name!r}: balanced-splitting takes psi=X with a number X > 0 (the "
                "default partitions scaled by X), or the partitions R0/.../Rm-1+H"
            )
        return BalancedSplitting(psi=psi)
    if base == "balanced-splitting":
        parts, _, h = param.partition("+")
        try:
            reserve = tuple(int(x) for x in parts.split("/"))
            helpers = int(h) if h.strip() else 0
        except ValueError:
            reserve, helpers = (), -1
        if not reserve or min(reserve) < 0 or helpers < 0:
            raise ValueError(
                f"policy {name!r}: balanced-splitting needs one partition size per class and "
                "the helpers, integers >= 0, as balanced-splitting:4/2/2+8"
            )
        return BalancedSplitting(reserve, helpers)
    if base == "easy-backfilling" and sep:
        F = _keyed_number(param, "estimate")
        if F is None or not 1.0 < F < float("inf"):
            raise ValueError(
                f"policy {name!r}: easy-backfilling takes estimate=F with a number F > 1, "
                "as easy-backfilling:estimate=2"
            )
        return EasyBackfillingEstimate(F)
    if base in _SIMPLE and not sep:
        return _SIMPLE[base]()
    if base in _SIMPLE:
        raise ValueError(f"policy {name!r}: {base} takes no parameter")
    raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}")
