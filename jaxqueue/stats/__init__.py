"""Estimators with confidence intervals (replications, batch means) and the result
convention: one status enumeration (`Status`), one exception (`EstimateError`, raised under
`throw=True`), one base of every estimator's result (`Result`)."""

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
