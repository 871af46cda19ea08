"""The numbers of the phase-type QBD: the rate of every transition of
:mod:`._ph_structure` from the workload's parameters (JAX, differentiable), and the exact
stability limit ``lambda_c = phi . d`` of the saturated chain by one sparse LU on the host
(scipy), with an implicit adjoint: with ``Q h = -(d - lambda_c 1)`` (Poisson's equation),
``d lambda_c / d v_e = phi_src (h_dst - h_src) + phi_src [e a completion]``. The largest
chains by iterative aggregation-disaggregation onto the class-level phases (``phi``) and the
two-level method of the same aggregates (``h``).
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from ..._jit import refused
from .._workload import Workload
from ._ph_structure import PHKey, PHStructure

# Unknowns of the augmented system solved by a direct sparse LU; more go to GMRES + ILU.
DIRECT_MAX = 12000
# Head phases beyond which phi and h come from aggregation (_iad, _poisson_two_level): the
# incomplete LU does not finish there.
IAD_MIN = 30000
_ADJOINT_FAILED = (
    "exact: the gradient of lambda_c needs Poisson's equation of the saturated chain, whose "
    "iterative solve did not converge here; lambda_c itself (without jax.grad) is unaffected"
)


def phase_forms(services) -> list[tuple[Array, Array]]:
    """``(alpha_i, T_i)`` of every class (``ValueError`` naming the class for a law without)."""
    out = []
    for i, law in enumerate(services):
        try:
            out.append(law.phase_form())
        except ValueError:
            raise ValueError(
                f"exact: class {i} has service law {type(law).__name__}, which is not "
                "phase-type; the exact solver needs exponential, Erlang, hyperexponential, "
                "Coxian or phase-type laws (use `mjqm simulate` or `mjqm sample`)"
            ) from None
    return out


def traced(law) -> bool:
    """Whether any parameter of ``law`` (or any pytree) is traced."""
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(law))


def _structural(law):
    """``law`` with every traced parameter replaced by a placeholder of its shape, each entry
    ``1 / (size + 1)``: positive and below one, so that the phase form shows every support a
    traced value may have (a Coxian's exit next to a continuation probability of one half)."""

    def placeholder(x):
        if not isinstance(x, jax.core.Tracer):
            return x
        return np.full(np.shape(x), 1.0 / (np.size(x) + 1.0))

    return jax.tree_util.tree_map(placeholder, law)


def ph_key(workload: Workload, s: int, cores: tuple[int, ...]) -> PHKey:
    """The structure of ``workload``: servers, cores and the supports of every ``alpha_i``,
    ``T_i`` (off the diagonal) and exit vector (structural zeros: the supports of the concrete
    parameters, or of the law's form where they are traced)."""
    alpha, local, exits = [], [], []
    phase_forms(workload.services)  # the one-line refusal of a law without a phase form
    with jax.ensure_compile_time_eval():  # under jit the placeholders' phase forms stay concrete
        forms = phase_forms([_structural(x) for x in workload.services])
    for i, (a, T) in enumerate(forms):
        dt = np.result_type(np.asarray(a).dtype, np.asarray(T).dtype, np.float32)
        tol = max(1e-9, 64 * np.finfo(dt).eps)  # rounding in the law's own dtype
        a, T = np.asarray(a, dtype=float), np.asarray(T, dtype=float)
        t = -T.sum(1)
        checked = not traced(workload.services[i])  # placeholders need not sum to one
        bad_sum = checked and abs(a.sum() - 1.0) > tol
        if bad_sum or np.any(a < 0) or np.any(t < -tol * np.abs(T).max()):
            raise ValueError(
                f"exact: class {i}: the phase form must have alpha >= 0 summing to 1 and a "
                "sub-generator T with non-negative exit rates"
            )
        off = T - np.diag(np.diag(T))
        alpha.append(tuple(bool(x) for x in a > 0))
        local.append(tuple(tuple(bool(x) for x in row) for row in off > 0))
        exits.append(tuple(bool(x) for x in t > 0))
    return PHKey(s, cores, tuple(alpha), tuple(local), tuple(exits))


def ph_rates(st: PHStructure, workload: Workload, dtype=None) -> tuple[Array, Array, Array]:
    """The rates of the rows of ``F``, ``A`` and ``C`` of ``st`` (JAX; differentiable in the
    class probabilities and the phase forms)."""
    forms = phase_forms(workload.services)
    p = jnp.asarray(workload.probs)
    dt = dtype or jnp.result_type(p, *(f[1] for f in forms), float)
    idx = {
        name: jnp.asarray(getattr(st, name))
        for name in ("f_rate", "a_rate", "a_entry", "c_m", "c_stop", "pairs", "nvec")
    }
    coefs = tuple(jnp.asarray(getattr(st, n), dt) for n in ("f_coef", "a_coef", "c_coef"))
    forms = [(a.astype(dt), T.astype(dt)) for a, T in forms]
    power = int(st.nvec.max(initial=0))
    return _rates(idx, coefs, jnp.asarray(st.key.type_class), p.astype(dt), forms, power)


@functools.partial(jax.jit, static_argnums=(5,))
def _rates(idx, coefs, type_class, p, forms, power):
    alpha = jnp.concatenate([a for a, _ in forms])
    exits = jnp.concatenate([-T.sum(1) for _, T in forms])
    T_all = jax.scipy.linalg.block_diag(*(T for _, T in forms))
    r = jnp.concatenate([exits, T_all[idx["pairs"][:, 0], idx["pairs"][:, 1]]])
    w = p[type_class] * alpha  # the law of a revealed job's (class, entry phase)
    # W[m] = prod_t w_t^(m_t) by repeated products (exact gradients at w_t = 0)
    pw = jnp.stack([jnp.ones_like(w)] + [w] * power, axis=1).cumprod(axis=1)
    W = jnp.prod(pw[jnp.arange(w.shape[0])[None, :], idx["nvec"]], axis=1)
    vf = coefs[0] * r[idx["f_rate"]]
    va = coefs[1] * r[idx["a_rate"]] * alpha[idx["a_entry"]]
    vc = coefs[2] * W[idx["c_m"]] * p[idx["c_stop"]]
    return vf, va, vc


def _host_lambda_c(st: PHStructure, vf, va, vc, need_h: bool = True):
    """``(lambda_c, phi, h)`` of the saturated chain ``M = F + A C`` (numpy, scipy.sparse):
    ``phi Q = 0``, ``phi 1 = 1`` and ``Q h = -(d - lambda_c 1)``, ``h_0 = 0``, with
    ``Q = M - diag(M 1)`` and ``d`` the completion rate. Both from one sparse LU of the
    augmented matrix ``Z = [[F - diag(q), A], [C, -I]]`` (``psi = phi A``, ``g = C h``), less
    its first row and column: far sparser than ``A C``."""
    # scipy.sparse loads with the first phase-type solve, not with the package
    import scipy.sparse as sp

    nh, nv = st.nh, st.nv
    F = sp.csr_matrix((vf, (st.f_src, st.f_dst)), shape=(nh, nh))
    A = sp.csr_matrix((va, (st.a_src, st.a_y)), shape=(nh, nv))
    C = sp.csr_matrix((vc, (st.c_y, st.c_dst)), shape=(nv, nh))
    ac = A @ np.asarray(C.sum(1)).ravel()
    d = np.bincount(st.f_src[st.f_down], weights=vf[st.f_down], minlength=nh) + ac
    q = np.asarray(F.sum(1)).ravel() + ac
    if nh > IAD_MIN:
        phi = _iad(st, F, A, C, q)
        lam_c = float(phi @ d)
        h = _poisson_two_level(st, F, A, C, q, phi, lam_c - d) if need_h else np.zeros(nh)
        return lam_c, phi, h
    Z = sp.bmat([[F - sp.diags(q), A], [C, -sp.identity(nv)]], format="csc")
    solve_t, solve = _solvers(Z[1:, 1:].tocsc())
    u = np.concatenate([[1.0], solve_t(-Z[0, 1:].toarray().ravel())])
    phi = u[:nh] / u[:nh].sum()
    lam_c = float(phi @ d)
    rhs = np.concatenate([-(d - lam_c)[1:], np.zeros(nv)])
    h = np.concatenate([[0.0], solve(rhs)[: nh - 1]])
    return lam_c, phi, h


def _iad(st: PHStructure, F, A, C, q, tol=1e-12, max_it=400, smooth=4, omega=0.7):
    """``phi`` with ``phi Q = 0`` by iterative aggregation-disaggregation (Takahashi; Koury,
    McAllister and Stewart 1984): the phases of one aggregate share the jobs in service per
    class and the head's class (the exponential chain's phases), so the coarse chain holds the
    slow class-level dynamics and is solved densely; the phase mix within an aggregate comes
    from ``smooth`` damped Jacobi steps. ``nan`` where the residual ``|phi Q|_1 / (phi . q)``
    stays above ``tol``."""
    import scipy.sparse as sp  # (as in _host_lambda_c)

    nh = st.nh
    agg, P = _aggregates(st)
    nc = P.shape[1]
    B = (F @ P + A @ (C @ P)).tocsr()  # rates from each phase into each aggregate
    FT, AT, CT = F.T.tocsr(), A.T.tocsr(), C.T.tocsr()
    phi = np.full(nh, 1.0 / nh)
    e0 = np.eye(nc)[0]
    for _ in range(max_it):
        w = phi / (P.T @ phi)[agg]
        Qc = (P.T @ sp.diags(w) @ B).toarray() - np.diag(P.T @ (w * q))
        Qc[:, 0] = 1.0
        phi = np.maximum(np.linalg.solve(Qc.T, e0), 0.0)[agg] * w
        for _ in range(smooth):
            phi = (1.0 - omega) * phi + omega * (FT @ phi + CT @ (AT @ phi)) / q
            phi /= phi.sum()
        res = np.abs(FT @ phi + CT @ (AT @ phi) - q * phi).sum() / (q @ phi)
        if res < tol:
            return phi
    return np.full(nh, np.nan)


def _aggregates(st: PHStructure):
    """``(agg, P)``: the aggregate of every head phase (its jobs in service per class and its
    head's class) and the ``(nh, aggregates)`` 0/1 matrix of that map."""
    import scipy.sparse as sp  # (as in _host_lambda_c)

    nh = st.nh
    K = len(st.key.cores)
    per_class = st.nvec[st.head_n] @ np.eye(K, dtype=np.int64)[st.key.type_class]
    keys = np.concatenate([per_class, st.head_h[:, None]], axis=1)
    _, agg = np.unique(keys, axis=0, return_inverse=True)
    agg = agg.ravel()
    nc = int(agg.max()) + 1
    return agg, sp.csr_matrix((np.ones(nh), (np.arange(nh), agg)), shape=(nh, nc))


def _poisson_two_level(st: PHStructure, F, A, C, q, phi, b, tol=1e-13, max_it=400):
    """``h`` with ``Q h = b``, ``h_0 = 0`` (``phi . b = 0``), by the two-level method of
    :func:`_iad`'s aggregates for right vectors (its coarse step transposed): four damped
    Jacobi steps, then the coarse correction ``h += P e`` with ``(P^T diag(phi) Q P) e = P^T
    diag(phi) r`` (the Galerkin operator of the piecewise-constant prolongation, singular with
    the consistent right-hand side of the residual ``r``: one equation replaced by ``e_0 =
    0``; Stewart 1994, Introduction to the Numerical Solution of Markov Chains, Ch. 6). ``nan``
    where ``phi`` is not finite or ``|Q h - b|_1 / |b|_1`` stays above ``tol``."""
    import scipy.linalg as sl  # (as in _host_lambda_c)
    import scipy.sparse as sp  # (as in _host_lambda_c)

    if not np.all(np.isfinite(phi)):
        return np.full_like(b, np.nan)
    agg, P = _aggregates(st)
    PT = P.T.tocsr()

    def Q(x):
        return F @ x + A @ (C @ x) - q * x

    Qc = (PT @ sp.diags(phi) @ (F @ P + A @ (C @ P))).toarray() - np.diag(PT @ (phi * q))
    Qc[0] = 0.0
    Qc[0, 0] = 1.0
    lu = sl.lu_factor(Qc)
    nb = np.abs(b).sum()
    h = np.zeros_like(b)
    for _ in range(max_it):
        for _ in range(4):
            h = h + 0.7 * (Q(h) - b) / q
        rc = PT @ (phi * (b - Q(h)))
        rc[0] = 0.0
        h = h + sl.lu_solve(lu, rc)[agg]
        h = h - h[0]
        res = np.abs(Q(h) - b).sum() / nb
        if res < tol:
            return h
    return np.full_like(b, np.nan)


def _solvers(B):
    """``(x -> B^-T x, x -> B^-1 x)``: a sparse LU up to :data:`DIRECT_MAX` unknowns, else
    GMRES preconditioned by an incomplete LU (its fill grows too fast for a direct LU);
    ``nan`` where GMRES does not reach its tolerance."""
    import scipy.sparse.linalg as spla  # (as above)

    if B.shape[0] <= DIRECT_MAX:
        lu = spla.splu(B, permc_spec="COLAMD")
        return (lambda x: lu.solve(x, trans="T")), lu.solve
    ilu = spla.spilu(B.T.tocsc(), drop_tol=1e-3, fill_factor=3, permc_spec="COLAMD")

    def gmres(op, pre):
        def run(b):
            M = spla.LinearOperator(op.shape, pre)
            x, info = spla.gmres(op, b, M=M, rtol=1e-13, atol=0.0, restart=200, maxiter=50)
            return x if info == 0 else np.full_like(b, np.nan)

        return run

    return gmres(B.T.tocsr(), ilu.solve), gmres(B, lambda x: ilu.solve(x, trans="T"))


def _callback(st, v, need_h=True):
    nh = st.nh
    dt = v[0].dtype
    shapes = (
        jax.ShapeDtypeStruct((), dt),
        jax.ShapeDtypeStruct((nh,), dt),
        jax.ShapeDtypeStruct((nh,), dt),
    )

    def host(vf, va, vc):
        out = _host_lambda_c(st, np.asarray(vf), np.asarray(va), np.asarray(vc), need_h)
        return tuple(np.asarray(y, dtype=dt) for y in out)

    return jax.pure_callback(host, shapes, *v)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def lambda_c_sparse(st: PHStructure, v: tuple[Array, Array, Array]) -> Array:
    """``lambda_c`` of the saturated chain with the rates ``v`` (:func:`ph_rates`): a host
    solve inside ``jax.pure_callback``, with the implicit adjoint of the module docstring."""
    return _callback(st, v, need_h=False)[0]


def _fwd(st, v):
    lam_c, phi, h = _callback(st, v)
    return lam_c, (phi, h, v[1], v[2])


def _bwd(st, res, g):
    """``d lambda_c = sum_xz phi_x dM_xz (h_z - h_x + [down])`` with ``M = F + A C``: a row of
    ``A`` (x -> y) gets ``phi_x ((C h)_y + (1 - h_x) (C 1)_y)``, a row of ``C`` (y -> z) gets
    ``(phi A)_y (h_z + 1) - ((phi h) A)_y``."""
    phi, h, va, vc = res
    # an iterative adjoint that did not converge gives nan: refused, never a silent nan gradient
    h = eqx.error_if(h, ~jnp.all(jnp.isfinite(h)), refused(_ADJOINT_FAILED))
    nv = st.nv
    f_src, f_dst = jnp.asarray(st.f_src), jnp.asarray(st.f_dst)
    a_src, a_y = jnp.asarray(st.a_src), jnp.asarray(st.a_y)
    c_y, c_dst = jnp.asarray(st.c_y), jnp.asarray(st.c_dst)
    dvf = phi[f_src] * (h[f_dst] - h[f_src] + jnp.asarray(st.f_down, phi.dtype))
    Ch = jnp.zeros(nv, phi.dtype).at[c_y].add(vc * h[c_dst])
    C1 = jnp.zeros(nv, phi.dtype).at[c_y].add(vc)
    dva = phi[a_src] * (Ch[a_y] + (1.0 - h[a_src]) * C1[a_y])
    phiA = jnp.zeros(nv, phi.dtype).at[a_y].add(phi[a_src] * va)
    phihA = jnp.zeros(nv, phi.dtype).at[a_y].add(phi[a_src] * h[a_src] * va)
    dvc = phiA[c_y] * (h[c_dst] + 1.0) - phihA[c_y]
    return ((g * dvf, g * dva, g * dvc),)


lambda_c_sparse.defvjp(_fwd, _bwd)
