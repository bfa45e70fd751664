"""normkernels: NumPy bindings of libnormkernels (SIMD LayerNorm / RMSNorm kernels).

Arrays are float32 and C-contiguous; normalization is over the last axis, any leading
shape is flattened into rows. Errors of the library raise NormKernelsError carrying
its message (nk_last_error); wrong dtypes raise TypeError, wrong shapes ValueError.
"""
import ctypes

import numpy as np

from . import _library

__all__ = [
    "NormKernelsError", "layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm",
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


def _ptr(a):
    return None if a is None else a.ctypes.data_as(_library._float_p)


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


def _forward(center, x, residual, gamma, beta, eps, out, return_sum, return_stats):
    x = _array(x, "x")
    rows, cols = _rows_cols(x)
    residual = _array(residual, "residual", x.shape)
    gamma = _array(gamma, "gamma", (cols,))
    beta = _array(beta, "beta", (cols,))
    y = _output(out, x, "out")
    s = np.empty_like(x) if return_sum else None
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
                   return_stats=False):
    """The pre-norm residual step: s = x + residual, y = LayerNorm(s).

    Returns (y, s), or (y, s, mean, rstd) with return_stats."""
    return _forward(True, x, residual, gamma, beta, eps, out, True, return_stats)


def add_rms_norm(x, residual, gamma=None, eps=1e-5, out=None, return_stats=False):
    """s = x + residual, y = RMSNorm(s). Returns (y, s), or (y, s, rrms)."""
    return _forward(False, x, residual, gamma, None, eps, out, True, return_stats)
