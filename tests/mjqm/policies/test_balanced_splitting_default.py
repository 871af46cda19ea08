"""Bare ``balanced-splitting`` (and ``balanced-splitting:psi=X``): the default partitions of
NeDS-Lab's mjqm-simulator (``balanced_splitting_builder``: class ``c`` of need ``n_c`` and
work share ``q_c / Q`` owns ``n_c floor(psi (s / n_c) q_c / Q)`` servers, the rest are helpers;
``psi > 1``: all helpers), worked by hand here, and the one-line refusal where they leave a
class unable to start."""

from __future__ import annotations

import jax
import pytest

from jaxqueue import scenarios
from jaxqueue.dist import Exponential
from jaxqueue.mjqm import Workload, simulate_policy
from jaxqueue.mjqm.policies import BalancedSplitting, parse_policy

# s = 4; works q = (1 x 0.5 x 1, 2 x 0.5 x 1) = (0.5, 1): shares 1/3, 2/3
SPLIT = Workload(
    servers=4,
    cores=(1, 2),
    probs=(0.5, 0.5),
    services=(Exponential(1.0), Exponential(1.0)),
)


def test_default_partitions_by_hand():
    # R_0 = 1 floor(4 / 1 x 1/3) = 1, R_1 = 2 floor(4 / 2 x 2/3) = 2, H = 4 - 3 = 1
    bound = parse_policy("balanced-splitting").bind(SPLIT)
    assert (bound.reserve, bound.helpers) == ((1, 2), 1)
    assert bound.label == "balanced-splitting:1/2+1"
    # psi = 2 (> 1): every server a helper; psi = 0.5: R_0 = floor(2/3) = 0, R_1 = 2 floor(2/3)
    bound = parse_policy("balanced-splitting:psi=2").bind(SPLIT)
    assert (bound.reserve, bound.helpers) == ((0, 0), 4)
    bound = parse_policy("balanced-splitting:psi=0.5").bind(SPLIT)
    assert (bound.reserve, bound.helpers) == ((0, 0), 4)
    assert parse_policy("balanced-splitting") == BalancedSplitting()
    assert parse_policy("balanced-splitting:psi=0.5").label == "balanced-splitting:psi=0.5"


def test_default_that_leaves_a_class_out_is_refused_in_one_line():
    # five-class-exp: works 0.25, 0.166, 1.25, 6.327, 1.5 (sum 9.493): only the 10-server
    # class gets a partition (10 floor(2 x 0.667) = 10), 10 helpers: the 15-server class fits
    # neither
    wl = scenarios.get("five-class-exp")
    with pytest.raises(ValueError) as e:
        parse_policy("balanced-splitting").bind(wl)
    msg = str(e.value)
    assert "0/0/0/10/0+10" in msg and "R0/.../Rm-1+H" in msg and "class 4" in msg
    assert "\n" not in msg


@pytest.mark.parametrize("bad", ["balanced-splitting:psi=0", "balanced-splitting:psi=x"])
def test_bad_psi(bad):
    with pytest.raises(ValueError, match="psi=X"):
        parse_policy(bad)


@pytest.mark.slow  # a compile of the all-rows layout (30 s on a loaded CPU)
def test_bare_balanced_splitting_runs_as_its_partitions():
    """The bare name runs the partitions it computed: the same numbers as writing them."""
    key = jax.random.key(3)
    kw = dict(key=key, n_jobs=400, n_replications=8)
    bare = simulate_policy(SPLIT, 1.2, "balanced-splitting", **kw)
    given = simulate_policy(SPLIT, 1.2, "balanced-splitting:1/2+1", **kw)
    assert bare.policy == given.policy == "balanced-splitting:1/2+1"
    assert float(bare.response_mean.mean) == float(given.response_mean.mean)


def test_command_line_refuses_a_default_that_leaves_a_class_out(capsys):
    """``mjqm simulate --policy balanced-splitting`` on five-class-exp: one error line, exit
    status 1, before any run."""
    from jaxqueue.cli import main

    argv = ["mjqm", "simulate", "--scenario", "five-class-exp", "--lam", "1.0"]
    status = main([*argv, "--policy", "balanced-splitting", "--jobs", "100"])
    lines = capsys.readouterr().err.strip().splitlines()
    errors = [x for x in lines if "error" in x]
    assert status == 1 and len(errors) == 1 and "Traceback" not in "".join(lines)
    assert "0/0/0/10/0+10" in errors[0] and "R0/.../Rm-1+H" in errors[0]
