# SPDX-License-Identifier: Apache-2.0
"""LayerNorm, RMSNorm and their fused residual-add forms: the autograd Function on the
library's forward and backward, the functions and the modules. Where nothing needs a
gradient, the functions call the library's forward alone."""
import torch

from .. import _args
from .. import _backward_call, _forward_call, _split_rows
from ._tensors import F32 as _F32
from ._tensors import TYPES as _TYPES
from ._tensors import FallbackModule, backward_once, needs_grad, one_dtype, ours
from ._tensors import parameter, refuse_unless_fallback, strided


def _rows(t, lead_ndim, cols):
    """(t as the library reads it, its row stride): t itself when contiguous or
    row-strided (rows of cols elements from axis lead_ndim on), else a contiguous copy
    (a differentiable op)."""
    if t.is_neg():  # a negated view (z.conj().imag): its memory holds -t
        t = t.resolve_neg()
    if t.is_contiguous():
        return t, cols
    ld = _args.row_pitch(t.shape, t.stride(), lead_ndim, cols, 1)
    return (t.contiguous(), cols) if ld is None else (t, ld)


def _new(t):
    """A new contiguous tensor of t's shape and dtype: empty_like takes half the time of
    torch.empty(shape, dtype=...)."""
    return torch.empty_like(t, memory_format=torch.contiguous_format)


class _RowNorm(torch.autograd.Function):
    """y (and s = x + residual) of the library's forward; the backward from the saved
    x (s) and statistics. Its arguments come checked (_norm): the library is called
    with their addresses, and the backward trusts what the forward saved.

    plan: (center, eps, norm, rows, cols, ldx, ldr), ldx and ldr being the row strides
    of x and residual. x and residual are of one dtype (float32, bfloat16 or float16),
    as y and s are; weight, bias and the statistics are float32. The backward is
    _gradients."""

    @staticmethod
    def forward(ctx, x, residual, weight, bias, plan):
        center, _, norm, rows, cols, ldx, _ = plan
        ctx.set_materialize_grads(False)  # an unused output's gradient stays None
        # mean and rstd (rrms) in one tensor, one value a row each
        stats = torch.empty(2 * rows if center else rows, dtype=_F32)
        mean = stats.data_ptr()
        rstd = mean + 4 * rows if center else mean
        y, s = _forward(x, residual, weight, bias, plan, mean, rstd)
        ctx.stats = stats  # ours: nothing else sees it
        if s is None:
            ctx.save_for_backward(x, weight)
            ctx.plan = center, False, norm, rows, cols, ldx, mean, rstd
            return y
        ctx.save_for_backward(s, weight)
        ctx.plan = center, True, norm, rows, cols, cols, mean, rstd
        return y, s


def _forward(x, residual, weight, bias, plan, mean=None, rstd=None):
    """(y, s) of the library's forward by plan (_RowNorm's), s None without residual;
    mean and rstd: the addresses the statistics go to, or None (not kept)."""
    center, eps, _, rows, cols, ldx, ldr = plan
    y = _new(x)
    s = None if residual is None else _new(x)
    _forward_call(_TYPES[x.dtype], center, s is not None, rows, cols, x.data_ptr(), ldx,
                  None if residual is None else residual.data_ptr(), ldr,
                  None if weight is None else weight.data_ptr(),
                  None if bias is None else bias.data_ptr(), eps,
                  None if s is None else s.data_ptr(), cols, y.data_ptr(), cols, mean,
                  rstd)
    return y, s


def _gradients(ctx, dy, dsum=None):
    """The gradients of _RowNorm's inputs from those of y (dy) and s (dsum). dy and
    dsum come from autograd, which gives them y's shape, dtype and device."""
    need = ctx.needs_input_grad
    if dy is None:  # only the sum was used: it passes dsum on, as PyTorch's add
        return dsum if need[0] else None, dsum if need[1] else None, None, None, None
    center, fused, norm, rows, cols, ldx, mean, rstd = ctx.plan
    x, weight = ctx.saved_tensors
    lead_ndim = x.dim() - len(norm)
    dy, lddy = _rows(strided(dy, "dy"), lead_ndim, cols)
    dsum, ldds = (None, cols) if dsum is None else _rows(strided(dsum, "dsum"),
                                                         lead_ndim, cols)
    dx = _new(x)
    # Sums over rows: with no row the library writes nothing, and they are 0.
    new = torch.empty if rows else torch.zeros
    dgamma = new(norm, dtype=_F32) if need[2] else None
    dbeta = new(norm, dtype=_F32) if need[3] else None
    _backward_call(_TYPES[x.dtype], center, fused, rows, cols, x.data_ptr(), ldx,
                   dy.data_ptr(), lddy,
                   None if dsum is None else dsum.data_ptr(), ldds, mean, rstd,
                   None if weight is None else weight.data_ptr(), dx.data_ptr(), cols,
                   None if dgamma is None else dgamma.data_ptr(),
                   None if dbeta is None else dbeta.data_ptr())
    return dx if need[0] else None, dx if need[1] else None, dgamma, dbeta, None


_RowNorm.backward = backward_once(_gradients)


_NAMES = "x", "residual", "weight", "bias"


def _shape(normalized_shape):
    return _args.int_tuple(normalized_shape, "normalized_shape")


def _check_shapes(norm, x, residual, weight, bias):
    """The shapes the binding would report under its own names (gamma, beta)."""
    if residual is not None and residual.shape != x.shape:
        raise ValueError(f"residual has shape {tuple(residual.shape)}; expected x's "
                         f"{tuple(x.shape)}")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and p.shape != norm:
            raise ValueError(f"{name} has shape {tuple(p.shape)}; expected "
                             f"normalized_shape {norm}")


_SHAPES = tuple, list, torch.Size


def _common(center, x, residual, normalized_shape, weight, bias, eps):
    """y (or (y, s) with a residual) of the four functions for the common call, or None
    where _norm's checks must look: x (and the residual, of x's shape and dtype) a
    contiguous CPU tensor of a dtype the library takes, normalized_shape one int (x's
    last dimension), weight and bias None or contiguous float32 vectors of that length,
    eps a float. Every check of _norm passes for such a call, and the library is called
    as _norm calls it (so the same bits), with less Python time: a decoding step's
    1x4096 LayerNorm module under torch.no_grad, 1 thread, 6.0-6.4 -> 4.5-4.8 us a call
    (torch.nn.LayerNorm 4.2-4.7); a LayerNorm training step of 8x4096 (forward and
    backward, 1 thread, best of 7 batches), 47.1-47.3 -> 41.1-42.8 us (PyTorch's
    49.6-50.6)."""
    if type(x) is not torch.Tensor:
        return None
    cols = normalized_shape
    if type(cols) in _SHAPES and len(cols) == 1:
        cols = cols[0]
    if (type(cols) is not int or cols <= 0 or x.dtype not in _TYPES or not x.is_cpu
            or x.layout is not torch.strided or not x.dim() or x.shape[-1] != cols
            or not x.is_contiguous() or x.is_neg() or type(eps) is not float):
        return None
    if residual is not None and (type(residual) is not torch.Tensor
                                 or residual.dtype is not x.dtype or not residual.is_cpu
                                 or residual.layout is not torch.strided
                                 or residual.shape != x.shape
                                 or not residual.is_contiguous() or residual.is_neg()):
        return None
    for p in weight, bias:
        if p is not None and (p.dtype is not _F32 or not p.is_cpu
                              or p.layout is not torch.strided or p.shape != (cols,)
                              or not p.is_contiguous() or p.is_neg()):
            return None
    plan = center, _args.float32(eps, "eps"), (cols,), x.numel() // cols, cols, cols, cols
    if needs_grad(x, residual, weight, bias):
        return _RowNorm.apply(x, residual, weight, bias, plan)
    y, s = _forward(x, residual, weight, bias, plan)
    return y if s is None else (y, s)


def _norm(function, center, x, residual, normalized_shape, weight, bias, eps,
          fallback):
    """The four functions: the library's Function, or PyTorch's op with fallback."""
    if residual is None and function.startswith("add_"):  # not y alone
        raise TypeError("residual must be a torch.Tensor, not NoneType")
    out = _common(center, x, residual, normalized_shape, weight, bias, eps)
    if out is not None:
        return out
    norm = _shape(normalized_shape)
    if not (ours(function, fallback, _NAMES, x, residual, weight, bias)
            and one_dtype(function, fallback, x, (("residual", residual),),
                          (("weight", weight), ("bias", bias)), _RULE)):
        s = x if residual is None else x + residual
        if center:
            y = torch.nn.functional.layer_norm(s, norm, weight, bias, eps)
        else:
            y = _torch_rms_norm(s, norm, weight, eps)
        return y if residual is None else (y, s)
    _check_shapes(norm, x, residual, weight, bias)
    eps = _args.float32(eps, "eps")
    shape = tuple(x.shape)
    lead, _, cols = _split_rows(shape, norm, "x")
    rows = x.numel() // cols
    x, ldx = _rows(x, len(lead), cols)
    residual, ldr = (None, cols) if residual is None else _rows(residual, len(lead),
                                                               cols)
    weight, bias = parameter(weight), parameter(bias)
    plan = center, eps, norm, rows, cols, ldx, ldr
    if needs_grad(x, residual, weight, bias):
        return _RowNorm.apply(x, residual, weight, bias, plan)
    # Nothing to differentiate (inference, torch.no_grad): the library's forward alone,
    # without autograd's Function and the statistics it would save, as batch_norm's
    # inference. A decoding step's 1x4096 under torch.no_grad, 1 thread, best of 15
    # batches: LayerNorm module 8.6 -> 6.1 us a call (torch.nn.LayerNorm 4.4).
    y, s = _forward(x, residual, weight, bias, plan)
    return y if s is None else (y, s)


# The dtypes the library takes (one_dtype's message): weight and bias as PyTorch's
# LayerNorm has them, or float32.
_RULE = "x and residual of one dtype, weight and bias of x's or float32"


def _torch_rms_norm(x, norm, weight, eps):
    """RMSNorm in PyTorch's operations: x * rsqrt(mean(x^2) + eps) * weight."""
    dims = tuple(range(-len(norm), 0))
    y = x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps)
    return y if weight is None else y * weight


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5, *,
               fallback=False):
    """torch.nn.functional.layer_norm on the library."""
    return _norm("layer_norm", True, x, None, normalized_shape, weight, bias, eps,
                 fallback)


def rms_norm(x, normalized_shape, weight=None, eps=1e-6, *, fallback=False):
    """RMSNorm over the trailing normalized_shape, as Llama's:
    y = x * rsqrt(mean(x^2) + eps) * weight."""
    return _norm("rms_norm", False, x, None, normalized_shape, weight, None, eps,
                 fallback)


def add_layer_norm(x, residual, normalized_shape, weight=None, bias=None, eps=1e-5, *,
                   fallback=False):
    """The pre-norm residual step: s = x + residual, y = layer_norm(s). Returns (y, s),
    s being the next residual stream."""
    return _norm("add_layer_norm", True, x, residual, normalized_shape, weight, bias,
                 eps, fallback)


def add_rms_norm(x, residual, normalized_shape, weight=None, eps=1e-6, *,
                 fallback=False):
    """s = x + residual, y = rms_norm(s): returns (y, s)."""
    return _norm("add_rms_norm", False, x, residual, normalized_shape, weight, None,
                 eps, fallback)


class LayerNorm(FallbackModule, torch.nn.LayerNorm):
    """torch.nn.LayerNorm on the library: the same constructor arguments (those of this
    PyTorch: normalized_shape, eps=1e-5, elementwise_affine=True, device, dtype, ...),
    parameters (weight, bias) and state_dict; fallback=True sends tensors the library
    does not take to torch.nn.LayerNorm's own forward."""

    def forward(self, x):
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps,
                          fallback=self.fallback)


class AddLayerNorm(LayerNorm):
    """LayerNorm of x + residual: forward(x, residual) returns (y, x + residual)."""

    def forward(self, x, residual):
        return add_layer_norm(x, residual, self.normalized_shape, self.weight, self.bias,
                              self.eps, fallback=self.fallback)


class RMSNorm(torch.nn.Module):
    """RMSNorm as Llama's: y = x * rsqrt(mean(x^2) + eps) * weight over the trailing
    normalized_shape (Llama's dim), weight initialized to ones; arguments as
    LayerNorm's (elementwise_affine=False: no weight)."""

    def __init__(self, normalized_shape, eps=1e-6, elementwise_affine=True,
                 device=None, dtype=None, *, fallback=False):
        super().__init__()
        self.normalized_shape = _shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.fallback = fallback
        if elementwise_affine:
            self.weight = torch.nn.Parameter(
                torch.ones(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        refuse_unless_fallback(self)

    def reset_parameters(self):
        if self.weight is not None:
            torch.nn.init.ones_(self.weight)

    def forward(self, x):
        return rms_norm(x, self.normalized_shape, self.weight, self.eps,
                        fallback=self.fallback)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine="
                f"{self.elementwise_affine}" + (", fallback=True" if self.fallback
                                                else ""))


class AddRMSNorm(RMSNorm):
    """RMSNorm of x + residual: forward(x, residual) returns (y, x + residual)."""

    def forward(self, x, residual):
        return add_rms_norm(x, residual, self.normalized_shape, self.weight, self.eps,
                            fallback=self.fallback)
