"""Service-time and inter-arrival laws shared by the whole package."""

from ._laws import (
    BoundedPareto as BoundedPareto,
    Deterministic as Deterministic,
    Empirical as Empirical,
    Erlang as Erlang,
    Exponential as Exponential,
    HyperExponential as HyperExponential,
    Law as Law,
    PhaseCount as PhaseCount,
    bimodal_phases as bimodal_phases,
    get_law as get_law,
    zipf_phases as zipf_phases,
)
from ._phase import PhaseMixture as PhaseMixture, phase_mixture as phase_mixture
