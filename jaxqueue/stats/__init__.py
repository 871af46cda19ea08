"""Estimators with confidence intervals (replications, batch means, ratios with a control
variate), run diagnostics, waiting-time histograms and their quantiles and tails with
intervals, and the result convention: one status
enumeration (`Status`), one rule set that judges a run (`StatusRules`, `judge`), one exception
(`EstimateError`, raised under `throw=True`), one base of every estimator's result (`Result`)."""

from ._ci import (
    Estimate as Estimate,
)
from ._ci import (
    batch_means as batch_means,
)
from ._ci import (
    drift as drift,
)
from ._ci import (
    log_mean_ci as log_mean_ci,
)
from ._ci import (
    mean_ci as mean_ci,
)
from ._ci import (
    t_quantile as t_quantile,
)
from ._histogram import density_from_hist as density_from_hist
from ._histogram import hist_bins as hist_bins
from ._histogram import hist_layout as hist_layout
from ._histogram import log_histogram as log_histogram
from ._histogram import quantile_from_hist as quantile_from_hist
from ._quantile import hist_cdf as hist_cdf
from ._quantile import quantile_ci as quantile_ci
from ._quantile import tail_ci as tail_ci
from ._ratio import control_variate as control_variate
from ._ratio import effective_samples as effective_samples
from ._ratio import identity_z as identity_z
from ._ratio import linearise as linearise
from ._ratio import ratio_ci as ratio_ci
from ._ratio import stationarity as stationarity
from ._result import (
    EstimateError as EstimateError,
)
from ._result import (
    Result as Result,
)
from ._result import (
    Status as Status,
)
from ._result import (
    estimate as estimate,
)
from ._status import StatusRules as StatusRules
from ._status import judge as judge
