# SPDX-License-Identifier: Apache-2.0
"""What the autograd Functions share: the check that sends tensors to the library or to
PyTorch's own op, tensors as the library reads them, and a backward without double
backward."""
import torch
from torch.autograd.function import once_differentiable

F32 = torch.float32


def ours(function, fallback, names, *tensors):
    """Whether the library takes these tensors (named by names; None for none): True for
    float32 CPU tensors; False for others with fallback, which PyTorch's own op then
    takes."""
    refused = None
    for name, t in zip(names, tensors):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, not {type(t).__name__}")
        if refused is None and (t.dtype is not F32 or not t.is_cpu
                                or t.layout is not torch.strided):
            refused = name, t
    if refused is None:
        return True
    if fallback:
        return False
    name, t = refused
    raise TypeError(f"normkernels.torch.{function}: {name} is a {t.dtype} tensor on "
                    f"{t.device} ({t.layout}); the library takes float32 CPU tensors "
                    "only (fallback=True gives such tensors to PyTorch's own op)")


def refuse_unless_fallback(module, names=("weight",)):
    """A module whose parameters (or buffers: the first of names that is not None) the
    library cannot take fails at construction."""
    for name in names:
        t = getattr(module, name, None)
        if t is not None:
            if not module.fallback:
                ours(type(module).__name__, False, (name,), t)
            return


def dense(p):
    """A parameter (weight, bias) as the library reads it: contiguous, its values in
    memory."""
    if p is None or p.is_contiguous() and not p.is_neg():
        return p
    return p.resolve_neg().contiguous()


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


def address(t):
    """The address of t's data, or None (NULL) for None."""
    return None if t is None else t.data_ptr()
