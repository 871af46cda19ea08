"""The test suite, one folder per package of ``jaxqueue``.

``references/`` holds the independent references the tests compare against (one module per
model and kind: ``<model>_events`` event simulators, ``<model>_ctmc`` brute-force CTMCs,
``<model>_exact_values`` stored exact numbers, ``<model>_numpy`` plain reimplementations);
``helpers/`` the shared assertions and the multi-host worker. Fixtures live in ``conftest.py``.
"""
