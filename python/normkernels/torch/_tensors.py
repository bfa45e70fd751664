# SPDX-License-Identifier: Apache-2.0
"""What the autograd Functions and modules share: the checks that send tensors to the
library or to PyTorch's own op (their dtypes among them), tensors as the library reads
them (channels first or last, parameters widened), a backward without double backward,
and the modules' fallback."""
import torch
from torch.autograd.function import once_differentiable

from .. import _NCHW, _NHWC

F32 = torch.float32
TYPES = {F32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}  # kernels' suffixes
DTYPES = tuple(TYPES)  # those the library takes
_TYPE_NAMES = {F32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
_CHANNELS_LAST = {4: torch.channels_last, 5: torch.channels_last_3d}


def ours(function, fallback, names, *tensors, dtypes=DTYPES):
    """Whether the library takes these tensors (named by names; None for none): True for
    CPU tensors of dtypes (float32, bfloat16 and float16 unless told: one_dtype then
    checks them against each other); False for others with fallback, which PyTorch's
    own op then takes."""
    refused = None
    for name, t in zip(names, tensors):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, not {type(t).__name__}")
        if refused is None and (t.dtype not in dtypes or not t.is_cpu
                                or t.layout is not torch.strided):
            refused = name, t
    if refused is None:
        return True
    if fallback:
        return False
    name, t = refused
    taken = ", ".join(_TYPE_NAMES[d] for d in dtypes[:-1])
    taken = f"{taken} and {_TYPE_NAMES[dtypes[-1]]}" if taken else _TYPE_NAMES[dtypes[0]]
    raise TypeError(f"normkernels.torch.{function}: {name} is a {t.dtype} tensor on "
                    f"{t.device} ({t.layout}); the library takes {taken} CPU tensors "
                    "only (fallback=True gives such tensors to PyTorch's own op)")


def one_dtype(function, fallback, x, alike, widened, rule, x_name="x"):
    """Whether the library takes the dtypes of these tensors, which ours() took: those
    of alike ((name, tensor or None) pairs) x's, those of widened x's or float32 (a
    float32 parameter or statistic with half x, as PyTorch's mixed precision keeps
    them). False for others with fallback; otherwise TypeError, saying rule (what the
    library takes)."""
    for pairs, dtypes in ((alike, (x.dtype,)), (widened, (x.dtype, F32))):
        for name, t in pairs:
            if t is not None and t.dtype not in dtypes:
                if fallback:
                    return False
                raise TypeError(f"normkernels.torch.{function}: {name} is a {t.dtype} "
                                f"tensor and {x_name} a {x.dtype} one; the library "
                                f"takes {rule} (fallback=True gives such tensors to "
                                "PyTorch's own op)")
    return True


def refuse_unless_fallback(module, names=("weight",), dtypes=DTYPES):
    """A module whose parameters (or buffers: the first of names that is not None) the
    library cannot take (tensors of dtypes on the CPU) fails at construction."""
    for name in names:
        t = getattr(module, name, None)
        if t is not None:
            if not module.fallback:
                ours(type(module).__name__, False, (name,), t, dtypes=dtypes)
            return


class FallbackModule:
    """A base before a torch.nn module's class: the keyword fallback of its constructor,
    shown by repr. Without fallback, a module whose parameters or buffers (checked:
    the first of these names that is not None) the library cannot take fails at
    construction."""

    checked = ("weight",)
    dtypes = DTYPES  # those the library takes of them

    def __init__(self, *args, fallback=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.fallback = fallback
        refuse_unless_fallback(self, self.checked, self.dtypes)

    def extra_repr(self):
        return super().extra_repr() + (", fallback=True" if self.fallback else "")


def dense(p):
    """A parameter (weight, bias) as the library reads it: contiguous, its values in
    memory."""
    if p is None or p.is_contiguous() and not p.is_neg():
        return p
    return p.resolve_neg().contiguous()


def parameter(p):
    """A weight or bias as the library reads it: float32 (a half one widened exactly,
    its gradient rounded back by autograd), contiguous."""
    return dense(p if p is None or p.dtype is F32 else p.float())


def strided(g, name):
    """The gradient g of an output, refused unless strided (a custom Function may give
    a sparse one, which PyTorch's own norms refuse too)."""
    if g.layout is not torch.strided:
        raise TypeError(f"normkernels.torch: the gradient {name} is a {g.layout} "
                        "tensor; the library's backward takes strided tensors only")
    return g.resolve_neg() if g.is_neg() else g


def backward_once(gradients):
    """A Function's backward of gradients(ctx, *grads): under create_graph=True
    once_differentiable's (no double backward); otherwise gradients itself, without
    once_differentiable's no_grad and wrapping."""
    once = once_differentiable(gradients)

    def backward(ctx, *grads):
        if torch.is_grad_enabled():
            return once(ctx, *grads)
        return gradients(ctx, *grads)

    return staticmethod(backward)


def needs_grad(*tensors):
    """Whether autograd records a call on these tensors (None for none): grad mode on
    and one of them requiring a gradient. Where it does not, the functions call the
    library's forward alone, keeping nothing for a backward."""
    if not torch.is_grad_enabled():
        return False
    for t in tensors:
        if t is not None and t.requires_grad:
            return True
    return False


def address(t):
    """The address of t's data, or None (NULL) for None."""
    return None if t is None else t.data_ptr()


def _channels_last(t):
    """Whether t (N, C, *spatial) is dense in memory as (N, *spatial, C)."""
    memory_format = _CHANNELS_LAST.get(t.dim())
    if memory_format is not None:
        return t.is_contiguous(memory_format=memory_format)
    return t.dim() > 2 and t.movedim(1, -1).is_contiguous()


def channel_layout(t):
    """(t (N, C, *spatial) as the per-channel norms read it, its layout): t itself when
    contiguous (NCHW) or channels last in memory (NHWC: torch.channels_last,
    channels_last_3d, or an (N, C, L) view of an (N, L, C) tensor), else a contiguous
    copy (differentiable)."""
    if t.is_neg():  # a negated view: its memory holds -t
        t = t.resolve_neg()
    if t.is_contiguous():
        return t, _NCHW
    if _channels_last(t):
        return t, _NHWC
    return t.contiguous(), _NCHW


def gradient(g, layout):
    """The gradient g of y in x's layout (channel_layout's), copied there when it lies
    otherwise."""
    g = strided(g, "dy")
    if layout == _NCHW:
        return g if g.is_contiguous() else g.contiguous()
    if _channels_last(g):
        return g
    memory_format = _CHANNELS_LAST.get(g.dim())
    if memory_format is not None:
        return g.contiguous(memory_format=memory_format)
    return g.movedim(1, -1).contiguous().movedim(-1, 1)
