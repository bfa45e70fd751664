# SPDX-License-Identifier: Apache-2.0
"""normkernels: NumPy bindings of libnormkernels (SIMD LayerNorm / RMSNorm / BatchNorm
/ GroupNorm kernels).

Arrays are float32, or float16 for the tensors normalized and their gradients: every
forward (batch_norm_moments too) takes float16 x (and residual), giving float16 y (and
sum), computed in float32, each value rounded once to nearest even (the fused forms
normalize the rounded sum); every backward (the reduce and apply steps too) takes
float16 dy, x (sum), dsum and out, giving float16 dx (the float32 backward's on the
widened arrays, rounded once). A call's tensors have one dtype. gamma, beta,
statistics, moments, running statistics and sums are float32 either way, as are the
results that are not tensors (the float32 function's bits on the widened arrays);
moments_merge and batch_norm_update_running, which take only those, refuse float16.
The LayerNorm family normalizes over the last axis, or over the trailing
normalized_shape as torch.nn.functional.layer_norm (the leading axes are flattened
into rows); its x, residual, out and sum_out may be row-strided views (a row's axes
contiguous, the leading axes one stride apart: x[:, :64] of a fused QKV buffer, one
head of a [tokens, heads, dim] array), read and written in place; arrays it creates
are C-contiguous. BatchNorm normalizes per channel, axis 1 of (N, C, *spatial) or
the last axis with channels_last, of C-contiguous arrays. gamma / beta may also be
given as weight= / bias=, PyTorch's names. GroupNorm (and InstanceNorm, a group per
channel) normalizes each sample's groups of channels, laid out as BatchNorm's.
Zero-size inputs give empty outputs, as in PyTorch.

The backward functions (layer_norm_backward, ..., group_norm_backward) take the
forward's saved statistics and give the gradients PyTorch's autograd gives.
SyncBatchNorm's steps, for one shard of a batch spread over processes:
batch_norm_moments, moments_merge (the allreduce), batch_norm_update_running and
batch_norm(training=False) with the merged statistics; backward
batch_norm_backward_reduce, a sum of its two results over the shards,
batch_norm_backward_apply. normkernels.torch (imported on its own; importing
normkernels does not import torch) wraps forward and backward as autograd Functions
and nn.Modules, SyncBatchNorm over torch.distributed included.

Errors of the library raise NormKernelsError carrying its message (nk_last_error);
wrong types raise TypeError, wrong shapes or layouts ValueError, scalars that do not
fit their C type (uint64_t counts, int threads, float32 eps and momentum) OverflowError
or ValueError: no value reaches the library wrapped, rounded to 0 or to inf.
"""
import ctypes
import math
import types

import numpy as np

from . import _library
from ._args import alias as _alias
from ._args import array as _array
from ._args import channels_last_in_memory as _channels_last_in_memory
from ._args import float32 as _float32
from ._args import half_or_float32 as _half_or_float32
from ._args import int_tuple as _int_tuple
from ._args import integer as _integer
from ._args import ptr as _ptr
from ._args import row_stride as _row_stride
from ._args import view_ptr as _view_ptr
from ._args import writable as _writable

__version__ = "0.1.0"  # as python/pyproject.toml; the library's major.minor must match

__all__ = [
    "NormKernelsError", "layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm",
    "layer_norm_backward", "rms_norm_backward", "add_layer_norm_backward",
    "add_rms_norm_backward",
    "batch_norm", "batch_norm_moments", "moments_merge", "batch_norm_update_running",
    "batch_norm_backward", "batch_norm_backward_reduce", "batch_norm_backward_apply",
    "group_norm", "instance_norm", "group_norm_backward", "instance_norm_backward",
    "isa", "available_isas", "set_isa", "num_threads", "set_num_threads", "version",
]

_lib = _library.load()
_library.check_version(_lib, __version__)


class NormKernelsError(RuntimeError):
    """A call of the library failed; .status is the nk_status value."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def _check(status):
    if status != 0:
        raise NormKernelsError(status, _lib.nk_last_error().decode())


def version():
    """The loaded library's version, e.g. '0.1.0'."""
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
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a str or None, not {type(name).__name__}")
    _check(_lib.nk_set_isa(None if name is None else name.encode()))


def num_threads():
    return _lib.nk_get_num_threads()


def set_num_threads(n):
    """n >= 1 threads, or 0 for OpenMP's default."""
    _check(_lib.nk_set_num_threads(_integer(n, "n", "int")))


# ---------------------------------------------------------------- LayerNorm family

def _row_shape(shape, normalized_shape, name="x"):
    """(leading shape, normalized shape, elements of a row) of an array of this shape:
    the last axis by default."""
    if normalized_shape is None:
        if not shape:
            raise ValueError(f"{name} must have at least one dimension (the normalized "
                             "one)")
        if shape[-1]:
            return shape[:-1], shape[-1:], shape[-1]
        return _split_rows(shape, shape[-1:], name)
    return _split_rows(shape, _int_tuple(normalized_shape, "normalized_shape"), name)


def _split_rows(shape, norm, name):
    """_row_shape of shape over norm, a tuple of ints (a parsed normalized_shape)."""
    if not norm:
        raise ValueError("normalized_shape must have at least one dimension")
    lead = shape[:len(shape) - len(norm)]
    if len(norm) > len(shape) or shape[len(lead):] != norm:
        raise ValueError(f"normalized_shape {norm} does not match {name}'s trailing "
                         f"dimensions: {name} has shape {shape}")
    if 0 not in norm:
        return lead, norm, math.prod(norm)
    raise ValueError(f"{name}'s normalized dimensions {norm} hold no element; a row "
                     "must have at least one")


def _output(out, like, name, whose):
    """out, checked: a C-contiguous writable array of like's shape and dtype (whose: as
    _args.array's), or a new one when None."""
    if out is None:
        return np.empty(like.shape, like.dtype)
    return _writable(_array(out, name, like.shape, dtype=like.dtype, whose=whose), name)


def _rows(x, name, normalized_shape, half=False):
    """x checked as the rows a LayerNorm-family call reads: (x, its row stride, leading
    shape, normalized shape, elements of a row). half: x may be float16 too."""
    x = _half_or_float32(x, name) if half else _array(x, name, contiguous=False)
    lead, norm, cols = _row_shape(x.shape, normalized_shape, name)
    return x, _row_stride(x, name, len(lead), cols), lead, norm, cols


def _rows_like(a, name, x, lead_ndim, cols, whose=None):
    """a, an optional input of x's shape and dtype read as rows too, checked, and its
    row stride (cols when a is None). whose: as _args.array's."""
    if a is None:
        return None, cols
    a = _array(a, name, x.shape, contiguous=False, dtype=x.dtype, whose=whose)
    return a, _row_stride(a, name, lead_ndim, cols)


# Whose dtype an array must have, for the messages of the LayerNorm family's forwards.
_X_DTYPE = "x's: x, residual, out and sum_out have one dtype"
_PARAMETERS = "gamma and beta are float32 with x of either dtype"


def _row_output(out, like, name, lead_ndim, cols, whose=None):
    """out, checked (a new C-contiguous array of like's dtype when None), and its row
    stride."""
    if out is None:
        return np.empty(like.shape, like.dtype), cols
    out = _array(out, name, like.shape, contiguous=False, dtype=like.dtype,
                 whose=whose)
    return out, _row_stride(out, name, lead_ndim, cols, output=True)


def _dense(a, like):
    """Whether a is an ndarray of like's shape and dtype, C-contiguous."""
    return (type(a) is np.ndarray and a.dtype is like.dtype and a.shape == like.shape
            and a.flags.c_contiguous)


def _vector(a, cols):
    """Whether a is None or a C-contiguous float32 ndarray of shape (cols,)."""
    return a is None or (type(a) is np.ndarray and a.dtype == _F32 and a.shape == (cols,)
                         and a.flags.c_contiguous)


def _plain(x):
    """cols of x where x is a C-contiguous ndarray of a dtype the norms take, rows on
    its last axis of at least one element; else 0."""
    if type(x) is not np.ndarray or x.dtype not in _TYPES or not x.flags.c_contiguous:
        return 0
    shape = x.shape
    return shape[-1] if shape else 0


def _plain_forward(center, x, residual, gamma, beta, eps, out, return_sum,
                   return_stats):
    """_forward's result for the common call, or None where _forward's checks must look:
    x (and the residual, of x's shape and dtype) C-contiguous ndarrays normalized over
    their last axis, gamma and beta None or float32 vectors of its length, out None or a
    writable C-contiguous array like x, eps a float, no sum_out. Every check of _forward
    passes for such a call, and the library is called as _forward calls it (so the same
    bits), in less Python time: a training step's forward and backward of 8x4096
    (layer_norm with out and return_stats, layer_norm_backward with out), 1 thread,
    best of 7 batches, 29.4 -> 26.3 us (the library's two calls alone, from ctypes:
    19.1)."""
    cols = _plain(x)
    if (not cols or type(eps) is not float or type(return_stats) is not bool
            or (residual is not None and not _dense(residual, x))
            or not _vector(gamma, cols) or not _vector(beta, cols)
            or (out is not None and not (_dense(out, x) and out.flags.writeable))):
        return None
    if return_sum and residual is None:
        return None
    eps = _float32(eps, "eps")
    lead = x.shape[:-1]
    y = np.empty(x.shape, x.dtype) if out is None else out
    s = np.empty(x.shape, x.dtype) if return_sum else None
    mean = np.empty(lead, np.float32) if (return_stats and center) else None
    rstd = np.empty(lead, np.float32) if return_stats else None
    _forward_call(_TYPES[x.dtype], center, return_sum, x.size // cols, cols, _ptr(x),
                  cols, _ptr(residual), cols, _ptr(gamma), _ptr(beta), eps, _ptr(s),
                  cols, _ptr(y), cols, _ptr(mean), _ptr(rstd))
    if not return_sum and not return_stats:
        return y
    result = (y, s) if return_sum else (y,)
    if return_stats:
        result += ((mean, rstd) if center else (rstd,))
    return result


def _forward(center, x, residual, gamma, beta, eps, out, return_sum, return_stats,
             sum_out, weight, bias, normalized_shape):
    if (weight is None and bias is None and normalized_shape is None
            and sum_out is None):
        result = _plain_forward(center, x, residual, gamma, beta, eps, out, return_sum,
                                return_stats)
        if result is not None:
            return result
    if weight is not None:
        gamma = _alias(gamma, weight, "gamma", "weight")
    if bias is not None:
        beta = _alias(beta, bias, "beta", "bias")
    eps = _float32(eps, "eps")
    x, ldx, lead, norm, cols = _rows(x, "x", normalized_shape, half=True)
    rows, k = x.size // cols, len(lead)
    if return_sum and residual is None:  # the fused forms: not a plain norm
        raise TypeError("residual must be a numpy.ndarray, not NoneType")
    residual, ldr = _rows_like(residual, "residual", x, k, cols, _X_DTYPE)
    gamma = _array(gamma, "gamma", norm, whose=_PARAMETERS)
    beta = _array(beta, "beta", norm, whose=_PARAMETERS)
    y, ldy = _row_output(out, x, "out", k, cols, _X_DTYPE)
    s, lds = None, cols  # the stride of an s made here, or of none
    if sum_out is not None:
        s, lds = _row_output(sum_out, x, "sum_out", k, cols, _X_DTYPE)
    elif return_sum:
        s = np.empty(x.shape, x.dtype)
    mean = np.empty(lead, np.float32) if (return_stats and center) else None
    rstd = np.empty(lead, np.float32) if return_stats else None
    p = _ptr if ldx == ldy == ldr == lds == cols else _view_ptr  # quicker for views
    _forward_call(_TYPES[x.dtype], center, return_sum, rows, cols, p(x), ldx,
                  p(residual), ldr,
                  _ptr(gamma), _ptr(beta), eps, p(s), lds, p(y), ldy, _ptr(mean),
                  _ptr(rstd))
    result = (y,)
    if return_sum:
        result += (s,)
    if return_stats:
        result += ((mean, rstd) if center else (rstd,))
    return result[0] if len(result) == 1 else result


def _row_kernels(kind, t):
    """The LayerNorm family's functions nk_*_{kind}_{t} of one element type (t: f32,
    bf16, f16), as attributes named without prefix, kind and type: layernorm,
    add_rmsnorm_strided, ..."""
    return types.SimpleNamespace(**{
        form + strided: getattr(_lib, f"nk_{form}_{kind}{strided}_{t}")
        for form in ("layernorm", "rmsnorm", "add_layernorm", "add_rmsnorm")
        for strided in ("", "_strided")})


_FORWARDS = {t: _row_kernels("forward", t) for t in ("f32", "bf16", "f16")}
_BACKWARDS = {t: _row_kernels("backward", t) for t in ("f32", "bf16", "f16")}
_TYPES = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16"}  # NumPy has no bf16
_F32 = np.dtype(np.float32)


def _forward_call(t, center, fused, rows, cols, x, ldx, residual, ldr, gamma, beta,
                  eps, s, lds, y, ldy, mean, rstd):
    """The library's forward of checked arguments, the tensors of element type t (f32,
    bf16 or f16): addresses (ints, None for NULL) and row strides; the contiguous forms
    (4 arguments less) when every stride is cols. Without center, beta and mean are not
    read (rstd is rrms); without fused, residual, ldr, s and lds."""
    k = _FORWARDS[t]
    if ldx == ldy == ldr == lds == cols:
        if not fused and center:
            status = k.layernorm(rows, cols, x, gamma, beta, eps, y, mean, rstd)
        elif not fused:
            status = k.rmsnorm(rows, cols, x, gamma, eps, y, rstd)
        elif center:
            status = k.add_layernorm(rows, cols, x, residual, gamma, beta, eps, s, y,
                                     mean, rstd)
        else:
            status = k.add_rmsnorm(rows, cols, x, residual, gamma, eps, s, y, rstd)
    elif not fused and center:
        status = k.layernorm_strided(rows, cols, x, ldx, gamma, beta, eps, y, ldy, mean,
                                     rstd)
    elif not fused:
        status = k.rmsnorm_strided(rows, cols, x, ldx, gamma, eps, y, ldy, rstd)
    elif center:
        status = k.add_layernorm_strided(rows, cols, x, ldx, residual, ldr, gamma, beta,
                                         eps, s, lds, y, ldy, mean, rstd)
    else:
        status = k.add_rmsnorm_strided(rows, cols, x, ldx, residual, ldr, gamma, eps, s,
                                       lds, y, ldy, rstd)
    _check(status)


def layer_norm(x, gamma=None, beta=None, eps=1e-5, out=None, return_stats=False, *,
               weight=None, bias=None, normalized_shape=None):
    """LayerNorm over the last axis, or over the trailing normalized_shape (an int or a
    tuple, as F.layer_norm; gamma and beta then have that shape). Biased variance, as
    torch.nn.LayerNorm. weight / bias: PyTorch's names of gamma / beta.

    Returns y, or (y, mean, rstd) with return_stats (shaped as x's leading axes).
    out may be x (in place)."""
    return _forward(True, x, None, gamma, beta, eps, out, False, return_stats, None,
                    weight, bias, normalized_shape)


def rms_norm(x, gamma=None, eps=1e-5, out=None, return_stats=False, *, weight=None,
             normalized_shape=None):
    """RMSNorm: y = x / sqrt(mean(x^2) + eps) * gamma, over the last axis or the
    trailing normalized_shape (as layer_norm). Returns y, or (y, rrms)."""
    return _forward(False, x, None, gamma, None, eps, out, False, return_stats, None,
                    weight, None, normalized_shape)


def add_layer_norm(x, residual, gamma=None, beta=None, eps=1e-5, out=None,
                   return_stats=False, sum_out=None, *, weight=None, bias=None,
                   normalized_shape=None):
    """The pre-norm residual step: s = x + residual, y = LayerNorm(s) (as layer_norm).

    Returns (y, s), or (y, s, mean, rstd) with return_stats. s goes to sum_out when
    given, which may be residual (the residual stream updated in place) or x."""
    return _forward(True, x, residual, gamma, beta, eps, out, True, return_stats,
                    sum_out, weight, bias, normalized_shape)


def add_rms_norm(x, residual, gamma=None, eps=1e-5, out=None, return_stats=False,
                 sum_out=None, *, weight=None, normalized_shape=None):
    """s = x + residual, y = RMSNorm(s). Returns (y, s), or (y, s, rrms); sum_out as
    in add_layer_norm."""
    return _forward(False, x, residual, gamma, None, eps, out, True, return_stats,
                    sum_out, weight, None, normalized_shape)


def _required(a, name, what="the forward's saved statistic (return_stats=True)"):
    if a is None:
        raise TypeError(f"{name} is required: {what}")
    return a


_DY = "the gradient of the forward's y"
# Whose dtype a backward's array must have, for the messages; {} is x or sum.
_GRADIENT_DTYPE = "{0}'s: dy, {0}, dsum and out have one dtype"
_STATISTICS = "the saved statistics are float32 with x of either dtype"


def _flag(value, name):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
    return value


def _statistics(a, name, lead, norm):
    """A saved statistic, required: one value per row, shaped as the forwards return it
    (x's leading axes) or with the normalized axes kept as 1s (torch.native_layer_norm's
    mean and rstd)."""
    a = _array(_required(a, name), name, whose=_STATISTICS)
    kept = lead + (1,) * len(norm)
    if a.shape != lead and a.shape != kept:
        raise ValueError(f"{name} has shape {a.shape}; expected {lead}, one value per "
                         f"row (or {kept}, as torch.native_layer_norm gives)")
    return a


def _statistic(a, lead):
    """Whether a is a C-contiguous float32 ndarray of shape lead (one value a row)."""
    return (type(a) is np.ndarray and a.dtype == _F32 and a.shape == lead
            and a.flags.c_contiguous)


def _plain_backward(center, fused, dy, x, dsum, mean, rstd, gamma, out, param_grads):
    """_backward's result for the common call, or None where its checks must look (as
    _plain_forward): x, dy (and dsum) C-contiguous ndarrays of one shape and dtype,
    normalized over their last axis, the statistics float32 of x's leading shape,
    gamma None or a float32 vector, out None or a writable array like x."""
    cols = _plain(x)
    if (not cols or type(param_grads) is not bool or not _dense(dy, x)
            or (dsum is not None and not _dense(dsum, x))
            or (out is not None and not (_dense(out, x) and out.flags.writeable))
            or not _vector(gamma, cols)):
        return None
    lead = x.shape[:-1]
    if not _statistic(rstd, lead) or (center and not _statistic(mean, lead)):
        return None
    rows = x.size // cols
    dx = np.empty(x.shape, x.dtype) if out is None else out
    new = np.empty if rows else np.zeros  # with no row the library writes nothing
    dgamma = new(cols, np.float32) if param_grads else None
    dbeta = new(cols, np.float32) if param_grads and center else None
    _backward_call(_TYPES[x.dtype], center, fused, rows, cols, _ptr(x), cols, _ptr(dy),
                   cols, _ptr(dsum), cols, _ptr(mean) if center else None, _ptr(rstd),
                   _ptr(gamma), _ptr(dx), cols, _ptr(dgamma), _ptr(dbeta))
    return (dx, dgamma, dbeta) if center else (dx, dgamma)


def _backward(center, fused, dy, x, dsum, mean, rstd, gamma, out, param_grads, weight,
              normalized_shape):
    if weight is None and normalized_shape is None:
        result = _plain_backward(center, fused, dy, x, dsum, mean, rstd, gamma, out,
                                 param_grads)
        if result is not None:
            return result
    gamma = _alias(gamma, weight, "gamma", "weight")
    _flag(param_grads, "param_grads")
    name = "sum" if fused else "x"
    x, ldx, lead, norm, cols = _rows(x, name, normalized_shape, half=True)
    rows, k = x.size // cols, len(lead)
    whose = _GRADIENT_DTYPE.format(name)
    dy, lddy = _rows_like(_required(dy, "dy", _DY), "dy", x, k, cols, whose)
    dsum, ldds = _rows_like(dsum, "dsum", x, k, cols, whose)
    mean = _statistics(mean, "mean", lead, norm) if center else None
    rstd = _statistics(rstd, "rstd" if center else "rrms", lead, norm)
    gamma = _array(gamma, "gamma", norm, whose=_PARAMETERS)
    dx, lddx = _row_output(out, x, "out", k, cols, whose)
    # Sums over rows: with no row the library writes nothing, and they are 0.
    new = np.empty if rows else np.zeros
    dgamma = new(norm, np.float32) if param_grads else None
    dbeta = new(norm, np.float32) if param_grads and center else None
    p = _ptr if ldx == lddy == ldds == lddx == cols else _view_ptr
    _backward_call(_TYPES[x.dtype], center, fused, rows, cols, p(x), ldx, p(dy), lddy,
                   p(dsum), ldds, _ptr(mean), _ptr(rstd), _ptr(gamma), p(dx), lddx,
                   _ptr(dgamma), _ptr(dbeta))
    return (dx, dgamma, dbeta) if center else (dx, dgamma)


def _backward_call(t, center, fused, rows, cols, x, ldx, dy, lddy, dsum, ldds, mean,
                   rstd, gamma, dx, lddx, dgamma, dbeta):
    """The library's backward of checked arguments, as _forward_call (x is the sum when
    fused; without fused, dsum and ldds are not read); mean, rstd, gamma, dgamma and
    dbeta are float32 whatever t."""
    k = _BACKWARDS[t]
    if ldx == lddy == ldds == lddx == cols:
        if not fused and center:
            status = k.layernorm(rows, cols, x, dy, mean, rstd, gamma, dx, dgamma, dbeta)
        elif not fused:
            status = k.rmsnorm(rows, cols, x, dy, rstd, gamma, dx, dgamma)
        elif center:
            status = k.add_layernorm(rows, cols, x, dy, dsum, mean, rstd, gamma, dx,
                                     dgamma, dbeta)
        else:
            status = k.add_rmsnorm(rows, cols, x, dy, dsum, rstd, gamma, dx, dgamma)
    elif not fused and center:
        status = k.layernorm_strided(rows, cols, x, ldx, dy, lddy, mean, rstd, gamma, dx,
                                     lddx, dgamma, dbeta)
    elif not fused:
        status = k.rmsnorm_strided(rows, cols, x, ldx, dy, lddy, rstd, gamma, dx, lddx,
                                   dgamma)
    elif center:
        status = k.add_layernorm_strided(rows, cols, x, ldx, dy, lddy, dsum, ldds, mean,
                                         rstd, gamma, dx, lddx, dgamma, dbeta)
    else:
        status = k.add_rmsnorm_strided(rows, cols, x, ldx, dy, lddy, dsum, ldds, rstd,
                                       gamma, dx, lddx, dgamma)
    _check(status)


def layer_norm_backward(dy, x, mean, rstd, gamma=None, *, out=None, param_grads=True,
                        weight=None, normalized_shape=None):
    """The gradients of layer_norm, as torch.nn.LayerNorm's autograd gives them, for the
    gradient dy of its y: returns (dx, dgamma, dbeta).

    mean, rstd: the forward's saved statistics (layer_norm(..., return_stats=True)),
    required; taken as exact, as torch.native_layer_norm_backward takes them.
    dgamma, dbeta: the gradients of gamma and beta (of ones and zeros when they were
    None), summed over rows; param_grads=False skips them (both returned as None).
    normalized_shape as in layer_norm. dy, x and out may be row-strided views; out
    may be dy (in place). dy, x and out are float32 or all float16 (dx the float32
    backward's on the widened arrays, rounded once); the rest float32."""
    return _backward(True, False, dy, x, None, mean, rstd, gamma, out, param_grads,
                     weight, normalized_shape)


def rms_norm_backward(dy, x, rrms, gamma=None, *, out=None, param_grads=True,
                      weight=None, normalized_shape=None):
    """The gradients of rms_norm for the gradient dy of its y, from the forward's saved
    rrms: returns (dx, dgamma), dgamma None with param_grads=False; as
    layer_norm_backward."""
    return _backward(False, False, dy, x, None, None, rrms, gamma, out, param_grads,
                     weight, normalized_shape)


def add_layer_norm_backward(dy, sum, mean, rstd, gamma=None, dsum=None, *, out=None,
                            param_grads=True, weight=None, normalized_shape=None):
    """The gradients of add_layer_norm, from its saved s = x + residual (sum) and
    statistics: returns (dx, dgamma, dbeta), dx being the gradient of both x and
    residual. dsum: the gradient that reached s from its later uses (the residual
    stream), or None for none; out may be dy or dsum (in place). Otherwise as
    layer_norm_backward."""
    return _backward(True, True, dy, sum, dsum, mean, rstd, gamma, out, param_grads,
                     weight, normalized_shape)


def add_rms_norm_backward(dy, sum, rrms, gamma=None, dsum=None, *, out=None,
                          param_grads=True, weight=None, normalized_shape=None):
    """The gradients of add_rms_norm: returns (dx, dgamma), as add_layer_norm_backward
    with rms_norm_backward's rrms."""
    return _backward(False, True, dy, sum, dsum, None, rrms, gamma, out, param_grads,
                     weight, normalized_shape)


# ---------------------------------------------------------------- BatchNorm

_NCHW, _NHWC = 0, 1
# The per-channel norms' kernels (BatchNorm's and GroupNorm's) of each element type
# (f32, bf16, f16), as attributes named without prefix and type: batchnorm_backward,
# groupnorm_forward, ... The tensors x, y, dy and dx are of that type; the rest float32.
_CHANNEL_NORMS = {t: types.SimpleNamespace(**{
    name: getattr(_lib, f"nk_{name}_{t}") for name in (
        "batchnorm_forward_training", "batchnorm_forward_inference", "batchnorm_moments",
        "batchnorm_backward", "batchnorm_backward_reduce", "batchnorm_backward_apply",
        "groupnorm_forward", "groupnorm_backward")}) for t in ("f32", "bf16", "f16")}
# Whose dtype an array must have, for the messages of the per-channel norms.
_CHANNEL_X = "x's: x and out have one dtype"
_CHANNEL_GRADIENT = "x's: dy, x and out have one dtype"
_RUNNING = "running statistics are float32 with x of either dtype"
_SUMS_DTYPE = "the sums are float32 with x of either dtype"


def _bn_input(x, channels_last):
    """x checked, float32 or float16 (its dtype sets that of dy and out); a
    non-contiguous x that is a zero-copy view away from one of the two layouts (a
    channels_last tensor's NCHW view) is refused naming that view."""
    x = _half_or_float32(x, "x")
    if x.ndim < 2:
        raise ValueError(f"x must have at least 2 dimensions (N, C, ...), not {x.ndim}")
    if x.flags.c_contiguous:
        return x
    route = "numpy.ascontiguousarray(x) copies it"
    if not channels_last and _channels_last_in_memory(x):
        route = ("it is channels_last in memory: numpy.moveaxis(x, 1, -1) is a "
                 "contiguous (N, *spatial, C) view of it (no copy); pass that with "
                 "channels_last=True")
    elif x.ndim > 2 and channels_last and np.moveaxis(x, -1, 1).flags.c_contiguous:
        route = ("it is channels first in memory: numpy.moveaxis(x, -1, 1) is a "
                 "contiguous (N, C, *spatial) view of it (no copy); pass that with "
                 "channels_last=False")
    raise ValueError(f"x must be C-contiguous; {route}")


def _affine(gamma, beta, weight, bias):
    """gamma and beta, each given under our name or PyTorch's (weight, bias)."""
    if weight is not None:
        gamma = _alias(gamma, weight, "gamma", "weight")
    if bias is not None:
        beta = _alias(beta, bias, "beta", "bias")
    return gamma, beta


def _bn_shape(x, channels_last):
    """(n, c, spatial) of x: (N, C, *spatial), or (N, *spatial, C) with channels_last."""
    n = x.shape[0]
    c = x.shape[-1] if channels_last else x.shape[1]
    spatial = 1
    for d in (x.shape[1:-1] if channels_last else x.shape[2:]):
        spatial *= d
    return n, c, spatial


def _channel_vector(a, name, c, writable=False, whose=None):
    """A float32 array of one value per channel (whose: as _args.array's)."""
    a = _array(a, name, (c,), whose=whose)
    return _writable(a, name) if writable else a


def _batches_tracked(counter):
    """The count after this batch, checked, of PyTorch's num_batches_tracked buffer."""
    if (not isinstance(counter, np.ndarray) or counter.dtype != np.int64
            or counter.size != 1):
        raise TypeError("num_batches_tracked must be a one-element int64 numpy.ndarray "
                        "(as PyTorch's buffer of that name)")
    _writable(counter, "num_batches_tracked")
    count = int(counter.flat[0])
    if count < 0:
        raise ValueError(f"num_batches_tracked = {count} is negative")
    return _integer(count + 1, "num_batches_tracked + 1", "int64_t")


def batch_norm(x, running_mean=None, running_var=None, gamma=None, beta=None,
               training=False, momentum=0.1, eps=1e-5, channels_last=False, out=None,
               return_stats=False, *, weight=None, bias=None, num_batches_tracked=None):
    """BatchNorm per channel, as torch.nn.functional.batch_norm (same argument order;
    weight / bias are PyTorch's names of gamma / beta).

    training=True normalizes with the batch statistics (biased variance) and, when
    given, updates running_mean / running_var in place (unbiased variance, PyTorch's
    momentum convention); return_stats adds (save_mean, save_rstd), NaN for an empty
    batch. training=False normalizes with running_mean / running_var (required).
    x: (N, C, *spatial), or (N, *spatial, C) with channels_last. out may be x.

    num_batches_tracked, as the buffer of torch.nn.BatchNorm2d (a one-element int64
    array; bn.num_batches_tracked.numpy() shares the module's), is incremented in
    place by every training call. momentum=None then makes the running statistics a
    cumulative average, as PyTorch's BatchNorm with momentum=None: each update uses
    momentum = 1 / num_batches_tracked (after the increment), so that they are the
    mean of every batch's statistics.

    x and out are float32 or both float16 (y the float32 forward's on the widened x,
    rounded once to nearest even); the parameters and statistics float32 either way."""
    gamma, beta = _affine(gamma, beta, weight, bias)
    eps = _float32(eps, "eps")
    x = _bn_input(x, channels_last)
    n, c, spatial = _bn_shape(x, channels_last)
    layout = _NHWC if channels_last else _NCHW
    running_mean = _channel_vector(running_mean, "running_mean", c, training, _RUNNING)
    running_var = _channel_vector(running_var, "running_var", c, training, _RUNNING)
    gamma = _channel_vector(gamma, "gamma", c, whose=_PARAMETERS)
    beta = _channel_vector(beta, "beta", c, whose=_PARAMETERS)
    y = _output(out, x, "out", _CHANNEL_X)
    k = _CHANNEL_NORMS[_TYPES[x.dtype]]
    if not training:
        if running_mean is None or running_var is None:
            raise ValueError("running_mean and running_var are required when not "
                             "training")
        _check(k.batchnorm_forward_inference(
            n, c, spatial, layout, _ptr(x), _ptr(running_mean), _ptr(running_var),
            _ptr(gamma), _ptr(beta), eps, _ptr(y)))
        return y
    batches = None
    if num_batches_tracked is not None:
        batches = _batches_tracked(num_batches_tracked)
    if momentum is not None:
        momentum = _float32(momentum, "momentum")
    elif running_mean is None:
        momentum = 0.0  # nothing to update
    elif batches is None:
        raise ValueError("momentum=None (a cumulative average) needs num_batches_tracked")
    else:
        momentum = 1.0 / batches
    save_mean = np.empty(c, np.float32) if return_stats else None
    save_rstd = np.empty(c, np.float32) if return_stats else None
    _check(k.batchnorm_forward_training(
        n, c, spatial, layout, _ptr(x), _ptr(gamma), _ptr(beta), eps, momentum,
        _ptr(running_mean), _ptr(running_var), _ptr(y), _ptr(save_mean), _ptr(save_rstd)))
    if batches is not None:
        num_batches_tracked.flat[0] = batches
    if not return_stats:
        return y
    if n * spatial == 0:  # an empty batch: the library wrote nothing
        save_mean.fill(np.nan)
        save_rstd.fill(np.nan)
    return y, save_mean, save_rstd


def batch_norm_moments(x, channels_last=False):
    """SyncBatchNorm, step 1: this shard's (count, mean, m2) per channel, m2 being the
    sum of squared deviations from the mean. x float32 or float16 (the float32 moments
    of the widened x)."""
    x = _bn_input(x, channels_last)
    n, c, spatial = _bn_shape(x, channels_last)
    mean = np.empty(c, np.float32)
    m2 = np.empty(c, np.float32)
    _check(_CHANNEL_NORMS[_TYPES[x.dtype]].batchnorm_moments(
        n, c, spatial, _NHWC if channels_last else _NCHW, _ptr(x), _ptr(mean), _ptr(m2)))
    return n * spatial, mean, m2


def _channels(mean, name):
    mean = _array(mean, name)
    if mean is None or mean.ndim != 1:
        raise ValueError(f"{name} must be a 1-D float32 array of channels")
    return mean


def moments_merge(count_a, mean_a, m2_a, count_b, mean_b, m2_b):
    """SyncBatchNorm, step 2 (an allreduce operation): Chan's merge of two shards'
    moments. Returns (count, mean, m2)."""
    count_a = _integer(count_a, "count_a", "uint64_t")
    count_b = _integer(count_b, "count_b", "uint64_t")
    mean_a = _channels(mean_a, "mean_a")
    c = mean_a.shape[0]
    m2_a = _channel_vector(m2_a, "m2_a", c)
    mean_b = _channel_vector(mean_b, "mean_b", c)
    m2_b = _channel_vector(m2_b, "m2_b", c)
    mean = np.empty(c, np.float32)
    m2 = np.empty(c, np.float32)
    _check(_lib.nk_moments_merge_f32(c, count_a, _ptr(mean_a), _ptr(m2_a), count_b,
                                     _ptr(mean_b), _ptr(m2_b), _ptr(mean), _ptr(m2)))
    return count_a + count_b, mean, m2


def batch_norm_update_running(count, mean, m2, momentum, running_mean, running_var):
    """SyncBatchNorm, step 3: running stats updated in place from merged moments."""
    count = _integer(count, "count", "uint64_t")
    momentum = _float32(momentum, "momentum")
    mean = _channels(mean, "mean")
    c = mean.shape[0]
    m2 = _channel_vector(m2, "m2", c)
    running_mean = _channel_vector(running_mean, "running_mean", c, writable=True)
    running_var = _channel_vector(running_var, "running_var", c, writable=True)
    _check(_lib.nk_batchnorm_update_running_f32(c, count, _ptr(mean), _ptr(m2), momentum,
                                                _ptr(running_mean), _ptr(running_var)))


def _bn_gradient_inputs(dy, x, mean, rstd, channels_last, stats, groups=None):
    """The arguments every BatchNorm backward reads, checked: (x, dy, mean, rstd, n, c,
    spatial, layout, the kernels of x's dtype). dy has x's dtype (float32 or float16),
    mean and rstd are float32. stats: what mean and rstd are, for the message when
    missing. With groups, GroupNorm's backward's: mean and rstd (n, groups), groups
    dividing c."""
    x = _bn_input(x, channels_last)
    n, c, spatial = _bn_shape(x, channels_last)
    shape = (c,) if groups is None else (n, _groups(groups, c))
    dy = _array(_required(dy, "dy", _DY), "dy", x.shape, dtype=x.dtype,
                whose=_CHANNEL_GRADIENT)
    mean = _array(_required(mean, stats[0]), stats[0], shape, whose=_STATISTICS)
    rstd = _array(_required(rstd, stats[1]), stats[1], shape, whose=_STATISTICS)
    return (x, dy, mean, rstd, n, c, spatial, _NHWC if channels_last else _NCHW,
            _CHANNEL_NORMS[_TYPES[x.dtype]])


def batch_norm_backward(dy, x, save_mean, save_rstd, gamma=None, channels_last=False, *,
                        out=None, param_grads=True, weight=None):
    """The gradients of batch_norm(training=True), as torch.nn.BatchNorm's autograd
    gives them, for the gradient dy of its y: returns (dx, dgamma, dbeta).

    save_mean, save_rstd: the forward's saved statistics (batch_norm(...,
    return_stats=True)), required; taken as exact. dgamma, dbeta: the gradients of
    gamma and beta, summed over the batch; param_grads=False skips them (None). x and
    dy as the forward's x (channels_last the same); out may be dy (in place). dy, x
    and out are float32 or all float16 (dx the float32 backward's on the widened
    arrays, rounded once); the rest float32."""
    gamma = _alias(gamma, weight, "gamma", "weight")
    _flag(param_grads, "param_grads")
    x, dy, mean, rstd, n, c, spatial, layout, k = _bn_gradient_inputs(
        dy, x, save_mean, save_rstd, channels_last, ("save_mean", "save_rstd"))
    gamma = _channel_vector(gamma, "gamma", c, whose=_PARAMETERS)
    dx = _output(out, x, "out", _CHANNEL_GRADIENT)
    # Sums over the batch: with no value the library writes nothing, and they are 0.
    new = np.empty if n * spatial else np.zeros
    dgamma = new(c, np.float32) if param_grads else None
    dbeta = new(c, np.float32) if param_grads else None
    _check(k.batchnorm_backward(n, c, spatial, layout, _ptr(x), _ptr(dy), _ptr(mean),
                                _ptr(rstd), _ptr(gamma), _ptr(dx), _ptr(dgamma),
                                _ptr(dbeta)))
    return dx, dgamma, dbeta


def batch_norm_backward_reduce(dy, x, mean, rstd, channels_last=False):
    """SyncBatchNorm backward, step 1: this shard's sums per channel, (sum_dy,
    sum_dy_xhat), with x_hat = (x - mean) * rstd from the merged statistics that
    normalized it (rstd = 1 / sqrt(m2 / count + eps)). They are the shard's dbeta and
    dgamma; step 2 sums them over the shards (an allreduce). dy and x float32 or both
    float16 (the float32 sums of the widened arrays)."""
    x, dy, mean, rstd, n, c, spatial, layout, k = _bn_gradient_inputs(
        dy, x, mean, rstd, channels_last, ("mean", "rstd"))
    sum_dy = np.empty(c, np.float32)
    sum_dy_xhat = np.empty(c, np.float32)
    _check(k.batchnorm_backward_reduce(n, c, spatial, layout, _ptr(x), _ptr(dy),
                                       _ptr(mean), _ptr(rstd), _ptr(sum_dy),
                                       _ptr(sum_dy_xhat)))
    return sum_dy, sum_dy_xhat


def batch_norm_backward_apply(dy, x, mean, rstd, total_count, sum_dy, sum_dy_xhat,
                              gamma=None, channels_last=False, *, out=None, weight=None):
    """SyncBatchNorm backward, step 3: this shard's dx from the sums over every shard
    and the count of values per channel over every shard (moments_merge's count).
    mean and rstd as in step 1; out may be dy (in place). dy, x and out float32 or all
    float16 (dx rounded once), as batch_norm_backward's."""
    gamma = _alias(gamma, weight, "gamma", "weight")
    total_count = _integer(total_count, "total_count", "uint64_t")
    x, dy, mean, rstd, n, c, spatial, layout, k = _bn_gradient_inputs(
        dy, x, mean, rstd, channels_last, ("mean", "rstd"))
    sum_dy = _channel_vector(_required(sum_dy, "sum_dy", _SUMS), "sum_dy", c,
                             whose=_SUMS_DTYPE)
    sum_dy_xhat = _channel_vector(_required(sum_dy_xhat, "sum_dy_xhat", _SUMS),
                                  "sum_dy_xhat", c, whose=_SUMS_DTYPE)
    gamma = _channel_vector(gamma, "gamma", c, whose=_PARAMETERS)
    dx = _output(out, x, "out", _CHANNEL_GRADIENT)
    _check(k.batchnorm_backward_apply(
        n, c, spatial, layout, _ptr(x), _ptr(dy), _ptr(mean), _ptr(rstd), _ptr(gamma),
        total_count, _ptr(sum_dy), _ptr(sum_dy_xhat), _ptr(dx)))
    return dx


_SUMS = "step 1's sums over every shard"


# ---------------------------------------------------------------- GroupNorm

_PER_CHANNEL = object()  # InstanceNorm's groups: one per channel


def _groups(groups, c):
    """groups, checked: a positive integer dividing the c channels; c for
    _PER_CHANNEL."""
    if groups is _PER_CHANNEL:
        return c
    groups = _integer(groups, "groups", "int64_t")
    if groups < 1:
        raise ValueError(f"groups = {groups}; it must be at least 1")
    if c % groups:
        raise ValueError(f"groups = {groups} does not divide the {c} channels of x")
    return groups


def group_norm(x, groups, gamma=None, beta=None, eps=1e-5, channels_last=False,
               out=None, return_stats=False, *, weight=None, bias=None):
    """GroupNorm, as torch.nn.functional.group_norm: the C channels of each sample fall
    into groups of C / groups consecutive channels, each normalized over its channels
    and spatial positions (biased variance); gamma, beta (weight, bias) per channel.
    x: (N, C, *spatial), or (N, *spatial, C) with channels_last. out may be x.

    Returns y, or (y, mean, rstd) with return_stats, shaped (N, groups) (as
    torch.native_group_norm's); NaN for a group of no value. x and out are float32 or
    both float16 (y rounded once), as batch_norm's."""
    gamma, beta = _affine(gamma, beta, weight, bias)
    eps = _float32(eps, "eps")
    x = _bn_input(x, channels_last)
    n, c, spatial = _bn_shape(x, channels_last)
    groups = _groups(groups, c)
    gamma = _channel_vector(gamma, "gamma", c, whose=_PARAMETERS)
    beta = _channel_vector(beta, "beta", c, whose=_PARAMETERS)
    y = _output(out, x, "out", _CHANNEL_X)
    mean = np.empty((n, groups), np.float32) if return_stats else None
    rstd = np.empty((n, groups), np.float32) if return_stats else None
    if x.size:  # with no value, nothing to do (InstanceNorm's groups may be c = 0)
        _check(_CHANNEL_NORMS[_TYPES[x.dtype]].groupnorm_forward(
            n, c, spatial, groups, _NHWC if channels_last else _NCHW, _ptr(x),
            _ptr(gamma), _ptr(beta), eps, _ptr(y), _ptr(mean), _ptr(rstd)))
    elif return_stats:  # the statistics of no value
        mean.fill(np.nan)
        rstd.fill(np.nan)
    return (y, mean, rstd) if return_stats else y


def instance_norm(x, gamma=None, beta=None, eps=1e-5, channels_last=False, out=None,
                  return_stats=False, *, weight=None, bias=None):
    """InstanceNorm, as torch.nn.functional.instance_norm without running statistics:
    each channel of each sample normalized on its own (group_norm with a group per
    channel). Returns y, or (y, mean, rstd), these shaped (N, C)."""
    return group_norm(x, _PER_CHANNEL, gamma, beta, eps, channels_last, out,
                      return_stats, weight=weight, bias=bias)


def group_norm_backward(dy, x, mean, rstd, groups, gamma=None, channels_last=False, *,
                        out=None, param_grads=True, weight=None):
    """The gradients of group_norm, as torch.nn.GroupNorm's autograd gives them, for
    the gradient dy of its y: returns (dx, dgamma, dbeta).

    mean, rstd: the forward's saved statistics (group_norm(..., return_stats=True)),
    (N, groups), required; taken as exact. dgamma, dbeta: the gradients of gamma and
    beta, summed over the samples and spatial positions; param_grads=False skips them
    (None). x and dy as the forward's x (channels_last the same); out may be dy (in
    place). dy, x and out float32 or all float16 (dx rounded once), as
    batch_norm_backward's."""
    gamma = _alias(gamma, weight, "gamma", "weight")
    _flag(param_grads, "param_grads")
    x, dy, mean, rstd, n, c, spatial, layout, k = _bn_gradient_inputs(
        dy, x, mean, rstd, channels_last, ("mean", "rstd"), groups)
    gamma = _channel_vector(gamma, "gamma", c, whose=_PARAMETERS)
    dx = _output(out, x, "out", _CHANNEL_GRADIENT)
    # Sums over the samples: with no value they are 0.
    new = np.empty if x.size else np.zeros
    dgamma = new(c, np.float32) if param_grads else None
    dbeta = new(c, np.float32) if param_grads else None
    if x.size:
        _check(k.groupnorm_backward(
            n, c, spatial, mean.shape[1], layout, _ptr(x), _ptr(dy), _ptr(mean),
            _ptr(rstd), _ptr(gamma), _ptr(dx), _ptr(dgamma), _ptr(dbeta)))
    return dx, dgamma, dbeta


def instance_norm_backward(dy, x, mean, rstd, gamma=None, channels_last=False, *,
                           out=None, param_grads=True, weight=None):
    """The gradients of instance_norm: group_norm_backward with a group per channel
    (mean, rstd (N, C))."""
    return group_norm_backward(dy, x, mean, rstd, _PER_CHANNEL, gamma, channels_last,
                               out=out, param_grads=param_grads, weight=weight)
