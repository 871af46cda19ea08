"""The truncated policy CTMC (``tests/references/mjqm_ctmc.py``) of the small exponential
system of ``tests/mjqm/policies/test_policies.py`` (``s = 3``, needs 1 and 2 with
probabilities 0.6 and 0.4, rates 1 and 0.8, ``lambda = 0.5``, at most 16 jobs), tabulated.

The chain takes 3 to 7 s of numpy per policy on a two-core machine, so the default suite reads
its answers here (12 significant digits) and
``test_policies.py::test_tabulated_ctmc_values_are_the_chains`` (slow) recomputes every entry.
"""

SMALL_CTMC = {
    "fcfs": {
        "response_mean": 1.37715998196,
        "jobs_mean": 0.688579380387,
        "idle_servers_mean": 2.20000070939,
        "p_full": 8.86742225649e-07,
    },
    "first-fit": {
        "response_mean": 1.30801239146,
        "jobs_mean": 0.654006193828,
        "idle_servers_mean": 2.20000000232,
        "p_full": 2.90520780409e-09,
    },
    "window:3": {
        "response_mean": 1.31266257575,
        "jobs_mean": 0.656331112773,
        "idle_servers_mean": 2.20000021343,
        "p_full": 2.66790976096e-07,
    },
    "preemptive-first-fit": {
        "response_mean": 1.30791667553,
        "jobs_mean": 0.653958335821,
        "idle_servers_mean": 2.20000000238,
        "p_full": 2.97240454432e-09,
    },
    "msf": {
        "response_mean": 1.30849387466,
        "jobs_mean": 0.654246935073,
        "idle_servers_mean": 2.20000000276,
        "p_full": 3.44658353173e-09,
    },
    "least-servers-first": {
        "response_mean": 1.31550193944,
        "jobs_mean": 0.657750968872,
        "idle_servers_mean": 2.20000000103,
        "p_full": 1.28660790155e-09,
    },
    "server-filling": {
        "response_mean": 1.37214648414,
        "jobs_mean": 0.686072661133,
        "idle_servers_mean": 2.2000006774,
        "p_full": 8.46754004197e-07,
    },
}
