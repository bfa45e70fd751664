# SPDX-License-Identifier: Apache-2.0
"""float64 references of the kernels, the design.md error bounds on their results, and
test data; half precision's rounding and the check of rounded results."""
import numpy as np

U = 2.0 ** -24


def _lg(n):
    """design.md's lg: the depth of a pairwise tree over n values."""
    return max(1, int(np.ceil(np.log2(n))))


def reference(x, residual=None, gamma=None, beta=None, eps=1e-5, center=True):
    """float64 normalization over the last axis, and the design.md bound on y."""
    s = x.astype(np.float32) if residual is None else (x + residual).astype(np.float32)
    s = s.astype(np.float64)
    n = s.shape[-1]
    mean = s.mean(-1, keepdims=True) if center else np.zeros(s.shape[:-1] + (1,))
    var = ((s - mean) ** 2).mean(-1, keepdims=True)
    r = 1.0 / np.sqrt(var + eps)
    xhat = (s - mean) * r
    g = np.ones(n) if gamma is None else gamma.astype(np.float64)
    b = np.zeros(n) if beta is None or not center else beta.astype(np.float64)
    y = xhat * g + b
    m = np.abs(s).max(-1, keepdims=True)
    bound = (4 * U * _lg(n) * np.abs(g) * (m * r + np.abs(xhat))
             + 3 * U * (np.abs(y) + np.abs(b)) + 1e-30)
    return y, mean[..., 0], r[..., 0], bound


def _set_gradients(dy, x, mean, r, gamma, u, depth):
    """float64 dx of sets of values along the last axis of x (mean, r and gamma
    broadcast against it; mean None: RMSNorm), x_hat, and design.md's bound on dx."""
    xhat = (x - (0.0 if mean is None else mean)) * r
    a = dy if gamma is None else gamma * dy
    mean_a = 0.0 if mean is None else a.mean(-1, keepdims=True)
    dx = r * (a - mean_a - xhat * (a * xhat).mean(-1, keepdims=True))
    big_a = np.abs(a).mean(-1, keepdims=True)
    big_b = np.abs(a * xhat).mean(-1, keepdims=True)
    dx_bound = 8 * u * depth(x.shape[-1]) * r * (np.abs(a) + big_a + np.abs(xhat) * big_b)
    return dx, xhat, dx_bound + 1e-30


def _sum_bounds(dy, xhat, axis, u, depth):
    """design.md's bounds on dgamma = sum dy * x_hat and dbeta = sum dy along axis."""
    depth_sets = depth(max(1, dy.shape[axis]))
    return (8 * u * depth_sets * np.abs(dy * xhat).sum(axis),
            4 * u * depth_sets * np.abs(dy).sum(axis))


def backward_reference(dy, x, mean, r, gamma=None, dsum=None, u=U, depth=_lg):
    """float64 gradients of the normalization over the last axis of x from the given
    statistics, taken as exact (mean None: RMSNorm), and design.md's bounds on them:
    (dx, dgamma, dbeta, dx bound, dgamma bound, dbeta bound); dgamma and dbeta summed
    over every row. u, depth(n): the unit roundoff and the roundings a sum of n values
    takes that the bounds are for (lg: a pairwise tree; n: a sum in any order)."""
    x, dy = x.astype(np.float64), dy.astype(np.float64)
    n = x.shape[-1]
    r = r.astype(np.float64).reshape(x.shape[:-1] + (1,))
    m = None if mean is None else mean.astype(np.float64).reshape(r.shape)
    g = None if gamma is None else gamma.astype(np.float64)
    dx, xhat, dx_bound = _set_gradients(dy, x, m, r, g, u, depth)
    if dsum is not None:
        dx = dx + dsum
        dx_bound = dx_bound + u * np.abs(dsum)
    rows = dy.reshape(-1, n), xhat.reshape(-1, n)
    return (dx, (rows[0] * rows[1]).sum(0), rows[0].sum(0), dx_bound,
            *_sum_bounds(*rows, 0, u, depth))


def bn_backward_reference(dy, x, mean, r, gamma, channels_last, u=U, depth=_lg):
    """float64 gradients of training BatchNorm per channel from the given statistics,
    taken as exact, and design.md's bounds, as backward_reference: dx and its bound
    laid out as x, the others per channel. gamma None: ones."""
    axis = -1 if channels_last else 1
    moved = np.moveaxis(x, axis, 0).shape
    xs, dys = (np.moveaxis(a, axis, 0).reshape(moved[0], -1).astype(np.float64)
               for a in (x, dy))
    per_set = [None if v is None else v.astype(np.float64).reshape(-1, 1)
               for v in (mean, r, gamma)]
    dx, xhat, dx_bound = _set_gradients(dys, xs, *per_set, u, depth)
    dx, dx_bound = (np.moveaxis(a.reshape(moved), 0, axis) for a in (dx, dx_bound))
    return (dx, (dys * xhat).sum(1), dys.sum(1), dx_bound,
            *_sum_bounds(dys, xhat, 1, u, depth))


def stat_bounds(x, rstd_ref):
    """design.md's bounds on mean and rstd for rows of x (no residual)."""
    lg = _lg(x.shape[-1])
    m = np.abs(x.astype(np.float64)).max(-1)
    return 4 * U * lg * m, 4 * U * lg * (1 + (m * rstd_ref) ** 2) * rstd_ref


def data(shape, seed=0, offset=0.0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) + offset).astype(np.float32)


def _per_channel(x, channels_last):
    """x in float64 with channels on axis 1, and the axes of a channel's values."""
    xc = np.moveaxis(x, -1, 1) if channels_last else x
    return xc.astype(np.float64), (0,) + tuple(range(2, xc.ndim))


def _normalized(s, mean, r, gamma, beta, m, channels_last):
    """y = (s - mean) * r * gamma + beta per channel of s and the design.md bound on
    y, m being the largest magnitude among the channel's inputs."""
    shape = [1] * s.ndim
    shape[1] = s.shape[1]
    xhat = (s - mean.reshape(shape)) * r.reshape(shape)
    g = gamma.astype(np.float64).reshape(shape)
    b = beta.astype(np.float64).reshape(shape)
    y = xhat * g + b
    lg = _lg(s.size // s.shape[1])
    bound = (4 * U * lg * np.abs(g) * (m.reshape(shape) * r.reshape(shape) + np.abs(xhat))
             + 3 * U * (np.abs(y) + np.abs(b)) + 1e-30)
    if channels_last:
        y, bound = np.moveaxis(y, 1, -1), np.moveaxis(bound, 1, -1)
    return y, bound


def bn_reference(x, gamma, beta, eps, channels_last):
    """float64 training BatchNorm per channel and the design.md bound on y."""
    s, axes = _per_channel(x, channels_last)
    mean = s.mean(axes)
    var = ((s - mean.reshape((1, -1) + (1,) * (s.ndim - 2))) ** 2).mean(axes)
    r = 1.0 / np.sqrt(var + eps)
    y, bound = _normalized(s, mean, r, gamma, beta, np.abs(s).max(axes), channels_last)
    return y, mean, var, s.size // s.shape[1], bound


def bn_inference_reference(x, mean, var, gamma, beta, eps, channels_last):
    """float64 BatchNorm with given statistics and the bound on y (its M also covers
    |mean|: the kernel folds b = beta - mean * a)."""
    s, axes = _per_channel(x, channels_last)
    mean = mean.astype(np.float64)
    r = 1.0 / np.sqrt(var.astype(np.float64) + eps)
    m = np.maximum(np.abs(s).max(axes), np.abs(mean))
    return _normalized(s, mean, r, gamma, beta, m, channels_last)


def var_bound(x, var, eps, channels_last=False):
    """design.md's rstd bound as a bound on a variance: 8 u lg (var + eps + M^2)."""
    xc = np.moveaxis(x, -1, 0) if channels_last else np.moveaxis(x, 1, 0)
    xc = xc.reshape(xc.shape[0], -1).astype(np.float64)
    return 8 * U * _lg(xc.shape[1]) * (var + eps + np.abs(xc).max(1) ** 2)


def bn_running_reference(x, running, momentum, eps=1e-5):
    """The running statistics after a training batch x (N, C, ...), from running =
    (mean, var, mean bound, var bound) before it, in float64, with their bounds:
    design.md's on the batch's statistics carried through PyTorch's momentum update,
    plus its rounding to float32. The first running is (0, 1, 0, 0), PyTorch's."""
    mean_before, var_before, mean_bound, var_bound_before = running
    c = x.shape[1]
    _, mean, var, count, _ = bn_reference(x, np.ones(c), np.zeros(c), eps, False)
    batch_mean_bound, _ = stat_bounds(np.moveaxis(x, 1, 0).reshape(c, -1), np.ones(c))
    unbiased = count / (count - 1)
    mean_after = (1 - momentum) * mean_before + momentum * mean
    var_after = (1 - momentum) * var_before + momentum * var * unbiased
    return (mean_after, var_after,
            (1 - momentum) * mean_bound + momentum * batch_mean_bound
            + 2 * U * np.abs(mean_after),
            (1 - momentum) * var_bound_before
            + momentum * var_bound(x, var, eps) * unbiased + 2 * U * np.abs(var_after))


def bn_gradient_bounds(dy, x, used, exact, gamma, backward=None):
    """Bounds on BatchNorm's (dx, dgamma, dbeta) of x (N, C, ...) against PyTorch's
    float64 gradients, from the statistics used = (mean, rstd) (the forward's saved
    ones) and the exact ones: design.md's bound (ours against the float64 reference at
    the used statistics), plus what the used statistics' own error makes of the exact
    gradient (the reference at the used and at the exact statistics), plus both
    float64 computations' rounding (the bound again, u = 2^-53, sums in any order).
    backward(dy, x, mean, rstd, gamma, u=, depth=): another norm's reference (GroupNorm's)
    in place of BatchNorm's."""
    if backward is None:
        def backward(*args, **kw):
            return bn_backward_reference(*args, False, **kw)
    at_used = backward(dy, x, *used, gamma)
    at_exact = backward(dy, x, *exact, gamma, u=2.0 ** -53, depth=lambda n: n)
    return [at_used[3 + i] + np.abs(at_used[i] - at_exact[i]) + 2 * at_exact[3 + i]
            for i in range(3)]


def _sets(a, groups, channels_last):
    """a (N, C, *spatial), or (N, *spatial, C) with channels_last, in float64 as the
    GroupNorm sets along the last axis: (N, groups, C / groups * spatial)."""
    a = np.moveaxis(a, -1, 1) if channels_last else a
    return a.astype(np.float64).reshape(a.shape[0], groups, -1)


def _from_sets(a, shape, channels_last):
    """_sets undone: a laid out as an array of shape (x's)."""
    if not channels_last:
        return a.reshape(shape)
    return np.moveaxis(a.reshape((shape[0], shape[-1]) + shape[1:-1]), 1, -1)


def _per_element(v, shape, groups, channels_last):
    """A per-channel vector as a factor of _sets' values, (groups, C / groups *
    spatial); None stays None."""
    if v is None:
        return None
    c = shape[-1] if channels_last else shape[1]
    spatial = int(np.prod(shape[1:-1] if channels_last else shape[2:]))
    return np.repeat(v.astype(np.float64), spatial).reshape(groups, c // groups * spatial)


def gn_reference(x, groups, gamma=None, beta=None, eps=1e-5, channels_last=False):
    """float64 GroupNorm of x (N, C, *spatial) or (N, *spatial, C): (y, mean, rstd,
    bound on y), mean and rstd (N, groups); design.md's bound with each set's own size
    and largest magnitude."""
    sets = _sets(x, groups, channels_last)
    g, b = (_per_element(v, x.shape, groups, channels_last) for v in (gamma, beta))
    y, mean, r, bound = reference(sets, gamma=g, beta=b, eps=eps)
    return (_from_sets(y, x.shape, channels_last), mean, r,
            _from_sets(bound, x.shape, channels_last))


def gn_stat_bounds(x, groups, rstd_ref, channels_last=False):
    """design.md's bounds on GroupNorm's mean and rstd, (N, groups)."""
    return stat_bounds(_sets(x, groups, channels_last), rstd_ref)


def gn_backward_reference(dy, x, mean, r, groups, gamma=None, channels_last=False, u=U,
                          depth=_lg):
    """float64 gradients of GroupNorm from the given statistics (N, groups), taken as
    exact, and design.md's bounds, as backward_reference: dx and its bound laid out as
    x, dgamma and dbeta per channel (sums over the samples and spatial positions)."""
    xs, dys = _sets(x, groups, channels_last), _sets(dy, groups, channels_last)
    per_set = [v.astype(np.float64)[..., None] for v in (mean, r)]
    g = _per_element(gamma, x.shape, groups, channels_last)
    dx, xhat, dx_bound = _set_gradients(dys, xs, *per_set, g, u, depth)
    n, c = xs.shape[0], x.shape[-1] if channels_last else x.shape[1]
    dys, xhat = (np.moveaxis(a.reshape(n, c, -1), 1, 0).reshape(c, -1)
                 for a in (dys, xhat))
    return (_from_sets(dx, x.shape, channels_last), (dys * xhat).sum(1), dys.sum(1),
            _from_sets(dx_bound, x.shape, channels_last),
            *_sum_bounds(dys, xhat, 1, u, depth))


# Half formats: (significand bits, smallest normal exponent, largest finite value).
HALF_FORMATS = {"bf16": (8, -126, (2 - 2.0 ** -7) * 2.0 ** 127),
                "f16": (11, -14, 65504.0)}


def round_half(v, fmt):
    """float64 values rounded once to the nearest value of fmt ('bf16', 'f16'), ties to
    even, as float64: from the format's fields (its spacing at v), not through NumPy's
    or PyTorch's conversions. Beyond the largest finite value by half a step or more:
    +-inf."""
    p, emin, largest = HALF_FORMATS[fmt]
    v = np.asarray(v, np.float64)
    _, e = np.frexp(v)  # |v| in [2^(e-1), 2^e)
    step = np.ldexp(1.0, np.maximum(e - 1, emin) - (p - 1))
    r = np.round(v / step) * step  # v / step: exact (a power of two); np.round: to even
    return np.where(np.abs(r) > largest, np.copysign(np.inf, v), r)


def rounding_range(want, bound, fmt):
    """The values a float32 result within bound of want (float64) can round to in fmt:
    (lo, hi), equal unless want lies within bound of a rounding midpoint."""
    return round_half(want - bound, fmt), round_half(want + bound, fmt)


def assert_rounded(got, want, bound, fmt):
    """got (half values) is want rounded to fmt, but where want lies within bound (the
    error of the float32 value the kernel rounds) of a rounding midpoint: there either
    neighbour. Returns the share of values with one candidate (the check's strength)."""
    lo, hi = rounding_range(want, bound, fmt)
    got = np.asarray(got, np.float64)
    assert np.all((lo <= got) & (got <= hi))
    return np.mean(lo == hi)
