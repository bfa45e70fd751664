# SPDX-License-Identifier: Apache-2.0
"""normkernels.torch on bfloat16 and float16 tensors: the LayerNorm family's functions
and modules against the float64 reference rounded to the tensors' dtype and against
PyTorch computing in float32 then rounding; gradients (the _bf16 / _f16 backwards,
called on the tensors themselves: the f32 backward on the widened tensors, dx rounded
once) against the f32 binding's and PyTorch's float32 autograd rounded; mixed dtypes
refused. BatchNorm's and GroupNorm's: test_torch_channelnorm_half."""
import numpy as np
import pytest

import normkernels as nk
from reference import assert_rounded, backward_reference, data, reference, round_half

torch = pytest.importorskip("torch")
import normkernels.torch as nkt  # noqa: E402 (needs torch)

NAMES = ["layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm"]
HALVES = {torch.bfloat16: "bf16", torch.float16: "f16"}
F32, F64 = torch.float32, torch.float64


def half(shape, seed, dtype, offset=0.0):
    return torch.from_numpy(data(shape, seed, offset)).to(dtype)


def f64(t):
    return t.detach().to(F64).numpy()


def call(name, x, residual, weight, bias, eps=1e-5):
    """name's function of normkernels.torch over the last axis."""
    params = (weight, bias) if "layer" in name else (weight,)
    inputs = (x, residual) if name.startswith("add") else (x,)
    return getattr(nkt, name)(*inputs, x.shape[-1], *params, eps)


def pytorchs(name, s, weight, bias, eps, dtype=F32):
    """PyTorch's own norm (Llama's formula for RMSNorm) of s in dtype."""
    s, w = s.to(dtype), None if weight is None else weight.to(dtype)
    if "layer" in name:
        b = None if bias is None else bias.to(dtype)
        return torch.nn.functional.layer_norm(s, s.shape[-1:], w, b, eps)
    y = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps)
    return y if w is None else y * w


def check_forward(name, x, residual, y, s, weight, bias, eps):
    """Ours (y, and s when fused) against the float64 reference on the widened (summed
    and rounded) input, rounded to x's dtype within design.md's bound, and against
    PyTorch's float32 result rounded (theirs differs from the exact y by its own error
    more)."""
    fmt, center = HALVES[x.dtype], "layer" in name
    assert y.dtype is x.dtype
    x, s = x.detach(), None if s is None else s.detach()
    if residual is not None:
        assert s.dtype is x.dtype
        np.testing.assert_array_equal(f64(s), round_half(f64(x) + f64(residual), fmt))
        assert torch.equal(s, (x.float() + residual.float()).to(x.dtype))
    else:
        s = x
    g = None if weight is None else weight.detach().float().numpy()
    b = None if bias is None or not center else bias.detach().float().numpy()
    want, _, _, bound = reference(s.float().numpy(), gamma=g, beta=b, eps=eps,
                                  center=center)
    assert assert_rounded(f64(y), want, bound, fmt) > 0.8
    theirs = f64(pytorchs(name, s, weight, bias, eps))
    assert_rounded(f64(y), theirs, bound + np.abs(theirs - want), fmt)


@pytest.mark.parametrize("dtype", HALVES, ids=HALVES.get)
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", [(3, 40), (4, 2, 96), (2, 1000)])
def test_functions_give_the_rounded_reference(each_isa, name, dtype, shape):
    fused = name.startswith("add")
    x = half(shape, 1, dtype, offset=2.0)
    residual = half(shape, 2, dtype) if fused else None
    weight, bias = (torch.from_numpy(data(shape[-1:], seed)) for seed in (3, 4))
    out = call(name, x, residual, weight, bias)
    y, s = out if fused else (out, None)
    check_forward(name, x, residual, y, s, weight, bias, 1e-5)


@pytest.mark.parametrize("dtype", HALVES, ids=HALVES.get)
@pytest.mark.parametrize("module", ["LayerNorm", "RMSNorm", "AddLayerNorm",
                                    "AddRMSNorm"])
def test_modules_of_half_parameters(module, dtype):
    """A module built with dtype=bfloat16 / float16 (as torch.nn.LayerNorm's half
    parameters): its parameters widened exactly, their gradients in their dtype."""
    torch.manual_seed(0)
    m = getattr(nkt, module)(64, dtype=dtype)
    with torch.no_grad():
        for p in m.parameters():
            p.normal_()
    name = {"LayerNorm": "layer_norm", "RMSNorm": "rms_norm",
            "AddLayerNorm": "add_layer_norm", "AddRMSNorm": "add_rms_norm"}[module]
    x = half((8, 64), 1, dtype).requires_grad_()
    residual = half((8, 64), 2, dtype) if module.startswith("Add") else None
    out = m(x) if residual is None else m(x, residual)
    y, s = (out, None) if residual is None else out
    bias = getattr(m, "bias", None)
    check_forward(name, x, residual, y, s, m.weight, bias, m.eps)
    params = [p.detach().float() for p in m.parameters()]
    inputs = (x,) if residual is None else (x, residual)
    widened = getattr(nkt, name)(*inputs, 64, *params, m.eps)
    assert torch.equal(out if residual is None else out[0], widened
                       if residual is None else widened[0])
    y.float().sum().backward()
    assert all(p.grad.dtype is dtype for p in m.parameters())


def pytorch_gradients(name, s, dy, dsum, weight, bias, eps, dtype):
    """The gradient of s (x and residual) of PyTorch's norm in dtype, of arrays."""
    s = torch.from_numpy(s).to(dtype).requires_grad_()
    weight, bias = (None if p is None else torch.from_numpy(p) for p in (weight, bias))
    loss = (pytorchs(name, s, weight, bias, eps, dtype) * torch.from_numpy(dy)).sum()
    if dsum is not None:
        loss = loss + (s * torch.from_numpy(dsum)).sum()
    loss.backward()
    return s.grad.to(F64).numpy()


def f32_backward(name, s, dy, dsum, w, b, eps):
    """The f32 binding's forward statistics and backward of s (float32 arrays):
    (dx, dgamma, dbeta or None, mean or None, rstd)."""
    center, fused = "layer" in name, name.startswith("add")
    if center:
        _, mean, rstd = nk.layer_norm(s, w, b, eps, return_stats=True)
        stats = mean, rstd
    else:
        mean, (_, rstd) = None, nk.rms_norm(s, w, eps, return_stats=True)
        stats = rstd,
    backward = getattr(nk, name + "_backward")
    grads = backward(dy, s, *stats, w, dsum) if fused else backward(dy, s, *stats, w)
    return (*grads, None)[:3] + (mean, rstd)


@pytest.mark.parametrize("weight_dtype", ["float32", "x's"])
@pytest.mark.parametrize("dtype", HALVES, ids=HALVES.get)
@pytest.mark.parametrize("name", NAMES)
def test_gradients_are_the_f32_backwards_rounded(each_isa, name, dtype, weight_dtype):
    """x's (and residual's) gradient: the f32 binding's backward on the widened s, dy
    and dsum, rounded once to x's dtype; weight's and bias's the f32 ones (rounded to
    their dtype). Against PyTorch's float32 autograd rounded: ours lies within
    design.md's backward bound (as test_torch's) of the exact gradient (PyTorch's
    float64 autograd), theirs within its own error of it."""
    center, fused, fmt = "layer" in name, name.startswith("add"), HALVES[dtype]
    shape, cols, eps = (6, 4, 80), 80, 1e-5
    pdtype = F32 if weight_dtype == "float32" else dtype
    x = half(shape, 1, dtype, offset=2.0).requires_grad_()
    residual = half(shape, 2, dtype).requires_grad_() if fused else None
    weight = half((cols,), 3, pdtype).requires_grad_()
    bias = half((cols,), 4, pdtype).requires_grad_() if center else None
    dy, dsum = half(shape, 5, dtype), half(shape, 6, dtype) if fused else None
    out = call(name, x, residual, weight, bias, eps)
    torch.autograd.backward(out, (dy, dsum) if fused else dy)
    assert x.grad.dtype is dtype
    s = (out[1] if fused else x).detach().float().numpy()
    dy32 = dy.float().numpy()
    dsum32 = dsum.float().numpy() if fused else None
    w = weight.detach().float().numpy()
    b = bias.detach().float().numpy() if center else None
    dx, dw, db, mean, rstd = f32_backward(name, s, dy32, dsum32, w, b, eps)
    np.testing.assert_array_equal(f64(x.grad), round_half(dx, fmt))
    if fused:
        assert torch.equal(residual.grad, x.grad)
    for p, want in ((weight, dw), (bias, db)):
        if p is not None:
            assert p.grad.dtype is pdtype
            np.testing.assert_array_equal(f64(p.grad), want if pdtype is F32
                                          else round_half(want, fmt))
    # Against PyTorch's float32 autograd, rounded.
    exact = pytorch_gradients(name, s, dy32, dsum32, w, b, eps, F64)
    theirs = pytorch_gradients(name, s, dy32, dsum32, w, b, eps, F32)
    at_saved = backward_reference(dy32, s, mean, rstd, w, dsum32)
    _, exact_mean, exact_r, _ = reference(s, eps=eps, center=center)
    at_exact = backward_reference(dy32, s, exact_mean if center else None, exact_r, w,
                                  dsum32, u=2.0 ** -53, depth=lambda n: n)
    bound = at_saved[3] + np.abs(at_saved[0] - at_exact[0]) + 2 * at_exact[3]
    assert np.all(np.abs(dx - exact) <= bound)
    assert assert_rounded(f64(x.grad), theirs, bound + np.abs(theirs - exact), fmt) > 0.8


@pytest.mark.parametrize("dtype", HALVES, ids=HALVES.get)
def test_half_views_are_read_where_they_lie(dtype):
    """k of a half QKV buffer: read in place (its row stride the buffer's), the
    contiguous copy's bits; its gradient reaches the buffer's columns."""
    qkv = half((16, 192), 1, dtype).requires_grad_()
    k, w = qkv[:, 64:128], torch.from_numpy(data((64,), 2))
    assert nkt._rownorm._rows(k, 1, 64) == (k, 192)
    copied = k.detach().contiguous().requires_grad_()
    y, want = nkt.rms_norm(k, 64, w), nkt.rms_norm(copied, 64, w)
    assert torch.equal(y, want)
    dy = half((16, 64), 3, dtype)
    y.backward(dy)
    want.backward(dy)
    assert torch.equal(qkv.grad[:, 64:128], copied.grad)
    assert not qkv.grad[:, :64].any() and not qkv.grad[:, 128:].any()


@pytest.mark.parametrize("dtype", HALVES, ids=HALVES.get)
@pytest.mark.parametrize("name", NAMES)
def test_half_gradients_call_the_half_backward_in_place(monkeypatch, name, dtype):
    """The backward runs the kernel of x's dtype on the saved tensors and on dy and
    dsum where they lie (row-strided views too): no widened copies. Its results are
    the contiguous gradients' bits."""
    fused = name.startswith("add")
    calls = []

    def spy(t, center, fused, rows, cols, x, ldx, dy, lddy, dsum, ldds, *rest):
        calls.append((t, x, ldx, dy, lddy, dsum, ldds))
        return nk._backward_call(t, center, fused, rows, cols, x, ldx, dy, lddy, dsum,
                                 ldds, *rest)

    monkeypatch.setattr(nkt._rownorm, "_backward_call", spy)
    x = half((5, 200), 1, dtype)[:, 30:94].requires_grad_()
    residual = half((5, 64), 2, dtype).requires_grad_() if fused else None
    weight = torch.from_numpy(data((64,), 3)).requires_grad_()
    out = call(name, x, residual, weight, None)
    dy = half((5, 100), 5, dtype)[:, 7:71]
    dsum = half((5, 90), 6, dtype)[:, 2:66] if fused else None
    dense = (dy.contiguous(), dsum.contiguous()) if fused else dy.contiguous()
    want = torch.autograd.grad(out, (x, weight), dense, retain_graph=True)
    grads = torch.autograd.grad(out, (x, weight), (dy, dsum) if fused else dy)
    (t, px, ldx, pdy, lddy, pdsum, ldds) = calls[-1]
    assert t == HALVES[dtype]
    saved = out[1] if fused else x
    assert (px, ldx) == (saved.data_ptr(), 64 if fused else 200)
    assert (pdy, lddy) == (dy.data_ptr(), 100)
    if fused:
        assert (pdsum, ldds) == (dsum.data_ptr(), 90)
    assert grads[0].dtype is dtype and grads[1].dtype is F32
    assert all(torch.equal(g, w) for g, w in zip(grads, want))


def test_mixed_dtypes_are_refused_or_given_to_pytorch():
    x = half((3, 8), 1, torch.bfloat16)
    x32 = x.float()
    with pytest.raises(TypeError, match=r"add_layer_norm: residual is a torch.float32 "
                       r"tensor and x a torch.bfloat16 one; the library takes x and "
                       r"residual of one dtype, weight and bias of x's or float32"):
        nkt.add_layer_norm(x, x32, 8)
    with pytest.raises(TypeError, match="weight is a torch.float16 tensor and x a "
                       "torch.bfloat16 one"):
        nkt.layer_norm(x, 8, torch.ones(8, dtype=torch.float16))
    with pytest.raises(TypeError, match="bias is a torch.bfloat16 tensor and x a "
                       "torch.float32 one"):
        nkt.layer_norm(x32, 8, None, torch.zeros(8, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="weight is a torch.bfloat16 tensor and x a "
                       "torch.float32 one"):
        nkt.RMSNorm(8, dtype=torch.bfloat16)(x32)
    y, s = nkt.add_rms_norm(x, x32, 8, fallback=True)  # PyTorch's: promoted
    assert s.dtype is F32 and torch.equal(s, x32 + x32)
