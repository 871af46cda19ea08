"""The event engine's former module: its entry points now live in
:mod:`jaxqueue.mjqm.engines.events`."""

from .engines.events import PolicyResult as PolicyResult
from .engines.events import saturated_throughput as saturated_throughput
from .engines.events import simulate_policy as simulate_policy
