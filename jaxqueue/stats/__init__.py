"""Estimators with confidence intervals (replications, batch means)."""

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
