"""Estimators with confidence intervals (replications, batch means)."""

from ._ci import (
    Estimate as Estimate,
    batch_means as batch_means,
    mean_ci as mean_ci,
    t_quantile as t_quantile,
)
