"""Old and new recurrence engine (forward, backward, pile growth) in one process.

Usage: ``python -m benchmarks.recurrence_old_new OLD_CHECKOUT [NAME ...] [--time]``, with
``OLD_CHECKOUT`` a folder holding another revision's ``jaxqueue/`` (``git archive REV jaxqueue
| tar -x -C DIR``). Its ``jaxqueue/mjqm`` is imported as ``jaxqueue.mjqm_old`` (its relative
imports of the layers below resolve to this checkout's). Asserts that every float64 output is
the same bit for bit: the forward scan (FCFS, random assignment, several resource types,
specific servers), the backward sampler and pile growth. ``NAME``: only the cases whose name
holds it. With ``--time``: best of 3, interleaved, wall seconds.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
import time

import jax
import numpy as np

from benchmarks._timing import load_as


def _fields(res) -> dict:
    if dataclasses.is_dataclass(res):
        return {f.name: getattr(res, f.name) for f in dataclasses.fields(res)}
    return dict(vars(res))


def _same(name: str, a, b) -> None:
    fa, fb = _fields(a), _fields(b)
    for k in sorted(set(fa) & set(fb)):
        x, y = fa[k], fb[k]
        if k in ("workload", "seconds", "elapsed", "tests", "rounds") or k.endswith("_s"):
            continue
        lx, ly = jax.tree.leaves(x), jax.tree.leaves(y)
        assert len(lx) == len(ly), (name, k)
        for u, v in zip(lx, ly, strict=True):
            if hasattr(u, "dtype") and jax.dtypes.issubdtype(u.dtype, jax.dtypes.prng_key):
                u, v = jax.random.key_data(u), jax.random.key_data(v)
            ua, va = np.asarray(u), np.asarray(v)
            if ua.dtype == object or not np.issubdtype(ua.dtype, np.number):
                assert str(u) == str(v), (name, k, u, v)
            else:
                np.testing.assert_array_equal(ua, va, err_msg=f"{name}.{k}")
    print(f"{name}: same ({len(set(fa) & set(fb))} fields)")


def _random(mjqm) -> dict:
    """Random assignment: ``policy=RandomAssignment()`` where the code has it, else the
    former ``variant="random"`` / ``random_assignment=True``."""
    ra = getattr(mjqm.policies, "RandomAssignment", None)
    if ra is None:
        return {"variant": "random"}, {"random_assignment": True}
    return {"policy": ra()}, {"policy": ra()}


def _chunked(mjqm) -> dict:
    """Blocks of 100 jobs: ``execution=Execution(chunk=100)`` where the code has it, else the
    former ``chunk=100``."""
    options = getattr(mjqm, "options", None)
    return {"chunk": 100} if options is None else {"execution": options.Execution(chunk=100)}


def _cases(mjqm):
    from jaxqueue.dist import Exponential

    W = mjqm.Workload
    plain = W(4, [1, 2, 4], [0.5, 0.3, 0.2], [Exponential(1.0), Exponential(0.7), Exponential(0.4)])
    multi = W([4, 2], [[1, 0], [2, 1], [0, 2]], [0.5, 0.3, 0.2], [Exponential(1.0)] * 3)
    spec = W(6, [1, 2], [0.5, 0.5], [Exponential(1.0)] * 2, specific=[1, 0])
    fw = dict(n_jobs=3000, n_replications=64, override=True, dtype=np.float64)
    key = jax.random.key(3)
    ra_fwd, ra_pile = _random(mjqm)
    return {
        "forward fcfs": lambda: mjqm.simulate(plain, 0.9, key=key, **fw),
        "forward fcfs chunked": lambda: mjqm.simulate(plain, 0.9, key=key, **_chunked(mjqm), **fw),
        "forward random": lambda: mjqm.simulate(plain, 0.5, key=key, **ra_fwd, **fw),
        "forward multi-resource": lambda: mjqm.simulate(multi, 0.8, key=key, **fw),
        "forward specific": lambda: mjqm.simulate(spec, 1.0, key=key, **fw),
        "backward": lambda: mjqm.sample_backward(
            plain, 0.9, 256, key=key, override=True, dtype=np.float64
        ),
        "pile growth": lambda: mjqm.pile_growth(plain, key=key, rel_tol=0.05, dtype=np.float64),
        "pile growth random": lambda: mjqm.pile_growth(
            plain, key=key, rel_tol=0.05, dtype=np.float64, **ra_pile
        ),
    }


def main(argv: list[str]) -> None:
    jax.config.update("jax_enable_x64", True)
    import jaxqueue.mjqm as new

    old = load_as("jaxqueue.mjqm_old", pathlib.Path(argv[0]) / "jaxqueue" / "mjqm")
    olds, news = _cases(old), _cases(new)
    best: dict[str, list[float]] = {}
    only = [a for a in argv[1:] if not a.startswith("--")]
    for name in news:
        if only and not any(o in name for o in only):
            continue
        _same(name, olds[name](), news[name]())
        if "--time" not in argv:
            continue
        for _ in range(3):
            for tag, fn in (("old", olds[name]), ("new", news[name])):
                t0 = time.perf_counter()
                jax.block_until_ready(_fields(fn()).get("final_state", 0))
                b = best.setdefault(f"{name} {tag}", [float("inf")])
                b[0] = min(b[0], time.perf_counter() - t0)
    for k, (t,) in best.items():
        print(f"{k}: {t:.3f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
