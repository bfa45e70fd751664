# SPDX-License-Identifier: Apache-2.0
"""normkernels.torch: gradients against PyTorch's own in float64 within a bound derived
from design.md's, training against torch.nn.LayerNorm, the modules as PyTorch's, and
what is refused or handed to PyTorch (fallback=True)."""
import contextlib
import copy

import numpy as np
import pytest

import normkernels as nk
from reference import backward_reference, data, reference

torch = pytest.importorskip("torch")
import normkernels.torch as nkt  # noqa: E402 (needs torch)
from sparse_gradient import SparseGradient  # noqa: E402
from torch_steps import sgd_losses  # noqa: E402

NAMES = ["layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm"]
F64 = torch.float64


def leaf(a, dtype=torch.float32):
    return torch.from_numpy(a).to(dtype).requires_grad_()


def llama_rms_norm(x, weight, eps):
    """Llama's RMSNorm: x * rsqrt(mean(x^2) + eps) * weight."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


class LlamaRMSNorm(torch.nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return llama_rms_norm(x, self.weight, self.eps)


def call(name, x, residual, weight, bias, eps, **kw):
    """name's function of normkernels.torch over the last axis."""
    fn = getattr(nkt, name)
    params = (weight, bias) if "layer" in name else (weight,)
    inputs = (x, residual) if name.startswith("add") else (x,)
    return fn(*inputs, x.shape[-1], *params, eps, **kw)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", [(1, 5), (6, 4, 33), (64, 300), (3, 1027)])
def test_gradients_are_pytorchs_within_the_bound(name, shape):
    """The gradients of x, residual, weight and bias against PyTorch's own in float64
    (torch.nn.LayerNorm; Llama's RMSNorm formula), from the forward's float32 sum.
    Bound: design.md's (ours against the float64 reference from the forward's saved
    statistics), plus what the saved statistics' own error makes of the exact gradient
    (the float64 reference at the saved and at the exact statistics), plus both float64
    computations' rounding (the bound again, u = 2^-53, sums in any order)."""
    center, fused = "layer" in name, name.startswith("add")
    cols, eps = shape[-1], 1e-5
    x, residual = data(shape, 1, offset=2.0), data(shape, 2) if fused else None
    weight, bias = data((cols,), 3), data((cols,), 4)
    dy, dsum = data(shape, 5), data(shape, 6) if fused else None
    # Ours, through autograd.
    t = {k: None if v is None else leaf(v)
         for k, v in dict(x=x, residual=residual, weight=weight, bias=bias).items()}
    outputs = call(name, t["x"], t["residual"], t["weight"], t["bias"], eps)
    if fused:
        torch.autograd.backward(outputs, (torch.from_numpy(dy), torch.from_numpy(dsum)))
    else:
        outputs.backward(torch.from_numpy(dy))
    # PyTorch's own in float64, from s = x + residual as the forward rounded it: its
    # gradient is that of both x and residual.
    kw = {"return_stats": True, "gamma": weight}
    if fused:
        saved = getattr(nk, name)(x, residual, **kw)
        s = saved[1]
    else:
        saved, s = getattr(nk, name)(x, **kw), x
    s64, w64 = leaf(s, F64), leaf(weight, F64)
    if center:
        theirs = torch.nn.LayerNorm(cols, eps=eps, dtype=F64)
        theirs.weight.data, theirs.bias.data = w64.detach(), leaf(bias, F64).detach()
        y64 = theirs(s64)
        params64 = theirs.weight, theirs.bias
    else:
        y64, params64 = llama_rms_norm(s64, w64, eps), (w64,)
    loss = (y64 * torch.from_numpy(dy)).sum()
    if fused:
        loss = loss + (s64 * torch.from_numpy(dsum)).sum()
    loss.backward()
    # The bound.
    saved_mean, saved_r = saved[-2:] if center else (None, saved[-1])
    _, exact_mean, exact_r, _ = reference(x, residual, eps=eps, center=center)
    at_saved = backward_reference(dy, s, saved_mean, saved_r, weight, dsum)
    exact = backward_reference(dy, s, exact_mean if center else None, exact_r, weight,
                               dsum, u=2.0 ** -53, depth=lambda n: n)
    ours = t["x"].grad, t["weight"].grad, t["bias"].grad
    pytorchs = (s64.grad,) + tuple(p.grad for p in params64)
    for i, (got, want) in enumerate(zip(ours, pytorchs)):  # zip: rms_norm has no bias
        bound = at_saved[3 + i] + np.abs(at_saved[i] - exact[i]) + 2 * exact[3 + i]
        assert np.all(np.abs(got.numpy() - want.numpy()) <= bound)
    if fused:
        assert torch.equal(t["residual"].grad, t["x"].grad)
    assert (t["bias"].grad is None) == (not center)


def training_losses(model):
    """Losses of five steps of SGD on a fixed batch."""
    torch.manual_seed(1)
    return sgd_losses(model, torch.randn(64, 16), torch.randn(64, 4))


@pytest.mark.parametrize("theirs, ours", [(torch.nn.LayerNorm, nkt.LayerNorm),
                                          (LlamaRMSNorm, nkt.RMSNorm)])
def test_training_gives_pytorchs_losses(theirs, ours):
    """Linear-norm-ReLU-Linear from the same initial weights: the same losses, within
    1e-5 relative, for five SGD steps."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), theirs(32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4))
    with torch.no_grad():  # parameters of the norm that matter from the first step
        for p in model[1].parameters():
            p.normal_()
    mine = copy.deepcopy(model)
    mine[1] = ours(32)
    mine[1].load_state_dict(model[1].state_dict())
    want, got = training_losses(model), training_losses(mine)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert got[-1] < got[0]


def test_modules_are_pytorchs():
    """LayerNorm is a torch.nn.LayerNorm (arguments, parameters, state_dict); RMSNorm
    takes Llama's state_dict; the modules' outputs are the binding's."""
    theirs = torch.nn.LayerNorm((4, 8), eps=1e-3)
    ln = nkt.LayerNorm((4, 8), eps=1e-3, device="cpu", dtype=torch.float32)
    assert isinstance(ln, torch.nn.LayerNorm)
    assert ln.state_dict().keys() == theirs.state_dict().keys() == {"weight", "bias"}
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_()
    ln.load_state_dict(theirs.state_dict())
    x = torch.from_numpy(data((3, 4, 8), 1))
    want = nk.layer_norm(x.numpy(), theirs.weight.detach().numpy(),
                         theirs.bias.detach().numpy(), 1e-3, normalized_shape=(4, 8))
    np.testing.assert_array_equal(ln(x).detach().numpy(), want)
    assert nkt.LayerNorm(8, elementwise_affine=False).state_dict() == {}
    rms = nkt.RMSNorm(8)
    assert rms.eps == 1e-6 and torch.equal(rms.weight, torch.ones(8))
    llama = LlamaRMSNorm(8)
    llama.weight.data.normal_()
    rms.load_state_dict(llama.state_dict())
    x = torch.from_numpy(data((5, 8), 2))
    np.testing.assert_array_equal(
        rms(x).detach().numpy(), nk.rms_norm(x.numpy(), llama.weight.detach().numpy(),
                                             1e-6))
    residual = torch.from_numpy(data((5, 8), 3))
    for module, fn in ((nkt.AddLayerNorm(8), nk.add_layer_norm),
                       (nkt.AddRMSNorm(8), nk.add_rms_norm)):
        y, s = module(x, residual)
        params = [p.detach().numpy() for p in module.parameters()]
        want_y, want_s = fn(x.numpy(), residual.numpy(), *params, module.eps)
        np.testing.assert_array_equal(y.detach().numpy(), want_y)
        np.testing.assert_array_equal(s.detach().numpy(), want_s)
    assert "fallback=True" in repr(nkt.RMSNorm(8, fallback=True))


@pytest.mark.parametrize("name", NAMES)
def test_forwards_without_gradients_are_the_same(name):
    """Where nothing needs a gradient (torch.no_grad, torch.inference_mode, or no input
    requiring one), the forward runs without autograd's Function: y (and s) bit for
    bit those of the forward that saves for a backward, on contiguous and row-strided
    x, and nothing in them requires a gradient."""
    fused = name.startswith("add")
    buffer = torch.from_numpy(data((6, 48), 1, offset=2.0))
    residual = torch.from_numpy(data((6, 33), 2)) if fused else None
    w, b = torch.from_numpy(data((33,), 3)), torch.from_numpy(data((33,), 4))
    for cut in (lambda t: t[:, :33].contiguous(), lambda t: t[:, 5:38]):
        x = cut(buffer)
        want = call(name, cut(buffer.clone().requires_grad_()), residual,
                    w.clone().requires_grad_(), b.clone().requires_grad_(), 1e-5)
        want = want if fused else (want,)
        assert all(t.requires_grad for t in want)
        for context in (torch.no_grad, torch.inference_mode, contextlib.nullcontext):
            with context():
                got = call(name, x, residual, w, b, 1e-5)
            got = got if fused else (got,)
            assert len(got) == len(want)
            for g, t in zip(got, want):
                assert not g.requires_grad and torch.equal(g, t.detach())


@pytest.mark.parametrize("name", NAMES)
def test_common_inference_calls_are_the_same(name, monkeypatch):
    """The common inference call (x and the residual contiguous CPU tensors,
    normalized_shape one int, weight and bias float32 vectors or None, eps a float)
    takes a shorter way, which skips _norm's checks: y (and s) bit for bit those of the
    forward that saves for a backward, taken exactly where those conditions hold; every
    other call keeps the checked way (seen by its parse of normalized_shape)."""
    center, fused = "layer" in name, name.startswith("add")
    checked = []
    parse = nkt._rownorm._shape
    monkeypatch.setattr(nkt._rownorm, "_shape",
                        lambda shape: checked.append(shape) or parse(shape))
    x = torch.from_numpy(data((2, 3, 33), 1, offset=2.0))
    r = torch.from_numpy(data((2, 3, 33), 2))
    w, b = torch.from_numpy(data((33,), 3)), torch.from_numpy(data((33,), 4))
    wide = torch.from_numpy(data((33, 2), 5))
    short = {"x": x, "residual": r, "shape": 33, "weight": w, "bias": b, "eps": 1e-5}
    half = {"residual": r.to(torch.bfloat16), "x": x.to(torch.bfloat16)}
    cases = [({}, True), ({"shape": (33,)}, True), ({"shape": [33]}, True),
             ({"shape": torch.Size([33])}, True), ({"weight": None, "bias": None}, True),
             ({"x": x[:0], "residual": r[:0]}, True), (half, True),
             ({"x": x.half(), "residual": r.half()}, True),
             ({"weight": torch.nn.Parameter(w)}, True),
             ({"shape": (3, 33), "weight": None, "bias": None}, False),
             ({"x": x[..., :32], "residual": r[..., :32], "shape": 32, "weight": w[:32],
               "bias": b[:32]}, False),
             ({"x": x.transpose(0, 1), "residual": r.transpose(0, 1)}, False),
             ({"x": -x.conj()}, True), ({"x": torch.complex(x, x).conj().imag}, False),
             ({"weight": wide[:, 0]}, False),
             ({"x": x.half(), "residual": r.half(), "weight": w.half()}, False),
             ({"eps": 1}, False),
             ({"x": torch.nn.Parameter(x, requires_grad=False)}, False)]
    if fused:
        cases += [({"residual": r.transpose(0, 1).contiguous().transpose(0, 1)}, False),
                  ({"residual": torch.nn.Parameter(r, requires_grad=False)}, False)]
    for change, short_way in cases:
        a = dict(short, **change)
        inputs = (a["x"], a["residual"]) if fused else (a["x"],)
        params = (a["weight"], a["bias"]) if center else (a["weight"],)
        getattr(nkt, name)(*inputs, a["shape"], *params, a["eps"])  # warm
        checked.clear()
        with torch.no_grad():
            got = getattr(nkt, name)(*inputs, a["shape"], *params, a["eps"])
        assert (not checked) == short_way, change
        leaves = [torch.nn.Parameter(t.detach().clone()) for t in inputs]  # checked
        grads = [p.detach().clone().requires_grad_() if p is not None else None
                 for p in params]
        want = getattr(nkt, name)(*leaves, a["shape"], *grads, a["eps"])
        got, want = (got, want) if fused else ((got,), (want,))
        for g, t in zip(got, want):
            assert t.requires_grad and not g.requires_grad
            assert g.dtype == t.dtype and torch.equal(g, t.detach()), change


@pytest.mark.parametrize("name", NAMES)
def test_common_training_calls_are_the_same(name, monkeypatch):
    """The common call that autograd records takes the shorter way too: y (and s) and
    every gradient bit for bit those of the checked way (taken here by x being a
    Parameter, which the shorter way leaves to the checks)."""
    center, fused = "layer" in name, name.startswith("add")
    checked = []
    parse = nkt._rownorm._shape
    monkeypatch.setattr(nkt._rownorm, "_shape",
                        lambda shape: checked.append(shape) or parse(shape))
    x, r = data((2, 3, 33), 1, offset=2.0), data((2, 3, 33), 2)
    w, b = data((33,), 3), data((33,), 4)
    dy, dsum = data((2, 3, 33), 5), data((2, 3, 33), 6)
    for dtype in (torch.float32, torch.bfloat16):
        runs = []
        for short in (True, False):
            def make(a):
                t = torch.from_numpy(a).to(dtype)
                return t.requires_grad_() if short else torch.nn.Parameter(t)
            inputs = [make(x), make(r)] if fused else [make(x)]
            params = [leaf(w), leaf(b)] if center else [leaf(w)]
            checked.clear()
            out = getattr(nkt, name)(*inputs, 33, *params, 1e-5)
            assert (not checked) == short
            out = out if fused else (out,)
            grads = [torch.from_numpy(g).to(dtype) for g in (dy, dsum)][:len(out)]
            torch.autograd.backward(out, grads)
            runs.append([t.detach() for t in out] + [t.grad for t in inputs + params])
        for got, want in zip(*runs):
            assert got.dtype == want.dtype and torch.equal(got, want), (name, dtype)


def test_gradient_of_one_output_of_the_fused_forms():
    """As PyTorch: only s used passes its gradient on (no parameter gradient); only y
    used is dsum = 0; y.sum() (a gradient of stride 0) is the gradient of ones."""
    x, residual = leaf(data((4, 16), 1)), leaf(data((4, 16), 2))
    w, b = leaf(data((16,), 3)), leaf(data((16,), 4))
    _, s = nkt.add_layer_norm(x, residual, 16, w, b)
    (s * 3).sum().backward()
    assert torch.equal(x.grad, torch.full((4, 16), 3.0)) and w.grad is None
    x.grad = residual.grad = None
    y, _ = nkt.add_layer_norm(x, residual, 16, w, b)
    y.sum().backward()
    got = x.grad.clone(), w.grad.clone(), b.grad.clone()
    for p in (x, residual, w, b):
        p.grad = None
    y, s = nkt.add_layer_norm(x, residual, 16, w, b)
    torch.autograd.backward((y, s), (torch.ones(4, 16), torch.zeros(4, 16)))
    for a, b_ in zip(got, (x.grad, w.grad, b.grad)):
        assert torch.equal(a, b_)


def test_views_are_read_where_they_lie():
    """A row-strided view (k of a fused QKV output) is read in place, its gradient
    reaching the buffer's columns; a transposed one is copied with .contiguous()."""
    qkv = leaf(data((16, 192), 1))
    w, dy = leaf(data((64,), 2)), torch.from_numpy(data((16, 64), 3))
    k = qkv[:, 64:128]
    assert nkt._rownorm._rows(k, 1, 64) == (k, 192)  # its row stride: the buffer's
    y = nkt.rms_norm(k, 64, w)
    copied = leaf(data((16, 192), 1)[:, 64:128].copy())
    want = nkt.rms_norm(copied, 64, w)
    assert torch.equal(y, want)
    y.backward(dy)
    want.backward(dy)
    assert torch.equal(qkv.grad[:, 64:128], copied.grad)
    assert not qkv.grad[:, :64].any() and not qkv.grad[:, 128:].any()
    base = leaf(data((64, 10), 4))
    copy, ld = nkt._rownorm._rows(base.T, 1, 64)
    assert copy.is_contiguous() and ld == 64
    copied = leaf(data((64, 10), 4).T.copy())
    y, want = nkt.layer_norm(base.T, 64), nkt.layer_norm(copied, 64)
    assert torch.equal(y, want)
    y.backward(dy[:10])
    want.backward(dy[:10])
    assert torch.equal(base.grad.T, copied.grad)
    every_other = torch.from_numpy(data((128,), 5))[::2]  # weight: copied too
    assert torch.equal(nkt.rms_norm(k, 64, every_other),
                       nkt.rms_norm(k, 64, every_other.contiguous()))


def test_row_strided_gradients_are_read_where_they_lie():
    """dy and dsum that are row-strided views (columns of a wider gradient) are read
    in place, giving the gradients of their contiguous copies."""
    wide = torch.from_numpy(data((2, 16, 160), 1))
    dy, dsum = wide[0, :, 32:96], wide[1, :, 16:80]
    assert nkt._rownorm._rows(dy, 1, 64) == (dy, 160)
    grads = []
    for gradients in ((dy, dsum), (dy.contiguous(), dsum.contiguous())):
        x, residual = leaf(data((16, 64), 2)), leaf(data((16, 64), 3))
        w = leaf(data((64,), 4))
        torch.autograd.backward(nkt.add_layer_norm(x, residual, 64, w), gradients)
        grads.append((x.grad, w.grad))
    assert all(torch.equal(a, b) for a, b in zip(*grads))


def test_negated_views_are_read_as_their_values():
    """A tensor of negative bit (torch._neg_view, the imaginary part of a conjugate)
    holds -t in memory: x, weight, bias and dy are read as the values PyTorch sees."""
    a, dy = leaf(data((6, 32), 1)), torch.from_numpy(data((6, 32), 2))
    w = torch._neg_view(torch.from_numpy(data((32,), 3)))
    b = torch.complex(torch.from_numpy(data((32,), 4)),
                      torch.from_numpy(data((32,), 5))).conj().imag
    x = torch._neg_view(a)
    assert all(t.is_neg() for t in (x, w, b)) and x.is_contiguous() and w.is_contiguous()
    y = nkt.layer_norm(x, 32, w, b)
    y.backward(torch._neg_view(dy))
    values = leaf(-data((6, 32), 1))
    want = nkt.layer_norm(values, 32, w.resolve_neg(), b.resolve_neg())
    want.backward(-dy)
    assert torch.equal(y, want) and torch.equal(a.grad, -values.grad)


@pytest.mark.parametrize("name", NAMES)
def test_gradients_of_some_inputs_only(name):
    """Each input's gradient is the same whichever of the others are wanted (the
    library skips the sums of the parameters that are not)."""
    fused = name.startswith("add")
    arrays = {"x": data((6, 40), 1), "residual": data((6, 40), 2) if fused else None,
              "weight": data((40,), 3), "bias": data((40,), 4)}
    if "layer" not in name:
        del arrays["bias"]
    dy = torch.from_numpy(data((6, 40), 5))

    def gradients(wanted):
        t = {k: None if a is None else torch.from_numpy(a).requires_grad_(k in wanted)
             for k, a in arrays.items()}
        out = call(name, t["x"], t["residual"], t["weight"], t.get("bias"), 1e-5)
        (out[0] if fused else out).backward(dy)
        return {k: t[k].grad for k in wanted}

    every = gradients({k for k, a in arrays.items() if a is not None})
    for k, grad in every.items():
        assert torch.equal(gradients({k})[k], grad)


def test_no_double_backward():
    """A gradient taken with create_graph=True cannot be differentiated again."""
    x = leaf(data((4, 16), 1))
    y = nkt.layer_norm(x, 16)
    gx, = torch.autograd.grad((y * y).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice a function that was "
                       "marked with @once_differentiable"):
        gx.sum().backward()


def test_empty_batch_as_pytorch():
    x, w, b = leaf(np.empty((0, 8), np.float32)), leaf(data((8,), 1)), leaf(data((8,), 2))
    y = nkt.layer_norm(x, 8, w, b)
    y.sum().backward()
    assert y.shape == (0, 8) and x.grad.shape == (0, 8)
    assert torch.equal(w.grad, torch.zeros(8)) and torch.equal(b.grad, torch.zeros(8))


def test_other_tensors_are_refused_or_given_to_pytorch():
    x64 = leaf(data((3, 8), 1), F64)
    with pytest.raises(TypeError, match=r"normkernels.torch.layer_norm: x is a "
                       r"torch.float64 tensor on cpu .*float32, bfloat16 and float16 CPU "
                       r"tensors only "
                       r"\(fallback=True gives such tensors to PyTorch's own op\)"):
        nkt.layer_norm(x64, 8)
    with pytest.raises(TypeError, match="x is a torch.float32 tensor on meta"):
        nkt.rms_norm(torch.empty(3, 8, device="meta"), 8)
    x = leaf(data((3, 8), 2))
    with pytest.raises(TypeError, match="add_rms_norm: residual is a torch.float16"):
        nkt.add_rms_norm(x, x.detach().half(), 8)
    with pytest.raises(TypeError, match="weight is a torch.float64"):
        nkt.layer_norm(x, 8, torch.ones(8, dtype=F64))
    with pytest.raises(TypeError, match="x must be a torch.Tensor, not ndarray"):
        nkt.layer_norm(data((3, 8), 3), 8, fallback=True)
    with pytest.raises(TypeError, match="RMSNorm: weight is a torch.float64"):
        nkt.RMSNorm(8, dtype=F64)
    with pytest.raises(TypeError, match="LayerNorm: weight is a torch.float32 tensor "
                       "on meta"):
        nkt.LayerNorm(8, device="meta")
    with pytest.raises(TypeError, match="x is a torch.float64"):
        nkt.LayerNorm(8)(x64)
    # fallback=True: PyTorch's own ops, gradients included.
    w64 = leaf(data((8,), 4), F64)
    y = nkt.layer_norm(x64, 8, w64, fallback=True)
    want = torch.nn.functional.layer_norm(x64, (8,), w64)
    assert torch.equal(y, want)
    g = torch.autograd.grad(y.sum(), (x64, w64))
    assert all(torch.equal(a, b) for a, b in zip(g, torch.autograd.grad(want.sum(),
                                                                        (x64, w64))))
    y, s = nkt.add_rms_norm(x64, x64, 8, w64, fallback=True)
    assert torch.equal(s, 2 * x64) and torch.equal(y, llama_rms_norm(s, w64, 1e-6))
    module = nkt.LayerNorm(8, dtype=F64, fallback=True)
    assert torch.equal(module(x64), torch.nn.LayerNorm(8, dtype=F64)(x64))
    assert torch.equal(nkt.RMSNorm(8, fallback=True).double()(x64),
                       llama_rms_norm(x64, torch.ones(8, dtype=F64), 1e-6))
    y = nkt.RMSNorm(8, fallback=True)(x)  # float32: the library's still
    np.testing.assert_array_equal(y.detach().numpy(),
                                  nk.rms_norm(x.detach().numpy(), eps=1e-6))


def test_sparse_gradients_are_refused():
    x = leaf(data((3, 8), 1))
    y = SparseGradient.apply(nkt.layer_norm(x, 8))
    with pytest.raises(TypeError, match="the gradient dy is a torch.sparse_coo tensor"):
        y.backward(torch.ones(3, 8))


def test_wrong_shapes_name_the_argument():
    x = torch.from_numpy(data((3, 8), 1))
    with pytest.raises(ValueError, match=r"residual has shape \(3, 7\); expected x's "
                       r"\(3, 8\)"):
        nkt.add_layer_norm(x, x[:, :7], 8)
    with pytest.raises(ValueError, match=r"weight has shape \(7,\); expected "
                       r"normalized_shape \(8,\)"):
        nkt.layer_norm(x, 8, torch.ones(7))
    with pytest.raises(ValueError, match=r"bias has shape \(8, 1\)"):
        nkt.layer_norm(x, [8], None, torch.zeros(8, 1))
    with pytest.raises(ValueError, match=r"normalized_shape \(4,\) does not match x's"):
        nkt.rms_norm(x, 4)
    with pytest.raises(nk.NormKernelsError, match="eps"):
        nkt.layer_norm(x, 8, eps=-1.0)
    for add in (nkt.add_layer_norm, nkt.add_rms_norm):  # not y alone
        for fallback in (False, True):
            with pytest.raises(TypeError, match="residual must be a torch.Tensor, not "
                               "NoneType"):
                add(x, None, 8, fallback=fallback)
