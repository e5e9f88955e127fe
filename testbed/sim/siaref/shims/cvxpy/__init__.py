"""A minimal stand-in for the part of cvxpy that Sia's simulator uses.

Sia's artifact (siasosp23/artifacts, sia-simulator/sia.py) builds its
allocation MILP with cvxpy and solves it with CBC. cvxpy cannot be installed
here, so this module provides only what that model needs -- integer
variables, affine expressions (+, -, scalar *, elementwise multiply by a
constant, @ with constant matrices on either side, sum over all entries or one
axis, indexing by integers), the constraints <=, >=, == and
Problem(Minimize|Maximize).solve() -- and hands the model to a solver:

- CBC (the solver the artifact calls), through PuLP's command-line interface
  (Debian's coinor-cbc and python3-pulp): the default;
- HiGHS through scipy.optimize.milp (Debian's python3-scipy), with
  SIAREF_SOLVER=highs.

The model itself is not changed: the objective and every constraint are
passed on as they were written. As cvxpy does for CBC, variables are given no
bounds (X >= 0 and X <= 1 are rows of the constraint matrix), columns are in
cvxpy's order (variables in creation order, each flattened column-major) and
rows are equalities first, then inequalities, each in the order added. The
relative optimality gap is the one the artifact asks for
(allowablePercentageGap / 100). CBC runs with one thread (SIAREF_THREADS to
change) so that runs are repeatable; the artifact asked for 8.

This is our code; it contains nothing of cvxpy's.
"""

import itertools
import os
import time

import numpy as np
import scipy.sparse as sp

CBC = "CBC"
GLPK_MI = "GLPK_MI"
GLPK = "GLPK"
OPTIMAL = "optimal"

_var_ids = itertools.count()

# Statistics of the solves in this process, for the run log.
STATS = {"solves": 0, "seconds": 0.0, "status": {}}


def _shape(s):
    if s is None:
        return ()
    if isinstance(s, int):
        return (s,)
    return tuple(int(x) for x in s)


def _size(shape):
    n = 1
    for d in shape:
        n *= d
    return n


class Expression(object):
    """An affine expression: for each entry (row-major over shape), a sparse
    row of coefficients per variable plus a constant."""

    __array_ufunc__ = None  # make numpy defer to our reflected operators

    def __init__(self, shape, terms, const):
        self.shape = _shape(shape)
        self.terms = terms  # {var id: (Variable, csr matrix size x var.size)}
        self.const = np.asarray(const, dtype=np.float64).reshape(-1)

    @property
    def size(self):
        return _size(self.shape)

    # -- construction helpers --
    @staticmethod
    def _const(value):
        a = np.asarray(value, dtype=np.float64)
        return Expression(a.shape, {}, a.reshape(-1))

    @staticmethod
    def wrap(value):
        if isinstance(value, Expression):
            return value
        return Expression._const(value)

    def _map(self, mat, shape):
        """Apply the linear map mat (new size x self.size) to every entry."""
        mat = sp.csr_matrix(mat)
        terms = {k: (v, (mat @ m).tocsr()) for k, (v, m) in self.terms.items()}
        return Expression(shape, terms, mat @ self.const)

    def _broadcast_to(self, shape):
        shape = _shape(shape)
        if self.shape == shape:
            return self
        idx = np.arange(self.size).reshape(self.shape) if self.shape else np.array(0)
        idx = np.broadcast_to(idx, shape).reshape(-1)
        mat = sp.csr_matrix((np.ones(len(idx)), (np.arange(len(idx)), idx)),
                            shape=(len(idx), self.size))
        return self._map(mat, shape)

    # -- arithmetic --
    def __add__(self, other):
        other = Expression.wrap(other)
        shape = np.broadcast_shapes(self.shape, other.shape)
        a, b = self._broadcast_to(shape), other._broadcast_to(shape)
        terms = dict(a.terms)
        for k, (v, m) in b.terms.items():
            if k in terms:
                terms[k] = (v, (terms[k][1] + m).tocsr())
            else:
                terms[k] = (v, m)
        return Expression(shape, terms, a.const + b.const)

    __radd__ = __add__

    def __neg__(self):
        return self._scale(-1.0)

    def __sub__(self, other):
        return self + (-Expression.wrap(other))

    def __rsub__(self, other):
        return Expression.wrap(other) + (-self)

    def _scale(self, c):
        terms = {k: (v, (m * c).tocsr()) for k, (v, m) in self.terms.items()}
        return Expression(self.shape, terms, self.const * c)

    def __mul__(self, other):
        if isinstance(other, Expression):
            raise TypeError("cvxpy shim: product of two expressions")
        a = np.asarray(other, dtype=np.float64)
        if a.ndim == 0:
            return self._scale(float(a))
        return multiply(self, a)

    __rmul__ = __mul__

    def __matmul__(self, other):
        # self (n x m) @ R (m x k): vec(X R) = kron(I_n, R^T) vec(X), row-major
        if isinstance(other, Expression):
            raise TypeError("cvxpy shim: product of two expressions")
        r = np.asarray(other, dtype=np.float64)
        if len(self.shape) != 2:
            raise ValueError("cvxpy shim: @ needs a 2-D expression")
        n, m = self.shape
        if r.ndim == 1:
            r = r.reshape(-1, 1)
            out_shape = (n,)
        else:
            out_shape = (n, r.shape[1])
        mat = sp.kron(sp.identity(n), sp.csr_matrix(r.T))
        return self._map(mat, out_shape)

    def __rmatmul__(self, other):
        # L (p x n) @ self (n x m): vec(L X) = kron(L, I_m) vec(X), row-major
        l = np.asarray(other, dtype=np.float64)
        if len(self.shape) != 2:
            raise ValueError("cvxpy shim: @ needs a 2-D expression")
        n, m = self.shape
        if l.ndim == 1:
            l = l.reshape(1, -1)
            out_shape = (m,)
        else:
            out_shape = (l.shape[0], m)
        mat = sp.kron(sp.csr_matrix(l), sp.identity(m))
        return self._map(mat, out_shape)

    def __getitem__(self, key):
        idx = np.arange(self.size).reshape(self.shape)[key]
        shape = np.shape(idx)
        idx = np.asarray(idx).reshape(-1)
        mat = sp.csr_matrix((np.ones(len(idx)), (np.arange(len(idx)), idx)),
                            shape=(len(idx), self.size))
        return self._map(mat, shape)

    # -- constraints --
    def __le__(self, other):
        return Constraint(self - other, "<=")

    def __ge__(self, other):
        return Constraint(Expression.wrap(other) - self, "<=")

    def __eq__(self, other):
        return Constraint(self - other, "==")

    __hash__ = object.__hash__

    def _values(self):
        out = np.array(self.const, dtype=np.float64)
        for _, (v, m) in self.terms.items():
            out = out + m @ v._flat_value()
        return out

    @property
    def value(self):
        vals = self._values()
        if self.shape == ():
            return float(vals[0])
        return vals.reshape(self.shape)


class Variable(Expression):
    def __init__(self, shape=(), integer=False, boolean=False, name=None):
        shape = _shape(shape)
        self.id = next(_var_ids)
        self.integer = integer or boolean
        self.boolean = boolean
        self._value = None
        n = _size(shape)
        super().__init__(shape, {self.id: (self, sp.identity(n, format="csr"))},
                         np.zeros(n))

    def _flat_value(self):
        return self._value

    @property
    def value(self):
        if self._value is None:
            return None
        if self.shape == ():
            return float(self._value[0])
        return self._value.reshape(self.shape)


class Constraint(object):
    def __init__(self, expr, sense):
        self.expr = expr  # expr (sense) 0
        self.sense = sense


def multiply(a, b):
    if isinstance(a, Expression) and isinstance(b, Expression):
        raise TypeError("cvxpy shim: product of two expressions")
    if not isinstance(a, Expression):
        a, b = b, a
    c = np.asarray(b, dtype=np.float64)
    shape = np.broadcast_shapes(a.shape, c.shape)
    a = a._broadcast_to(shape)
    c = np.broadcast_to(c, shape).reshape(-1)
    return a._map(sp.diags(c), shape)


def sum(expr, axis=None):  # noqa: A001 (the cvxpy name)
    expr = Expression.wrap(expr)
    if axis is None:
        return expr._map(np.ones((1, expr.size)), ())
    if len(expr.shape) != 2 or axis not in (0, 1):
        raise ValueError("cvxpy shim: sum over an axis of a 2-D expression only")
    n, m = expr.shape
    if axis == 0:
        mat = sp.kron(np.ones((1, n)), sp.identity(m))
        return expr._map(mat, (m,))
    mat = sp.kron(sp.identity(n), np.ones((1, m)))
    return expr._map(mat, (n,))


class Minimize(object):
    sense = 1.0

    def __init__(self, expr):
        self.expr = Expression.wrap(expr)


class Maximize(Minimize):
    sense = -1.0


class Problem(object):
    def __init__(self, objective, constraints=None):
        self.objective = objective
        self.constraints = list(constraints or [])
        self.status = None
        self.value = None

    def __str__(self):
        return "cvxpy-shim Problem: %d constraints, status %s" % (
            len(self.constraints), self.status)

    def _variables(self):
        vs = {}
        for e in [self.objective.expr] + [c.expr for c in self.constraints]:
            for k, (v, _) in e.terms.items():
                vs[k] = v
        return [vs[k] for k in sorted(vs)]

    def _matrix(self, expr, variables, offsets, nvars):
        """Rows of expr as a csr matrix over all columns (cvxpy's column
        order: variables in creation order, each flattened column-major)."""
        mat = sp.csr_matrix((expr.size, nvars))
        for k, (v, m) in expr.terms.items():
            # m's columns are v's entries in row-major order; cvxpy numbers
            # them column-major.
            order = np.arange(v.size).reshape(v.shape, order="F").reshape(-1) \
                if v.shape else np.array([0])
            # column j (row-major entry j) goes to offsets[v] + order[j]
            perm = sp.csr_matrix((np.ones(v.size), (np.arange(v.size), offsets[k] + order)),
                                 shape=(v.size, nvars))
            mat = mat + m @ perm
        return mat.tocsr()

    def solve(self, solver=None, verbose=False, **kwargs):
        variables = self._variables()
        offsets, nvars = {}, 0
        for v in variables:
            offsets[v.id] = nvars
            nvars += v.size
        integer = np.zeros(nvars, dtype=bool)
        for v in variables:
            if v.integer:
                integer[offsets[v.id]:offsets[v.id] + v.size] = True
        obj = self.objective.expr
        c = self._matrix(obj, variables, offsets, nvars).toarray().reshape(-1) * self.objective.sense
        c0 = float(obj.const[0]) * self.objective.sense
        eq = [ci for ci in self.constraints if ci.sense == "=="]
        le = [ci for ci in self.constraints if ci.sense == "<="]

        def stack(cs):
            if not cs:
                return sp.csr_matrix((0, nvars)), np.zeros(0)
            mats = [self._matrix(ci.expr, variables, offsets, nvars) for ci in cs]
            rhs = [-ci.expr.const for ci in cs]
            return sp.vstack(mats).tocsr(), np.concatenate(rhs)

        a_eq, b_eq = stack(eq)
        a_le, b_le = stack(le)
        gap = float(kwargs.get("allowablePercentageGap", 0.01)) / 100.0
        which = os.environ.get("SIAREF_SOLVER", "cbc").lower()
        t0 = time.time()
        if which == "highs":
            x, status = _solve_highs(c, integer, a_eq, b_eq, a_le, b_le, gap)
        else:
            x, status = _solve_cbc(c, integer, a_eq, b_eq, a_le, b_le, gap)
        STATS["solves"] += 1
        STATS["seconds"] += time.time() - t0
        STATS["status"][status] = STATS["status"].get(status, 0) + 1
        self.status = status
        if x is None:
            for v in variables:
                v._value = None
            self.value = None
            return None
        for v in variables:
            flat_f = x[offsets[v.id]:offsets[v.id] + v.size]
            # back from column-major to our row-major storage
            v._value = flat_f.reshape(v.shape, order="F").reshape(-1) if v.shape else flat_f
        self.value = float(c @ x + c0) * self.objective.sense
        return self.value


def _solve_cbc(c, integer, a_eq, b_eq, a_le, b_le, gap):
    import pulp
    n = len(c)
    prob = pulp.LpProblem("sia", pulp.LpMinimize)
    # zero-padded names keep PuLP's (name-sorted) column order = cvxpy's
    xs = [pulp.LpVariable("x%07d" % j, lowBound=None, upBound=None,
                          cat=pulp.LpInteger if integer[j] else pulp.LpContinuous)
          for j in range(n)]
    prob += pulp.LpAffineExpression([(xs[j], float(c[j])) for j in np.nonzero(c)[0]])

    def add_rows(a, b, sense, tag):
        a = a.tocsr()
        for i in range(a.shape[0]):
            lo, hi = a.indptr[i], a.indptr[i + 1]
            e = pulp.LpAffineExpression([(xs[a.indices[k]], float(a.data[k])) for k in range(lo, hi)])
            prob.addConstraint(pulp.LpConstraint(e, sense, "%s%07d" % (tag, i), float(b[i])))

    add_rows(a_eq, b_eq, pulp.LpConstraintEQ, "e")
    add_rows(a_le, b_le, pulp.LpConstraintLE, "l")
    threads = int(os.environ.get("SIAREF_THREADS", "1"))
    cmd = pulp.COIN_CMD(msg=False, gapRel=gap, threads=threads if threads > 1 else None)
    prob.solve(cmd)
    status = pulp.LpStatus[prob.status]
    if prob.status != pulp.LpStatusOptimal:
        return None, status.lower()
    x = np.array([v.varValue if v.varValue is not None else 0.0 for v in xs])
    return x, OPTIMAL


def _solve_highs(c, integer, a_eq, b_eq, a_le, b_le, gap):
    from scipy.optimize import milp, LinearConstraint, Bounds
    cons = []
    if a_eq.shape[0]:
        cons.append(LinearConstraint(a_eq, b_eq, b_eq))
    if a_le.shape[0]:
        cons.append(LinearConstraint(a_le, -np.inf, b_le))
    res = milp(c, constraints=cons, integrality=integer.astype(int),
               bounds=Bounds(-np.inf, np.inf), options={"mip_rel_gap": gap})
    if res.status != 0 or res.x is None:
        return None, "solver_error:%d" % res.status
    return res.x, OPTIMAL
