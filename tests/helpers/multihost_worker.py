"""One process of the multi-host test (``tests/core/test_multihost.py``).

Usage: ``python multihost_worker.py PROCESS_ID N_PROCESSES PORT``; each process has 2 host
devices. Prints one JSON line with the results of the batched simulators.
"""

import json
import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")

import faulthandler  # noqa: E402

import jax  # noqa: E402

faulthandler.dump_traceback_later(240, exit=True)  # a hang prints where it is

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_cpu_collectives_implementation", "gloo")
pid, nproc, port = (int(a) for a in sys.argv[1:4])
jax.distributed.initialize(
    coordinator_address=f"127.0.0.1:{port}", num_processes=nproc, process_id=pid
)

from tests.helpers.multihost_cases import run_cases  # noqa: E402

out = run_cases()
out["devices"] = jax.device_count()
out["processes"] = jax.process_count()
print("RESULT " + json.dumps(out), flush=True)
