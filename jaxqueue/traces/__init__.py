"""Job logs as workloads: read a cluster's job log (SWF or CSV), fit an MJQM workload to it,
and replay it through the event engine.

- :func:`read` -> :class:`JobLog` (``_read.py``: the formats and their field rules).
- :func:`replay` -> :class:`Replay` (``_replay.py``: the log through the event engine).
- :func:`fit` -> :class:`Fit` (``_fit.py``: a workload by classes of core count, PH laws by
  moments, the arrival rate, a report; ``Fit.to_toml()`` is a workload file).
"""

from ._fit import ARRIVALS as ARRIVALS
from ._fit import LAWS as LAWS
from ._fit import Fit as Fit
from ._fit import fit as fit
from ._read import SWF_FIELDS as SWF_FIELDS
from ._read import JobLog as JobLog
from ._read import read as read
from ._replay import Replay as Replay
from ._replay import replay as replay
from ._replay import trace_jobs as trace_jobs
from ._synthetic import synthetic as synthetic
from ._synthetic import write_swf as write_swf
