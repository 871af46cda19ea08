"""JSON-able summaries of optimisation results (shared by the case studies)."""

from __future__ import annotations

import jax

__all__ = ["summarize"]


def _device() -> str:
    d = jax.devices()[0]
    return f"{d.platform}:{d.device_kind}"


def summarize(res, extra: dict) -> dict:
    """The case-study dict: cost, targets_met, slack, history (50 points), device + extra."""
    h = res.history
    out = {
        "cost": res.cost,
        "targets_met": res.targets_met,
        "status": res.status,
        "slack": res.slack,
        "targets_list": res.targets,
        "polish_factor": res.polish_factor,
        "relaxed_params": res.relaxed_params,
        "iterations": int(h["cost"].shape[0]),
        "history": {
            "cost": h["cost"][:: max(1, len(h["cost"]) // 50)].tolist(),
            "violation": h["violation"][:: max(1, len(h["violation"]) // 50)].tolist(),
        },
        "device": _device(),
    }
    out.update(extra)
    return out
