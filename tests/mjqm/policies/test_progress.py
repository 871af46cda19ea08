"""The jobs done of an event simulation, told as it goes (``simulate_loads(progress=...)``,
``mjqm simulate --policy`` on the live line): the run goes as several calls of one program
and gives the numbers of one call, bit for bit."""

from __future__ import annotations

import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxqueue.cli import main
from jaxqueue.dist import Exponential
from jaxqueue.mjqm import Workload
from jaxqueue.mjqm.engines.events import _loop, simulate_loads
from jaxqueue.mjqm.options import Execution

FRACTION = re.compile(r"(\d+) replications x (\d+) jobs, (\d+) slots: (\d+)/(\d+) jobs \((\d+)%\)")


def _small():
    return Workload(
        servers=3,
        cores=(1, 2),
        probs=(0.6, 0.4),
        services=(Exponential(1.0), Exponential(1.25)),
        name="small",
    )


def _assert_same(a, b):
    """Every field of two results equal, bit for bit (NaN where NaN)."""
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def _told(text: str):
    """The jobs done told in ``text``: ``(replications, slots, done, total, percent)`` each."""
    out = []
    for m in FRACTION.finditer(text):
        r, n, b, k, total, p = map(int, m.groups())
        assert total == r * n and p == round(100 * k / total)
        out.append((r, b, k, total, p))
    return out


def _runs(**kw):
    """``first-fit`` on the small workload at 0.8, 8 replications of 3,000 jobs, without
    progress and with it: both results and the lines told."""
    kw = dict(key=jax.random.key(4), n_jobs=3000, warmup=500, n_replications=8) | kw
    (plain,) = simulate_loads(_small(), [0.8], "first-fit", **kw)
    lines: list[str] = []
    (res,) = simulate_loads(_small(), [0.8], "first-fit", progress=lines.append, **kw)
    return plain, res, lines


def _rising(run):
    """The jobs done of one run rise to all of them."""
    done = [t[2] for t in run]
    assert done == sorted(done) and done[-1] == run[-1][3] and run[-1][4] == 100


def test_progress_tells_the_jobs_done_and_changes_no_number(monkeypatch, capsys, small_toml):
    """Told after each call: the jobs done over all replications, rising to all of them in
    about :data:`_loop.PARTS` steps; every field equals that of one call without progress.
    ``mjqm simulate --policy`` with the live line (forced: stderr is not a terminal here):
    the jobs done on stderr, stdout the JSON object of the run without it (``-q``; the same
    two programs as the library's runs: the workload of the file, 8 replications)."""
    plain, res, lines = _runs()
    _assert_same(plain, res)
    told = _told("\n".join(lines))
    assert _loop.PARTS // 2 <= len(told) <= _loop.PARTS and len({t[:2] for t in told}) == 1
    assert told[0][0] == 8
    _rising(told)
    monkeypatch.setenv("JAXQUEUE_PROGRESS", "1")
    f = small_toml
    argv = ["mjqm", "simulate", "--scenario", str(f), "--lam", "0.8", "--policy", "first-fit"]
    argv += ["--jobs", "3000", "--replications", "8", "--json"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    _rising(_told(err))
    assert not _told(out)
    assert main([*argv, "-q"]) == 0
    quiet, err = capsys.readouterr()
    assert not _told(err)
    drop = lambda d: {k: v for k, v in d.items() if k != "elapsed_s"}  # noqa: E731
    assert drop(json.loads(out)) == drop(json.loads(quiet))


@pytest.mark.slow
def test_slow_progress_through_the_tail_batch_and_the_larger_buffer(monkeypatch):
    """The last 2 of 6 replications to finish go on in a batch of their own
    (``_loop._TAIL``); those that fill their first buffer go on with twice the slots, told
    again; in float64 and in float32 (the epoch moved on schedule across calls) every field
    equals that of one call without progress."""
    monkeypatch.setattr(_loop, "_TAIL_MIN", 6)
    monkeypatch.setattr(_loop, "_TAIL", 3)  # (a shape of its own: compiled with these)
    for dtype in (jnp.float64, jnp.float32):
        kw = dict(execution=Execution(buffer=4), max_buffer=8, n_replications=6, dtype=dtype)
        plain, res, lines = _runs(**kw)
        _assert_same(plain, res)
        told = _told("\n".join(lines))
        first, again = [t for t in told if t[1] == 4], [t for t in told if t[1] == 8]
        assert first and again and first[0][0] == 6 and again[0][0] < 6, lines
        _rising(first)
        _rising(again)
