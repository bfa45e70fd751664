# SPDX-License-Identifier: Apache-2.0
"""normkernels: NumPy bindings of libnormkernels (SIMD LayerNorm / RMSNorm / BatchNorm
kernels).

Arrays are float32 and C-contiguous. The LayerNorm family normalizes over the last
axis (any leading shape is flattened into rows); BatchNorm per channel, axis 1 of
(N, C, *spatial) or the last axis with channels_last. Errors of the library raise NormKernelsError carrying
its message (nk_last_error); wrong dtypes raise TypeError, wrong shapes ValueError.
"""
import ctypes

import numpy as np

from . import _library

__all__ = [
    "NormKernelsError", "layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm",
    "batch_norm", "batch_norm_moments", "moments_merge", "batch_norm_update_running",
    "isa", "available_isas", "set_isa", "num_threads", "set_num_threads", "version",
]

_lib = _library.load()


class NormKernelsError(RuntimeError):
    """A call of the library failed; .status is the nk_status value."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def _check(status):
    if status != 0:
        raise NormKernelsError(status, _lib.nk_last_error().decode())


def version():
    return _lib.nk_version().decode()


def isa():
    """The instruction set kernels use now, e.g. 'AVX3'."""
    return _lib.nk_get_isa().decode()


def available_isas():
    """Instruction sets this library contains and this CPU runs, best first."""
    n = _lib.nk_list_isas(None, 0)
    names = (ctypes.c_char_p * n)()
    _lib.nk_list_isas(names, n)
    return [name.decode() for name in names]


def set_isa(name=None):
    """Selects an instruction set by name (case-insensitive); None or 'auto' = best."""
    _check(_lib.nk_set_isa(None if name is None else name.encode()))


def num_threads():
    return _lib.nk_get_num_threads()


def set_num_threads(n):
    """n >= 1 threads, or 0 for OpenMP's default."""
    _check(_lib.nk_set_num_threads(int(n)))


_char = ctypes.c_char


def _ptr(a):
    """The address of a checked array, or None (NULL).

    Through the buffer protocol: 0.2 us against 0.6 us for ndarray.ctypes.data, which
    remains for what from_buffer refuses (read-only or empty arrays)."""
    if a is None:
        return None
    try:
        return ctypes.addressof(_char.from_buffer(a))
    except (TypeError, ValueError):
        return a.ctypes.data


def _array(a, name, shape=None):
    """a as a C-contiguous float32 ndarray (no copy), checked; None stays None."""
    if a is None:
        return None
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, not {type(a).__name__}")
    if a.dtype != np.float32:
        raise TypeError(f"{name} must have dtype float32, not {a.dtype}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (use numpy.ascontiguousarray)")
    if shape is not None and a.shape != tuple(shape):
        raise ValueError(f"{name} has shape {a.shape}; expected {tuple(shape)}")
    return a


def _rows_cols(x):
    if x.ndim == 0:
        raise ValueError("x must have at least one dimension (the normalized one)")
    cols = x.shape[-1]
    if cols == 0:
        raise ValueError("x's last dimension is 0; a row must have at least one element")
    return x.size // cols, cols


def _output(out, like, name):
    if out is None:
        return np.empty_like(like)
    out = _array(out, name, like.shape)
    if not out.flags.writeable:
        raise ValueError(f"{name} is read-only")
    return out


def _forward(center, x, residual, gamma, beta, eps, out, return_sum, return_stats,
             sum_out=None):
    x = _array(x, "x")
    rows, cols = _rows_cols(x)
    residual = _array(residual, "residual", x.shape)
    gamma = _array(gamma, "gamma", (cols,))
    beta = _array(beta, "beta", (cols,))
    y = _output(out, x, "out")
    s = _output(sum_out, x, "sum_out") if return_sum else None
    lead = x.shape[:-1]
    mean = np.empty(lead, np.float32) if (return_stats and center) else None
    rstd = np.empty(lead, np.float32) if return_stats else None
    eps = float(eps)
    if residual is None and center:
        status = _lib.nk_layernorm_forward_f32(rows, cols, _ptr(x), _ptr(gamma), _ptr(beta),
                                               eps, _ptr(y), _ptr(mean), _ptr(rstd))
    elif residual is None:
        status = _lib.nk_rmsnorm_forward_f32(rows, cols, _ptr(x), _ptr(gamma), eps, _ptr(y),
                                             _ptr(rstd))
    elif center:
        status = _lib.nk_add_layernorm_forward_f32(rows, cols, _ptr(x), _ptr(residual),
                                                   _ptr(gamma), _ptr(beta), eps, _ptr(s),
                                                   _ptr(y), _ptr(mean), _ptr(rstd))
    else:
        status = _lib.nk_add_rmsnorm_forward_f32(rows, cols, _ptr(x), _ptr(residual),
                                                 _ptr(gamma), eps, _ptr(s), _ptr(y),
                                                 _ptr(rstd))
    _check(status)
    result = (y,)
    if return_sum:
        result += (s,)
    if return_stats:
        result += ((mean, rstd) if center else (rstd,))
    return result[0] if len(result) == 1 else result


def layer_norm(x, gamma=None, beta=None, eps=1e-5, out=None, return_stats=False):
    """LayerNorm over the last axis (biased variance, as torch.nn.LayerNorm).

    Returns y, or (y, mean, rstd) with return_stats. out may be x (in place)."""
    return _forward(True, x, None, gamma, beta, eps, out, False, return_stats)


def rms_norm(x, gamma=None, eps=1e-5, out=None, return_stats=False):
    """RMSNorm over the last axis: y = x / sqrt(mean(x^2) + eps) * gamma.

    Returns y, or (y, rrms) with return_stats."""
    return _forward(False, x, None, gamma, None, eps, out, False, return_stats)


def add_layer_norm(x, residual, gamma=None, beta=None, eps=1e-5, out=None,
                   return_stats=False, sum_out=None):
    """The pre-norm residual step: s = x + residual, y = LayerNorm(s).

    Returns (y, s), or (y, s, mean, rstd) with return_stats. s goes to sum_out when
    given, which may be residual (the residual stream updated in place) or x."""
    return _forward(True, x, residual, gamma, beta, eps, out, True, return_stats,
                    sum_out)


def add_rms_norm(x, residual, gamma=None, eps=1e-5, out=None, return_stats=False,
                 sum_out=None):
    """s = x + residual, y = RMSNorm(s). Returns (y, s), or (y, s, rrms); sum_out as
    in add_layer_norm."""
    return _forward(False, x, residual, gamma, None, eps, out, True, return_stats,
                    sum_out)


_NCHW, _NHWC = 0, 1


def _bn_shape(x, channels_last):
    """(n, c, spatial) of x: (N, C, *spatial), or (N, *spatial, C) with channels_last."""
    if x.ndim < 2:
        raise ValueError(f"x must have at least 2 dimensions (N, C, ...), not {x.ndim}")
    n = x.shape[0]
    c = x.shape[-1] if channels_last else x.shape[1]
    spatial = 1
    for d in (x.shape[1:-1] if channels_last else x.shape[2:]):
        spatial *= d
    return n, c, spatial


def _channel_vector(a, name, c, writable=False):
    a = _array(a, name, (c,))
    if writable and a is not None and not a.flags.writeable:
        raise ValueError(f"{name} is read-only")
    return a


def batch_norm(x, running_mean=None, running_var=None, gamma=None, beta=None,
               training=False, momentum=0.1, eps=1e-5, channels_last=False, out=None,
               return_stats=False):
    """BatchNorm per channel, as torch.nn.functional.batch_norm (same argument order).

    training=True normalizes with the batch statistics (biased variance) and, when
    given, updates running_mean / running_var in place (unbiased variance, PyTorch's
    momentum convention); return_stats adds (save_mean, save_rstd). training=False
    normalizes with running_mean / running_var (required). x: (N, C, *spatial), or
    (N, *spatial, C) with channels_last. out may be x."""
    x = _array(x, "x")
    n, c, spatial = _bn_shape(x, channels_last)
    layout = _NHWC if channels_last else _NCHW
    running_mean = _channel_vector(running_mean, "running_mean", c, writable=training)
    running_var = _channel_vector(running_var, "running_var", c, writable=training)
    gamma = _channel_vector(gamma, "gamma", c)
    beta = _channel_vector(beta, "beta", c)
    y = _output(out, x, "out")
    if not training:
        if running_mean is None or running_var is None:
            raise ValueError("running_mean and running_var are required when not training")
        _check(_lib.nk_batchnorm_forward_inference_f32(
            n, c, spatial, layout, _ptr(x), _ptr(running_mean), _ptr(running_var),
            _ptr(gamma), _ptr(beta), float(eps), _ptr(y)))
        return y
    save_mean = np.empty(c, np.float32) if return_stats else None
    save_rstd = np.empty(c, np.float32) if return_stats else None
    _check(_lib.nk_batchnorm_forward_training_f32(
        n, c, spatial, layout, _ptr(x), _ptr(gamma), _ptr(beta), float(eps),
        float(momentum), _ptr(running_mean), _ptr(running_var), _ptr(y), _ptr(save_mean),
        _ptr(save_rstd)))
    return (y, save_mean, save_rstd) if return_stats else y


def batch_norm_moments(x, channels_last=False):
    """SyncBatchNorm, step 1: this shard's (count, mean, m2) per channel, m2 being the
    sum of squared deviations from the mean."""
    x = _array(x, "x")
    n, c, spatial = _bn_shape(x, channels_last)
    mean = np.empty(c, np.float32)
    m2 = np.empty(c, np.float32)
    _check(_lib.nk_batchnorm_moments_f32(n, c, spatial, _NHWC if channels_last else _NCHW,
                                         _ptr(x), _ptr(mean), _ptr(m2)))
    return n * spatial, mean, m2


def moments_merge(count_a, mean_a, m2_a, count_b, mean_b, m2_b):
    """SyncBatchNorm, step 2 (an allreduce operation): Chan's merge of two shards'
    moments. Returns (count, mean, m2)."""
    mean_a = _array(mean_a, "mean_a")
    if mean_a is None or mean_a.ndim != 1:
        raise ValueError("mean_a must be a 1-D float32 array of channels")
    c = mean_a.shape[0]
    m2_a = _channel_vector(m2_a, "m2_a", c)
    mean_b = _channel_vector(mean_b, "mean_b", c)
    m2_b = _channel_vector(m2_b, "m2_b", c)
    mean = np.empty(c, np.float32)
    m2 = np.empty(c, np.float32)
    _check(_lib.nk_moments_merge_f32(c, int(count_a), _ptr(mean_a), _ptr(m2_a),
                                     int(count_b), _ptr(mean_b), _ptr(m2_b), _ptr(mean),
                                     _ptr(m2)))
    return int(count_a) + int(count_b), mean, m2


def batch_norm_update_running(count, mean, m2, momentum, running_mean, running_var):
    """SyncBatchNorm, step 3: running stats updated in place from merged moments."""
    mean = _array(mean, "mean")
    if mean is None or mean.ndim != 1:
        raise ValueError("mean must be a 1-D float32 array of channels")
    c = mean.shape[0]
    m2 = _channel_vector(m2, "m2", c)
    running_mean = _channel_vector(running_mean, "running_mean", c, writable=True)
    running_var = _channel_vector(running_var, "running_var", c, writable=True)
    _check(_lib.nk_batchnorm_update_running_f32(c, int(count), _ptr(mean), _ptr(m2),
                                                float(momentum), _ptr(running_mean),
                                                _ptr(running_var)))
