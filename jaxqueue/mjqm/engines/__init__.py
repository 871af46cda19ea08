"""The MJQM's engines, each owning its state layout: ``recurrence`` (the ordered workload
vector of ``mjsre`` eq. (2): forward scan, backward sampling, pile growth) and ``events``
(job lists: every policy of :mod:`jaxqueue.mjqm.policies`)."""
