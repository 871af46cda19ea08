"""The truncated policy CTMC (``tests/references/mjqm_ctmc.py``) of the small exponential
system of ``tests/mjqm/policies/test_policies.py`` (``s = 3``, needs 1 and 2 with
probabilities 0.6 and 0.4, rates 1 and 0.8, ``lambda = 0.5``, at most 16 jobs), tabulated.

The chain takes 3 to 7 s of numpy per policy on a two-core machine, so the default suite reads
its answers here (12 significant digits) and
``test_policies.py::test_tabulated_ctmc_values_are_the_chains`` (slow) recomputes every entry.
``EXACT_CASES_CTMC``: the FCFS chain at the default cases of ``tests/mjqm/test_exact.py``.
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


# The brute-force CTMC of the explicit queue (``mjqm_ctmc.solve_mjqm``) at the default cases of
# ``tests/mjqm/test_exact.py::test_exact_vs_ctmc`` (system name and fraction of lambda_c, each
# solved to its truncation mass: 0.2 to 3.4 s of numpy each, 13 s in all), every digit of the
# chain"s float64 answers; ``test_exact.py::test_tabulated_ctmc_is_what_the_chain_gives`` (slow)
# recomputes every entry.
EXACT_CASES_CTMC = {
    ("s4-c12", 0.05): {
        "truncation_mass": 2.171038684578753e-15,
        "wait_mean": 0.0032745676943215303,
        "wait_mean_class": [0.0023987651556216546, 0.004588271502371343],
        "jobs_mean": 0.11876790823617796,
        "jobs_waiting_mean": 0.00027714715593495337,
        "jobs_waiting_class": [0.00012181350383244749, 0.00015533365210250588],
        "jobs_service_class": [0.05078175474867519, 0.0677090063315649],
        "p_wait": 0.003575641770285822,
        "idle_servers": 3.813800232588191,
        "hol_idle_servers": 7.412464954754196e-05,
    },
    ("s4-c12", 0.1): {
        "truncation_mass": 8.628972579487197e-13,
        "wait_mean": 0.013427690632891292,
        "wait_mean_class": [0.010079772844127447, 0.018449567316037065],
        "jobs_mean": 0.23925446113546878,
        "jobs_waiting_mean": 0.0022729389752019135,
        "jobs_waiting_class": [0.0010237371049856803, 0.0012492018702162334],
        "jobs_service_class": [0.10156350949726761, 0.13541801266299264],
        "p_wait": 0.013959550430693912,
        "idle_servers": 3.627600465176744,
        "hol_idle_servers": 0.0005667104670884645,
    },
    ("s3-c13-allcore", 0.1): {
        "truncation_mass": 2.1811836174606968e-11,
        "wait_mean": 0.08366751105589697,
        "wait_mean_class": [0.05415248741080878, 0.15253589956110275],
        "jobs_mean": 0.1552903049009924,
        "jobs_waiting_mean": 0.011989612284102742,
        "jobs_waiting_class": [0.005432062267145853, 0.0065575500169568895],
        "jobs_service_class": [0.1003104848318221, 0.04299020778506596],
        "p_wait": 0.07469503797704626,
        "idle_servers": 2.770718891812977,
        "hol_idle_servers": 0.00835009143727018,
    },
    ("s3-c13-allcore", 0.15): {
        "truncation_mass": 4.075456231084597e-11,
        "wait_mean": 0.13465054541128638,
        "wait_mean_class": [0.09065982060348024, 0.2372955699628341],
        "jobs_mean": 0.2438943135499135,
        "jobs_waiting_mean": 0.028943274628650047,
        "jobs_waiting_class": [0.013641195839549211, 0.015302078789100835],
        "jobs_service_class": [0.15046572724633722, 0.06448531167491145],
        "p_wait": 0.11338101210895382,
        "idle_servers": 2.6560783377289123,
        "hol_idle_servers": 0.018541390086905356,
    },
    ("s5-c23", 0.05): {
        "truncation_mass": 3.4573536502873305e-14,
        "wait_mean": 0.03677237266172466,
        "wait_mean_class": [0.004087292106453728, 0.06945745321699559],
        "jobs_mean": 0.07569249250951131,
        "jobs_waiting_mean": 0.002163080744807334,
        "jobs_waiting_class": [0.00012021447371922735, 0.0020428662710881063],
        "jobs_service_class": [0.029411764705880656, 0.04411764705882334],
        "p_wait": 0.024069756565659513,
        "idle_servers": 4.808823529411778,
        "hol_idle_servers": 0.003857664981678671,
    },
    ("s5-c23", 0.1): {
        "truncation_mass": 3.8133669793919995e-13,
        "wait_mean": 0.08162069738059002,
        "wait_mean_class": [0.017112736448798557, 0.14612865831238148],
        "jobs_mean": 0.15666125851531518,
        "jobs_waiting_mean": 0.009602434985951772,
        "jobs_waiting_class": [0.0010066315558116803, 0.008595803430140091],
        "jobs_service_class": [0.05882352941172542, 0.08823529411760309],
        "p_wait": 0.051994157545577895,
        "idle_servers": 4.6176470588236835,
        "hol_idle_servers": 0.015275514304022316,
    },
    ("s3-c123", 0.03): {
        "truncation_mass": 8.697199484299712e-11,
        "wait_mean": 0.018554732376245282,
        "wait_mean_class": [0.012401517858679717, 0.020166707026596283, 0.05063809553058568],
        "jobs_mean": 0.05037737117287795,
        "jobs_waiting_mean": 0.0009552236671948079,
        "jobs_waiting_class": [
            0.0003830685280995833,
            0.0003114631154559415,
            0.00026069202363928316,
        ],
        "jobs_service_class": [0.030888842191051598, 0.0108110947668681, 0.007722210547763074],
        "p_wait": 0.015634015539481114,
        "idle_servers": 2.9243223366319167,
        "hol_idle_servers": 0.0004736471055161408,
    },
    ("s3-c123", 0.05): {
        "truncation_mass": 4.6442202010268854e-11,
        "wait_mean": 0.03192438973370668,
        "wait_mean_class": [0.02162940154163157, 0.03478685461294559, 0.08510692424844063],
        "jobs_mean": 0.08510943316980947,
        "jobs_waiting_mean": 0.0027391873239329457,
        "jobs_waiting_class": [0.0011135119516074241, 0.000895438052129824, 0.0007302373201956974],
        "jobs_service_class": [0.05148140365457215, 0.018018491278750378, 0.012870350912542369],
        "p_wait": 0.026609421847331532,
        "idle_servers": 2.8738705610502713,
        "hol_idle_servers": 0.001315092054099978,
    },
}
