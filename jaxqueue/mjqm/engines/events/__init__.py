"""The event engine: batched event simulation of the MJQM under any job-list policy
(:mod:`jaxqueue.mjqm.policies`).

All replications advance together in one ``lax.while_loop`` of rounds (``_loop``), each round
an event and a pick of the policy (``_round``, ``_picks``) on job lists whose layout the engine
derives from the policy's facts (``_layout``, ``_queues``, ``_deques``); the sums of each
replication (``_accumulate``) become a :class:`PolicyResult` (``_result``). Entry points:
:func:`simulate` (``simulate_policy``: its former name), :func:`saturated_throughput` and
:func:`replay` (given jobs: a job log, ``_replay``).
"""

from ._replay import ReplayRun as ReplayRun
from ._replay import replay as replay
from ._result import PolicyResult as PolicyResult
from ._simulate import check_workload as check_workload
from ._simulate import saturated_throughput as saturated_throughput
from ._simulate import simulate as simulate
from ._simulate import simulate_loads as simulate_loads
from ._simulate import simulate_policy as simulate_policy
from ._sums import ReplicationSums as ReplicationSums
from ._sums import replication_sums as replication_sums
