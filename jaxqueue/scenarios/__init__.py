"""The papers' preset scenarios, each citing its source.
``get(name)`` returns a :class:`jaxqueue.mjqm.Workload` for the multiserver-job scenarios and a
:class:`jaxqueue.pools.Pool` for the balanced-fairness presets; ``names()`` lists them and
``describe(name)`` gives the source. ``get`` also reads a multiserver-job workload from a TOML or
JSON file (``get("my-cluster.toml")``; schema in :mod:`jaxqueue.mjqm._files`, example in
``examples/workloads/five-class-exp.toml``).

Multiserver-job queue (``mjsre``):

* ``five-class-exp``, ``five-class-erlang3``, ``five-class-hyperexp``, ``five-class-bpareto``:
  Section 8.2 / Table 2, s = 20, five classes (1, 2, 5, 10, 15 cores), Poisson arrivals; the
  exact parameters of each service law are in ``data/five-class.csv`` (mean service times as
  printed, 0.83 and 3.33, ``docs/errata.md`` item 4). ``lambda_ideal = 2.107``.
* ``two-class-200``: Section 8.1, s = 200, one-core and 100-core jobs equally likely,
  exponential service of mean 1 (``get("two-class-200", big_mean=m)`` varies the big jobs'
  mean, the x axis of Fig. 2(a)).
* ``two-class-256``: Section 7.4, s = 256, one-core jobs (mean 1) and all-core jobs (mean 40,
  probability 1e-3), exponential; its stability limit has the closed form of eq. (8).
* ``borg-cell-b``: s = 2048, 26 classes measured on Google Borg cell B
  (``data/borg-cell-b-26.csv``; the paper's Section 8.3 uses a 17-class version of the same
  data), exponential service times with the measured means.

Balanced fairness (``bf-clusters`` Section 5): ``m-model-sym`` and ``m-model-asym``
(see :func:`jaxqueue.pools.preset_pool`).
"""

from __future__ import annotations

from .._document import is_path

__all__ = ["get", "names", "describe"]

_SOURCES = {
    "five-class-exp": "mjsre Section 8.2, Table 2 (exponential), s = 20",
    "five-class-erlang3": "mjsre Section 8.2, Table 2 (Erlang-3), s = 20",
    "five-class-hyperexp": "mjsre Section 8.2, Table 2 (2-phase hyperexponential)",
    "five-class-bpareto": "mjsre Section 8.2, Table 2 (bounded Pareto, shape 1.4)",
    "two-class-200": "mjsre Section 8.1, Fig. 2(a): s = 200, 1 or 100 cores",
    "two-class-256": "mjsre Section 7.4, Table 1: s = 256, 1 or 256 cores",
    "borg-cell-b": "Google Borg cell B, 26 classes, s = 2048 (mjsre Section 8.3)",
    "m-model-sym": "bf-clusters Section 5: M model, mu = (1, 1, 1)",
    "m-model-asym": "bf-clusters Section 5: M model, servers 1 and 3 only",
}


def _builders():
    """The module of the builders (``_presets.py``), loaded with the models and jax when a
    scenario is built or a file read, so that the command line lists the names without them."""
    from . import _presets  # the models and jax: not when the command line lists the names

    return _presets


def names() -> list[str]:
    """All scenario names."""
    return list(_SOURCES)


def describe(name: str) -> str:
    """The source of scenario ``name`` (for a workload file: the file, once it parses)."""
    if name not in _SOURCES and is_path(name):
        _builders().load_workload(name)
        return f"TOML/JSON workload file {name}"
    _check(name)
    return _SOURCES[name]


def _check(name):
    if name not in _SOURCES:
        raise ValueError(
            f"unknown scenario {name!r}; choose one of {names()} or a TOML/JSON workload file"
        )


def get(name, **params):
    """The scenario ``name`` (a ``Workload`` or, for the M models, a ``Pool``).

    Args:
        name: one of :func:`names`, or the path of a TOML or JSON workload file (a name with a
            path separator or a ``.toml`` / ``.json`` suffix, or an existing file; schema in
            :mod:`jaxqueue.mjqm._files`).
        **params: scenario parameters where supported (``two-class-200``: ``big_mean``,
            ``small_mean``; ``two-class-256``: ``p_big``, ``big_mean``); none for a file.

    Raises:
        ValueError: unknown name or parameter; for a file, one line naming the file and the
            field (missing file, bad syntax, unknown or missing key, wrong type or value).

    Examples:
        >>> w = get("five-class-exp")
        >>> w.servers, w.n_classes
        ((20,), 5)
    """
    if name not in _SOURCES and is_path(name):
        if params:
            raise ValueError(f"{name}: a workload file takes no parameters, got {sorted(params)}")
        return _builders().load_workload(name)
    _check(name)
    build = _builders().BUILDERS[name]
    try:
        return build(**params)
    except TypeError:
        raise ValueError(f"scenario {name!r} does not take parameters {sorted(params)}") from None
