# SPDX-License-Identifier: Apache-2.0
"""normkernels.torch: LayerNorm, RMSNorm and their fused residual-add forms for
PyTorch training, on libnormkernels' forward and backward (autograd Functions).

Functions (as torch.nn.functional.layer_norm): layer_norm, rms_norm, add_layer_norm and
add_rms_norm, the last two returning (y, x + residual). Modules: LayerNorm (a
torch.nn.LayerNorm: the same constructor arguments, parameters and state_dict),
RMSNorm (Llama's: weight only, eps=1e-6), AddLayerNorm and AddRMSNorm, whose forward
takes (x, residual). Gradients reach x, residual, weight and bias; the gradient of the
returned sum (the residual stream) is added to those of x and residual. No double
backward.

The library computes in float32 on the CPU: tensors of another dtype, device or
layout raise TypeError, unless fallback=True (a keyword of the functions, of the
modules' constructors), which hands them to PyTorch's own operations. A module built
for another dtype or device raises TypeError at once, unless fallback=True. x and
residual are read where they lie when contiguous or row-strided (q of a fused QKV
projection); other layouts are copied with .contiguous() first, as PyTorch's own CPU
LayerNorm does. Outputs are new contiguous tensors.

Importing normkernels does not import this module (nor torch): import
normkernels.torch.
"""
import math

import torch
from torch.autograd.function import once_differentiable

from . import _args
from . import _backward, _forward

__all__ = ["layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm", "LayerNorm",
           "RMSNorm", "AddLayerNorm", "AddRMSNorm"]


def _array(t):
    return None if t is None else t.detach().numpy()


def _rows(t, norm):
    """t as the library reads it: t itself when contiguous or row-strided over the
    normalized dims norm, else a contiguous copy (a differentiable op)."""
    if t is None or t.is_contiguous() or t.dim() < len(norm):
        return t  # a mismatched shape is the binding's error, naming it
    try:
        _args.row_stride(_array(t), "", t.dim() - len(norm), math.prod(norm))
        return t
    except ValueError:
        return t.contiguous()


class _RowNorm(torch.autograd.Function):
    """y (and s = x + residual) of the library's forward; the backward from the saved
    x (s) and statistics."""

    @staticmethod
    def forward(ctx, x, residual, weight, bias, center, norm, eps):
        ctx.set_materialize_grads(False)  # an unused output's gradient stays None
        fused = residual is not None
        y, *saved = _forward(center, _array(x), _array(residual), _array(weight),
                             _array(bias), eps, None, fused, True, None, None, None,
                             norm)
        ctx.center, ctx.fused, ctx.norm = center, fused, norm
        y = torch.from_numpy(y)
        if not fused:
            ctx.stats = saved
            ctx.save_for_backward(x, weight)
            return y
        s = torch.from_numpy(saved[0])
        ctx.stats = saved[1:]
        ctx.save_for_backward(s, weight)
        return y, s

    @staticmethod
    @once_differentiable
    def backward(ctx, dy, dsum=None):
        need = ctx.needs_input_grad
        if dy is None:  # only the sum was used: it passes dsum on, as PyTorch's add
            return (dsum if need[0] else None, dsum if need[1] else None) + (None,) * 5
        rows, weight = ctx.saved_tensors
        stats = ctx.stats if ctx.center else (None,) + tuple(ctx.stats)
        dx, dgamma, *dbeta = _backward(
            ctx.center, ctx.fused, _array(_rows(dy, ctx.norm)), _array(rows),
            _array(_rows(dsum, ctx.norm)), *stats, _array(weight), None,
            bool(need[2] or need[3]), None, ctx.norm)
        dx = torch.from_numpy(dx)
        grads = [dx if need[0] else None, dx if need[1] else None, None, None]
        if need[2]:
            grads[2] = torch.from_numpy(dgamma)
        if need[3]:
            grads[3] = torch.from_numpy(dbeta[0])
        return (*grads, None, None, None)


def _ours(function, tensors, fallback):
    """Whether the library takes these tensors (the others None): True for float32
    CPU tensors; False for others with fallback, which PyTorch's own op then takes."""
    refused = None
    for name, t in tensors.items():
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, not {type(t).__name__}")
        if refused is None and (t.dtype != torch.float32 or t.device.type != "cpu"
                                or t.layout != torch.strided):
            refused = name, t
    if refused is None:
        return True
    if fallback:
        return False
    name, t = refused
    raise TypeError(f"normkernels.torch.{function}: {name} is a {t.dtype} tensor on "
                    f"{t.device} ({t.layout}); the library takes float32 CPU tensors "
                    "only (fallback=True gives such tensors to PyTorch's own op)")


def _shape(normalized_shape):
    return _args.int_tuple(normalized_shape, "normalized_shape")


def _check_shapes(norm, x, residual, weight, bias):
    """The shapes the binding would report under its own names (gamma, beta)."""
    if residual is not None and residual.shape != x.shape:
        raise ValueError(f"residual has shape {tuple(residual.shape)}; expected x's "
                         f"{tuple(x.shape)}")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and tuple(p.shape) != norm:
            raise ValueError(f"{name} has shape {tuple(p.shape)}; expected "
                             f"normalized_shape {norm}")


def _norm(function, center, x, residual, normalized_shape, weight, bias, eps,
          fallback):
    """The four functions: the library's Function, or PyTorch's op with fallback."""
    tensors = {"x": x, "residual": residual, "weight": weight, "bias": bias}
    norm = _shape(normalized_shape)
    if not _ours(function, tensors, fallback):
        s = x if residual is None else x + residual
        if center:
            y = torch.nn.functional.layer_norm(s, norm, weight, bias, eps)
        else:
            y = _torch_rms_norm(s, norm, weight, eps)
        return y if residual is None else (y, s)
    _check_shapes(norm, x, residual, weight, bias)
    weight, bias = (None if p is None else p.contiguous() for p in (weight, bias))
    return _RowNorm.apply(_rows(x, norm), _rows(residual, norm), weight, bias, center,
                          norm, eps)


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


def _refuse_unless_fallback(module):
    """A module whose parameters the library cannot take fails at construction."""
    if not module.fallback and module.weight is not None:
        _ours(type(module).__name__, {"weight": module.weight}, False)


class LayerNorm(torch.nn.LayerNorm):
    """torch.nn.LayerNorm on the library: the same constructor arguments (those of this
    PyTorch: normalized_shape, eps=1e-5, elementwise_affine=True, device, dtype, ...),
    parameters (weight, bias) and state_dict; fallback=True sends tensors the library
    does not take to torch.nn.LayerNorm's own forward."""

    def __init__(self, *args, fallback=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.fallback = fallback
        _refuse_unless_fallback(self)

    def forward(self, x):
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps,
                          fallback=self.fallback)

    def extra_repr(self):
        return super().extra_repr() + (", fallback=True" if self.fallback else "")


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
        _refuse_unless_fallback(self)

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
