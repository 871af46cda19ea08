"""What the ``jaxqueue mjqm`` commands share: the per-class table and the stability limit a
command computes once and passes to every run it makes."""

from __future__ import annotations

from ._common import format_table, interval, log


def classes_table(out: dict, columns=("wait_mean", "wait_var", "wait_p90")) -> str:
    """Per-class table of ``mjqm simulate``, ``sample`` and the policies: the class (0-based,
    as in every CSV), cores, probability, the first column with its interval, then the
    others."""
    first, *rest = columns
    rows = [
        (i, c["cores"], c["prob"], c[first], interval(c[first + "_ci"]), *(c[k] for k in rest))
        for i, c in enumerate(out["classes"])
    ]
    return format_table(["class", "cores", "prob", first, "CI", *rest], rows)


def limit_key(key):
    """The key of a command's stability-limit estimate, apart from its runs' ``key``."""
    import jax  # jax only once a command runs: the CLI starts without it

    return jax.random.split(key)[1]


def command_limit(wl, policy, key, *, lam=None, override: bool = False, tag: str = "mjqm"):
    """The stability limit of ``policy`` on ``wl`` for a command (``stability_limit`` with
    :func:`limit_key`); a ``lam`` at or beyond ``lambda_ideal`` gets that bound instead, so
    that the run refuses it before any estimate."""
    from ..mjqm import stability_limit  # the models load when the command runs

    ideal = stability_limit(wl, policy, method="ideal")
    if lam is not None and not override and lam >= ideal.lambda_c:
        return ideal
    res = stability_limit(wl, policy, key=limit_key(key))
    log(f"[{tag}] stability limit: {res.describe()}")
    return res
