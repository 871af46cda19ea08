"""What a newcomer reads first: every option's help shows its default, in plain text (no
reStructuredText markup), no option is accepted while hidden from the help, a bad number names
its field, one exit status per kind of bad value, and an estimate's repr shows its numbers."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from jaxqueue.cli import _leaves, build_parser, main

LEAVES = list(_leaves(build_parser()))
IDS = [" ".join(p.prog.split()[1:]) for p in LEAVES]


def _options(leaf):
    """The options that take a value (flags have no default to show)."""
    for action in leaf._actions:
        if action.option_strings and action.nargs != 0 and action.help is not argparse.SUPPRESS:
            yield action


@pytest.mark.parametrize("leaf", LEAVES, ids=IDS)
def test_every_option_shows_its_default(leaf):
    formatter = leaf._get_formatter()
    missing = [
        a.option_strings[-1]
        for a in _options(leaf)
        if not a.help or not a.required and "default" not in formatter._get_help_string(a)
    ]
    assert not missing, f"{leaf.prog}: no default shown for {missing}"


@pytest.mark.parametrize("leaf", LEAVES, ids=IDS)
def test_help_is_plain_text_and_hides_no_option(leaf):
    text = leaf.format_help()
    assert not re.search(r"``|:(func|class|data|meth|attr|mod):`", text), leaf.prog
    hidden = [a.option_strings for a in leaf._actions if a.help is argparse.SUPPRESS]
    assert not hidden, f"{leaf.prog}: accepts {hidden} without showing them in --help"


def test_a_bad_number_in_a_pool_file_names_its_field(tmp_path, capsys):
    path = tmp_path / "p.json"
    path.write_text('{"server_sets": [[0], [0, 1]], "mu": [1, "a"]}')
    assert main(["bf", "solve", "--pool", str(path), "--rho", "0.5"]) == 1
    err = capsys.readouterr().err.strip()
    assert "mu[1]" in err and "could not convert" not in err, err


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--pool", "m-model-sym", "--lam", "1,-2"], "--lam"),  # out of range: as 1,nan
        (["--pool", "m-model-sym", "--lam", "1,a"], "--lam"),
        (["--pool", "random:K=100,d=10", "--lam", "1,2"], "--lam"),  # wrong count: as m-model
        (["--pool", "m-model-sym", "--rho", "0.5", "--mu", "1,0,1"], "--mu"),
    ],
)
def test_a_bad_inline_value_is_a_usage_error(argv, fragment, capsys):
    """The rule (``jaxqueue --help``): a value of the wrong form, count or range on the
    command line exits 2; only what a model or a file refuses exits 1."""
    assert main(["bf", "solve", *argv, "--json"]) == 2
    out = json.loads(capsys.readouterr().out)
    assert fragment in out["error"] and "Expecting value" not in out["error"], out


def test_estimate_repr_shows_its_numbers():
    import jax.numpy as jnp

    from jaxqueue.stats import Estimate

    est = Estimate(jnp.asarray(1.25), jnp.asarray(1.0), jnp.asarray(1.5), n=20, level=0.95)
    text = repr(est)
    assert "1.25" in text and "1.5" in text and "n=20" in text, text
    many = Estimate(
        jnp.asarray([1.0, 2.0]), jnp.asarray([0.5, 1.5]), jnp.asarray([1.5, 2.5]), 4, 0.9
    )
    assert "2.5" in repr(many), repr(many)
