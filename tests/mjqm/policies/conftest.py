"""Fixtures of the policy tests."""

from __future__ import annotations

import pytest

SMALL_TOML = """
servers = 3
[[classes]]
cores = 1
prob = 0.6
law = "exponential"
mean = 1.0
[[classes]]
cores = 2
prob = 0.4
law = "exponential"
mean = 1.25
"""


@pytest.fixture
def small_toml(tmp_path):
    """A small workload file for the command line: 3 servers, needs 1 and 2 (probabilities
    0.6 / 0.4), exponential means 1 and 1.25."""
    f = tmp_path / "small.toml"
    f.write_text(SMALL_TOML)
    return f
