"""Job logs as workloads: read a cluster's job log (SWF or CSV), fit an MJQM workload to it,
and replay it through the event engine.

- :func:`read` -> :class:`JobLog` (``_read.py``: the formats and their field rules).
"""

from ._read import SWF_FIELDS as SWF_FIELDS
from ._read import JobLog as JobLog
from ._read import read as read
