"""Exact metrics of ``five-class-exp`` from :func:`jaxqueue.mjqm.exact`, tabulated.

The exact solver needs about 8 s per load for this workload (842 phases per level) on a
two-core machine, too much to recompute at every load the default suite compares with, so
its answers are written out here (12 significant digits) and
``tests/mjqm/test_vs_exact.py::test_five_class_tabulated_values_are_exact`` (slow) recomputes
every entry; ``exact_lambda_c`` (2 s) is recomputed in the default suite.

Keys are the arrival rates exactly as the tests write them (``0.5 * FIVE_CLASS_EXP_LAMBDA_C``
is the same float here and there).
"""

FIVE_CLASS_EXP_LAMBDA_C = 1.8008553591174827

FIVE_CLASS_EXP_EXACT = {
    0.5 * FIVE_CLASS_EXP_LAMBDA_C: {
        "wait_mean_class": [
            2.04303427162,
            2.04617829883,
            2.08935806239,
            2.62716158748,
            4.06389992142,
        ],
        "wait_mean": 2.18380627901,
        "jobs_mean": 3.15105231841,
        "p_wait": 0.300731371505,
        "hol_idle_servers": 0.728883589789,
    },
    0.8 * FIVE_CLASS_EXP_LAMBDA_C: {
        "wait_mean_class": [
            10.9304151337,
            10.9429636636,
            11.0643663539,
            11.8533863914,
            13.7878003429,
        ],
        "wait_mean": 11.1623986218,
        "jobs_mean": 17.9770006197,
        "p_wait": 0.679349770537,
        "hol_idle_servers": 1.85684956187,
    },
    1.0: {
        "wait_mean_class": [
            2.72500522806,
            2.72928943698,
            2.78392769112,
            3.36955867367,
            4.91393935629,
        ],
        "wait_mean": 2.88157263751,
        "jobs_mean": 4.19727263751,
        "p_wait": 0.360769377319,
        "hol_idle_servers": 0.896417129354,
    },
    1.2: {
        "wait_mean_class": [
            4.87995715328,
            4.88729446901,
            4.9690979209,
            5.64872645949,
            7.38628808335,
        ],
        "wait_mean": 5.06964851586,
        "jobs_mean": 7.66241821903,
        "p_wait": 0.494914848467,
        "hol_idle_servers": 1.28792134544,
    },
    1.5: {
        "wait_mean_class": [
            13.9628601176,
            13.9769746547,
            14.1092051571,
            14.9245185771,
            16.9021758693,
        ],
        "wait_mean": 14.205648844,
        "jobs_mean": 23.282023266,
        "p_wait": 0.728535738926,
        "hol_idle_servers": 2.01336666447,
    },
}
