"""The optax-driven dimensioning loop: augmented Lagrangian + log-barrier, then polish."""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from ._problem import OptimizeResult, Problem, target_status

__all__ = ["minimize", "Penalty", "Polish"]


class Penalty(eqx.Module):
    """The augmented Lagrangian and the log-barrier of :func:`minimize`.

    Attributes:
        rho: initial penalty ``rho``.
        growth: factor applied to ``rho`` after each round.
        barrier: initial log-barrier weight ``tau`` on the stability margin (divided by 10
            after each round).
    """

    rho: float = 10.0
    growth: float = 4.0
    barrier: float = 1e-3

    def __check_init__(self):
        for name in ("rho", "growth", "barrier"):
            if not getattr(self, name) > 0:
                raise ValueError(f"Penalty.{name} must be > 0, got {getattr(self, name)!r}")


class Polish(eqx.Module):
    """The feasibility polish of :func:`minimize` (a bisection on ``problem.polish``).

    Attributes:
        range: the bracket ``(s_min, s_max)`` of the bisection.
        iters: bisection iterations.
        safety: every log-violation must be <= ``-safety`` (a relative margin that survives
            round-off in an independent re-evaluation); the final ``targets_met`` asks for
            <= 0.
    """

    range: tuple[float, float] = (0.5, 64.0)
    iters: int = 40
    safety: float = 1e-7


def _np_tree(tree):
    return jax.tree_util.tree_map(lambda x: np.asarray(x), tree)


def _violations(problem: Problem, metrics):
    if not problem.targets:
        return jnp.zeros((0,))
    return jnp.stack([t.violation(metrics) for t in problem.targets])


def _feasible(problem: Problem, metrics, tol: float) -> bool:
    g = np.asarray(_violations(problem, metrics))
    stable = float(np.asarray(metrics["margin"])) > 0
    return bool(stable and np.all(g <= tol))


def minimize(
    problem: Problem,
    *,
    steps: int = 300,
    rounds: int = 6,
    learning_rate: float = 0.05,
    optimizer: Callable[[float], optax.GradientTransformation] | None = None,
    penalty: Penalty = Penalty(),
    polish: Polish = Polish(),
    grad_mode: str = "reverse",
    progress: Callable[[int, dict], None] | None = None,
    throw: bool = False,
) -> OptimizeResult:
    """Minimise ``problem.cost`` subject to ``problem.targets`` by gradient descent.

    Formulation (in the unconstrained variables ``z``, ``params = transform(z)``)::

        loss(z) = cost(p) / |cost(p0)| + sum_j (rho/2) max(0, g_j(p) + nu_j/rho)^2
                  - tau * log(margin(p))

    with ``g_j = log(value_j / bound_j)`` (upper targets; reversed for lower ones), an
    augmented Lagrangian with multipliers ``nu`` updated as ``nu <- max(0, nu + rho g)`` after
    each round and ``rho`` multiplied by ``penalty.growth``; the log-barrier weight ``tau``
    shrinks tenfold per round. Each round runs ``steps`` iterations of an optax optimizer
    (default: ``chain(clip_by_global_norm(1), adam(cosine_decay(learning_rate)))``) inside one
    jitted ``lax.scan``; a step that would leave the stability region (non-finite loss) is
    halved until it stays inside (backtracking).

    Afterwards:

    1. integer candidates (``problem.candidates``) are re-evaluated and the cheapest feasible
       one is kept; otherwise
    2. the feasibility polish bisects ``s`` in ``polish.range`` on ``problem.polish(params, s)``
       for the least safe ``s`` (for a cost it is the cheapest) that meets every target when
       re-evaluated by ``problem.evaluate``;
    3. metrics, slack and stability are re-evaluated at the returned parameters.

    Args:
        problem: the model, cost, targets and transforms.
        steps: optimizer iterations per round.
        rounds: augmented-Lagrangian rounds.
        learning_rate: peak learning rate of the default optimizer.
        optimizer: ``lr -> optax.GradientTransformation`` to replace the default.
        penalty: the initial penalty, its growth and the barrier weight (:class:`Penalty`).
        polish: the bracket, iterations and safety margin of the polish (:class:`Polish`).
        grad_mode: ``"reverse"`` (``jax.grad``) or ``"forward"`` (``jax.jacfwd``: cheaper for
            a few parameters through a long ``lax.scan``, e.g. simulation estimators).
        progress: optional callback ``progress(round, info)`` called after each round.
        throw: raise :class:`~jaxqueue.stats.EstimateError` when the status is not ``ok``
            (default: return the result with its status).

    Returns:
        :class:`OptimizeResult`.

    Raises:
        ValueError: the initial parameters are unstable or give a non-finite cost.
        EstimateError: with ``throw``, a status other than ``ok``.
    """
    for name, value, cls in (("penalty", penalty, Penalty), ("polish", polish, Polish)):
        if not isinstance(value, cls):
            raise ValueError(f"minimize: {name} must be a jaxqueue.optimize.{cls.__name__}")
    evaluate = problem.evaluate or jax.jit(problem.metrics)
    z0, cscale = _start(problem)
    parts = _loss(problem, cscale)
    vg = _value_and_grad(parts, grad_mode)

    def make_opt():
        sched = optax.cosine_decay_schedule(learning_rate, steps, alpha=0.02)
        if optimizer is not None:
            return optimizer(sched)
        return optax.chain(optax.clip_by_global_norm(1.0), optax.adam(sched))

    run_round = _round(parts, vg, make_opt(), steps)
    z, history = _lagrangian_rounds(run_round, z0, len(problem.targets), rounds, penalty, progress)
    relaxed = problem.to_params(z)
    s_best = 1.0
    if problem.candidates is not None:
        params = _best_candidate(problem, evaluate, relaxed)
    elif problem.polish is not None and problem.targets:
        params, s_best = _polish(problem, evaluate, relaxed, polish)
    else:
        params = relaxed
    res = _result(problem, evaluate, params, relaxed, s_best, history)
    return res.raise_for_status() if throw else res


def _start(problem: Problem):
    """``(z0, |cost(p0)|)``; refuses an unstable start or a non-finite cost."""
    z0 = problem.to_z(problem.params0)
    p0 = problem.to_params(z0)
    m0 = problem.metrics(p0)
    if not float(np.asarray(m0["margin"])) > 0:
        raise ValueError("params0: the initial parameters are unstable (margin <= 0)")
    c0 = float(np.asarray(problem.cost(p0)))
    if not np.isfinite(c0):
        raise ValueError("params0: non-finite initial cost")
    return z0, max(abs(c0), 1e-12)


def _loss(problem: Problem, cscale: float):
    """``parts(z, nu, rho, tau) -> (loss, (cost, max violation, violations))``: the loss of
    :func:`minimize`'s docstring (scaled cost, augmented Lagrangian, log-barrier)."""
    n_t = len(problem.targets)

    def parts(z, nu, rho, tau):
        p = problem.to_params(z)
        m = problem.metrics(p)
        c = problem.cost(p)
        g = _violations(problem, m)
        al = jnp.sum(0.5 * rho * jnp.maximum(0.0, g + nu / rho) ** 2) if n_t else 0.0
        margin = m["margin"]
        safe = jnp.where(margin > 0, margin, 1.0)
        bar = jnp.where(margin > 0, -tau * jnp.log(jnp.minimum(safe, 1.0)), jnp.inf)
        loss = c / cscale + al + bar
        gmax = jnp.max(g) if n_t else jnp.zeros(())
        return loss, (c, gmax, g)

    return parts


def _value_and_grad(parts, grad_mode: str):
    """``(loss, aux), grad`` of ``parts`` by reverse mode or by ``jax.jacfwd``."""
    if grad_mode == "reverse":
        return jax.value_and_grad(parts, has_aux=True)
    if grad_mode != "forward":
        raise ValueError(f"grad_mode: expected 'reverse' or 'forward', got {grad_mode!r}")

    def vg(z, nu, rho, tau):
        def f(z):
            loss, aux = parts(z, nu, rho, tau)
            return loss, (loss, aux)

        grad, (loss, aux) = jax.jacfwd(f, has_aux=True)(z)
        return (loss, aux), grad

    return vg


def _round(parts, vg, opt, steps: int):
    """One jitted round: ``steps`` optax updates in a ``lax.scan``, each step halved while it
    would leave the stability region (non-finite loss). Returns ``(z, violations, history)``."""

    def loss_only(z, nu, rho, tau):
        return parts(z, nu, rho, tau)[0]

    @jax.jit
    def run_round(z, nu, rho, tau):
        state = opt.init(z)

        def step(carry, _):
            z, state = carry
            (loss, (c, gmax, _)), grad = vg(z, nu, rho, tau)
            grad = jax.tree_util.tree_map(lambda x: jnp.where(jnp.isfinite(x), x, 0.0), grad)
            upd, state = opt.update(grad, state, z)

            def cond(a):
                scale, k = a
                znew = optax.apply_updates(z, jax.tree_util.tree_map(lambda u: u * scale, upd))
                return (~jnp.isfinite(loss_only(znew, nu, rho, tau))) & (k < 30)

            scale, _ = jax.lax.while_loop(
                cond, lambda a: (a[0] * 0.5, a[1] + 1), (jnp.ones((), loss.dtype), 0)
            )
            scale = jnp.where(scale < 2.0**-29, 0.0, scale)
            z = optax.apply_updates(z, jax.tree_util.tree_map(lambda u: u * scale, upd))
            return (z, state), (loss, c, gmax)

        (z, _), hist = jax.lax.scan(step, (z, state), None, length=steps)
        loss, (c, gmax, g) = parts(z, nu, rho, tau)
        return z, g, hist

    return run_round


def _lagrangian_rounds(run_round, z0, n_t, rounds, penalty: Penalty, progress):
    """The augmented-Lagrangian outer loop: ``nu <- max(0, nu + rho g)``, ``rho`` times
    ``penalty.growth``, the barrier weight divided by 10 after each round. Returns ``(z,
    history)``."""
    dtype = jnp.result_type(*jax.tree_util.tree_leaves(z0))
    nu = jnp.zeros((n_t,), dtype)
    rho = jnp.asarray(penalty.rho, dtype)
    tau = jnp.asarray(penalty.barrier, dtype)
    z = z0
    hist = {"loss": [], "cost": [], "violation": []}
    for r in range(rounds):
        z, g, (hl, hc, hg) = run_round(z, nu, rho, tau)
        hist["loss"].append(np.asarray(hl))
        hist["cost"].append(np.asarray(hc))
        hist["violation"].append(np.asarray(hg))
        nu = jnp.maximum(0.0, nu + rho * g)
        rho = rho * penalty.growth
        tau = tau * 0.1
        if progress is not None:
            info = {"round": r + 1, "rounds": rounds, "cost": float(hc[-1])}
            progress(r, {**info, "violation": float(hg[-1])})
    return z, {k: np.concatenate(v) for k, v in hist.items()}


def _best_candidate(problem: Problem, evaluate, relaxed):
    """The cheapest of ``problem.candidates(relaxed)`` that meets every target when
    re-evaluated, else ``relaxed``."""
    best = None
    for cand in problem.candidates(relaxed):
        m = evaluate(cand)
        if _feasible(problem, m, 0.0):
            c = float(np.asarray(problem.cost(cand)))
            if best is None or c < best[0]:
                best = (c, cand)
    return best[1] if best is not None else relaxed


def _result(problem: Problem, evaluate, params, relaxed, s_best, history) -> OptimizeResult:
    """Re-evaluate ``params`` and build the :class:`OptimizeResult`."""
    metrics = evaluate(params)
    stable = float(np.asarray(metrics["margin"])) > 0
    met = _feasible(problem, metrics, 0.0)
    return OptimizeResult(
        params=_np_tree(params),
        cost=float(np.asarray(problem.cost(params))),
        metrics=_np_tree(metrics),
        slack=[t.slack(metrics) for t in problem.targets],
        targets_met=met,
        stable=stable,
        history=history,
        relaxed_params=_np_tree(relaxed),
        polish_factor=float(s_best),
        status=target_status(met, stable),
        targets=[t.label for t in problem.targets],
    )


def _polish(problem, evaluate, params, polish: Polish):
    """Bisection on ``s``: the least safe ``s`` whose re-evaluation meets every target."""
    tol, iters = -polish.safety, polish.iters

    def ok(s):
        return _feasible(problem, evaluate(problem.polish(params, s)), tol)

    lo_s, hi_s = polish.range
    if ok(1.0):
        hi = 1.0
        lo = lo_s
        if ok(lo):
            return problem.polish(params, lo), lo
    else:
        lo, hi = 1.0, 1.0
        while hi < hi_s:
            lo, hi = hi, min(2.0 * hi, hi_s)
            if ok(hi):
                break
        else:
            return params, 1.0
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return problem.polish(params, hi), hi
