"""Service-time and inter-arrival laws shared by the whole package, and the one registry of
their names (:func:`get_law`, :func:`law_families`: the workload files' vocabulary)."""

from ._laws import (
    BoundedPareto as BoundedPareto,
    Coxian as Coxian,
    Deterministic as Deterministic,
    Empirical as Empirical,
    Erlang as Erlang,
    Exponential as Exponential,
    HyperExponential as HyperExponential,
    Law as Law,
    PhaseCount as PhaseCount,
    bimodal_phases as bimodal_phases,
    zipf_phases as zipf_phases,
)
from ._phase import PhaseMixture as PhaseMixture, phase_mixture as phase_mixture
from ._registry import (
    get_law as get_law,
    law_families as law_families,
    law_fields as law_fields,
    law_from_fields as law_from_fields,
)
