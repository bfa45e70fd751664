# SPDX-License-Identifier: Apache-2.0
"""normkernels.torch's GroupNorm and InstanceNorm: y and the gradients of input, weight
and bias against torch.nn's in float64 within bounds derived from design.md's, in both
memory formats; InstanceNorm's running statistics; the modules as PyTorch's
(state_dict included); channels_last read where it lies; what is refused or handed to
PyTorch (fallback=True)."""
import contextlib

import numpy as np
import pytest

import normkernels as nk
from reference import U, bn_running_reference, data

torch = pytest.importorskip("torch")
import normkernels.torch as nkt  # noqa: E402 (needs torch)
from sparse_gradient import SparseGradient  # noqa: E402
from torch_steps import (conv_losses, eval_is_pytorchs, gn_bounds,  # noqa: E402
                         in_layout, same_gradients_in_any_layout, step, within)

F64 = torch.float64
EPS = 1e-5
# (shape, groups, channels_last): one group, some, one per channel; an (N, C, L)
# channels_last is a view of (N, L, C).
CASES = [((4, 6, 9), 1, False), ((4, 6, 9), 3, True), ((3, 8, 5, 7), 4, False),
         ((3, 8, 5, 7), 4, True), ((3, 8, 5, 7), 8, True), ((2, 6, 3, 5, 2), 2, False),
         ((2, 6, 3, 5, 2), 6, True), ((5, 12), 3, False)]
INSTANCE = [("InstanceNorm1d", (4, 6, 9), False), ("InstanceNorm1d", (4, 6, 9), True),
            ("InstanceNorm2d", (3, 5, 4, 7), False),
            ("InstanceNorm2d", (3, 5, 4, 7), True),
            ("InstanceNorm3d", (2, 4, 3, 5, 2), True)]


def pair(ours, theirs, w, b):
    """The library's module and torch.nn's (float64) with the same parameters."""
    with torch.no_grad():
        for module in (ours, theirs):
            module.weight.copy_(torch.from_numpy(w))
            module.bias.copy_(torch.from_numpy(b))
    return ours, theirs


def bounds(x, dy, groups, w, b, channels_last):
    """gn_bounds: the bound on y, and those on the gradients of input, weight and
    bias."""
    y_bound, *grad_bounds = gn_bounds(x, dy, groups, w, b, channels_last, EPS)
    return y_bound, grad_bounds


@pytest.mark.parametrize("shape, groups, channels_last", CASES)
def test_group_norm_is_pytorchs_within_the_bound(shape, groups, channels_last):
    """GroupNorm against torch.nn.GroupNorm in float64 from the same float32 data and
    parameters: y and the gradients of input, weight and bias, in x's memory
    format."""
    c = shape[1]
    w, b = data((c,), 1), data((c,), 2)
    ours, theirs = pair(nkt.GroupNorm(groups, c), torch.nn.GroupNorm(groups, c,
                                                                     dtype=F64), w, b)
    x, dy = data(shape, 3, offset=2.0), data(shape, 4)
    got = step(ours, in_layout(x, channels_last), in_layout(dy, channels_last))
    want = step(theirs, torch.from_numpy(x).double(), torch.from_numpy(dy).double())
    like = in_layout(x, channels_last).stride()
    assert got[0].stride() == got[1].stride() == like  # in x's memory format
    y_bound, grad_bounds = bounds(x, dy, groups, w, b, channels_last)
    assert within(got[0], want[0], y_bound)
    for g, theirs_g, bound in zip(got[1:], want[1:], grad_bounds):
        assert within(g, theirs_g, bound)


def test_group_norm_function_is_the_modules():
    x = torch.from_numpy(data((3, 8, 5), 5))
    w, b = torch.from_numpy(data((8,), 6)), torch.from_numpy(data((8,), 7))
    module = pair(nkt.GroupNorm(2, 8, eps=1e-3), torch.nn.GroupNorm(2, 8, dtype=F64),
                  w.numpy(), b.numpy())[0]
    assert torch.equal(nkt.group_norm(x, 2, w, b, 1e-3), module(x))
    ones = torch.ones(8)
    assert torch.equal(nkt.group_norm(x, 2), nkt.group_norm(x, 2, ones, 0 * ones))


@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("name, shape, channels_last", INSTANCE)
def test_instance_norm_is_pytorchs_within_the_bound(name, shape, channels_last, affine):
    """InstanceNorm (track_running_stats=False, the default) against torch.nn's in
    float64, in training and eval mode: GroupNorm's bounds with a group per channel."""
    c = shape[1]
    ours = getattr(nkt, name)(c, affine=affine)
    theirs = getattr(torch.nn, name)(c, affine=affine, dtype=F64)
    w, b = data((c,), 8), data((c,), 9)
    if affine:
        pair(ours, theirs, w, b)
    x, dy = data(shape, 10, offset=-1.0), data(shape, 11)
    y_bound, grad_bounds = bounds(x, dy, c, w if affine else np.ones(c, np.float32),
                                  b if affine else np.zeros(c, np.float32), channels_last)
    for training in (True, False):
        ours.train(training), theirs.train(training)
        got = step(ours, in_layout(x, channels_last), in_layout(dy, channels_last))
        want = step(theirs, torch.from_numpy(x).double(), torch.from_numpy(dy).double())
        assert within(got[0], want[0], y_bound)
        for g, theirs_g, bound in zip(got[1:], want[1:], grad_bounds):
            assert g is theirs_g is None or within(g, theirs_g, bound)


def instance_running_reference(x, running, momentum):
    """InstanceNorm's running statistics after a training batch x (N, C, ...), as
    PyTorch computes them: BatchNorm's of the N * C instances as channels of one sample
    (bn_running_reference, running repeated over the samples), averaged over the
    samples; the bounds too, plus the average's and update's rounding."""
    n, c = x.shape[:2]
    per_instance = bn_running_reference(x.reshape(1, n * c, -1),
                                        [np.tile(r, n) for r in running], momentum)
    mean, var, mean_bound, var_bound = (v.reshape(n, c).mean(0) for v in per_instance)
    return (mean, var, mean_bound + (n + 3) * U * np.abs(mean),
            var_bound + (n + 3) * U * np.abs(var))


@pytest.mark.parametrize("name, shape, channels_last", INSTANCE)
def test_instance_norm_running_statistics_are_pytorchs(name, shape, channels_last):
    """track_running_stats=True: two training steps update the running statistics as
    torch.nn's (the batch's average of the instances' statistics) within design.md's
    bound carried through; eval mode then normalizes with them (BatchNorm's
    inference), y and gradients within the bounds of eval_is_pytorchs."""
    c = shape[1]
    ours = getattr(nkt, name)(c, affine=True, track_running_stats=True, momentum=0.3)
    theirs = getattr(torch.nn, name)(c, affine=True, track_running_stats=True,
                                     momentum=0.3, dtype=F64)
    w, b = data((c,), 12), data((c,), 13)
    pair(ours, theirs, w, b)
    running = np.zeros(c), np.ones(c), np.zeros(c), np.zeros(c)
    for k in range(2):
        x, dy = data(shape, 14 + k, offset=1.0 + k), data(shape, 16 + k)
        got = step(ours, in_layout(x, channels_last), in_layout(dy, channels_last))
        want = step(theirs, torch.from_numpy(x).double(), torch.from_numpy(dy).double())
        assert within(got[0], want[0], bounds(x, dy, c, w, b, channels_last)[0])
        running = instance_running_reference(x, running, 0.3)
        assert within(ours.running_mean, theirs.running_mean, running[2])
        assert within(ours.running_var, theirs.running_var, running[3])
    assert int(ours.num_batches_tracked) == int(theirs.num_batches_tracked) == 0
    ours.eval(), theirs.eval()
    for name in ("running_mean", "running_var"):  # the same, from here on
        getattr(theirs, name).copy_(getattr(ours, name))
    assert eval_is_pytorchs(ours, theirs, data(shape, 18), data(shape, 19), w, b,
                            channels_last)


def test_instance_norm_function_with_running_statistics():
    """F.instance_norm's arguments: running statistics updated in place, one of them
    alone too; use_input_stats=False normalizes with them; an empty input leaves them
    as they are (PyTorch's average over no sample makes them NaN)."""
    x = torch.from_numpy(data((3, 4, 6), 20, offset=1.0))
    rm, rv = torch.zeros(4), torch.ones(4)
    trm, trv = rm.double(), rv.double()
    y = nkt.instance_norm(x, rm, rv, momentum=0.2)
    torch.nn.functional.instance_norm(x.double(), trm, trv, momentum=0.2)
    np.testing.assert_allclose(rm, trm, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(rv, trv, rtol=1e-6)
    assert torch.equal(y, nkt.instance_norm(x))
    alone = torch.ones(4)
    nkt.instance_norm(x, None, alone, momentum=0.2)
    assert torch.equal(alone, rv)
    y = nkt.instance_norm(x, rm, rv, use_input_stats=False)
    assert torch.equal(y, nkt.batch_norm(x, rm, rv))
    before = rm.clone(), rv.clone()
    for shape in ((0, 4, 6), (3, 4, 0)):
        assert nkt.instance_norm(torch.empty(shape), rm, rv).shape == shape
        assert torch.equal(rm, before[0]) and torch.equal(rv, before[1])


def test_training_gives_pytorchs_losses():
    """Conv-GroupNorm-ReLU-Linear from the same initial weights, channels_last: the same
    losses, within 1e-5 relative, for five SGD steps."""
    _, _, theirs, ours = conv_losses(torch.nn.GroupNorm(4, 8), nkt.GroupNorm(4, 8),
                                     torch.channels_last)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)
    assert ours[-1] < ours[0]


def test_modules_are_pytorchs():
    """The same arguments, parameters, buffers, state_dict and repr as torch.nn's;
    state_dicts load both ways."""
    theirs = torch.nn.GroupNorm(3, 6, eps=1e-3)
    theirs.weight.data.normal_()
    ours = nkt.GroupNorm(3, 6, 1e-3, True, device="cpu", dtype=torch.float32)
    assert isinstance(ours, torch.nn.GroupNorm) and repr(ours) == repr(theirs)
    ours.load_state_dict(theirs.state_dict())
    assert torch.equal(ours.weight, theirs.weight)
    torch.nn.GroupNorm(3, 6).load_state_dict(ours.state_dict())
    plain = nkt.GroupNorm(2, 4, affine=False)
    assert plain.weight is None and plain.state_dict().keys() == set()
    assert "fallback=True" in repr(nkt.GroupNorm(2, 4, fallback=True))
    for name in ("InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"):
        for kw in ({}, {"affine": True}, {"track_running_stats": True, "momentum": 0.2}):
            ours, theirs = getattr(nkt, name)(4, **kw), getattr(torch.nn, name)(4, **kw)
            assert isinstance(ours, getattr(torch.nn, name))
            assert ours.state_dict().keys() == theirs.state_dict().keys()
            assert repr(ours) == repr(theirs)
            ours.load_state_dict(theirs.state_dict())


@pytest.mark.parametrize("shape, groups, channels_last", CASES[1:5])
def test_forwards_without_gradients_are_the_same(shape, groups, channels_last):
    """Where nothing needs a gradient (torch.no_grad, torch.inference_mode, or no input
    requiring one), GroupNorm and InstanceNorm run the library's forward alone: y bit
    for bit that of the forward that saves for a backward, in x's layout, requiring no
    gradient."""
    x = in_layout(data(shape, 1, offset=1.5), channels_last)
    w, b = (torch.from_numpy(data((shape[1],), k)) for k in (2, 3))
    for fn, args in ((nkt.group_norm, (groups, w, b)),
                     (nkt.instance_norm, (None, None, w, b))):
        want = fn(x.clone().requires_grad_(), *args)
        assert want.requires_grad
        for context in (torch.no_grad, torch.inference_mode, contextlib.nullcontext):
            with context():
                got = fn(x, *args)
            assert not got.requires_grad and got.stride() == want.stride()
            assert torch.equal(got, want.detach())


def test_unbatched_instance_norm_input():
    """(C, L), (C, H, W), (C, D, H, W): one sample, as torch.nn's."""
    for name, shape in (("InstanceNorm1d", (4, 7)), ("InstanceNorm2d", (4, 3, 5)),
                        ("InstanceNorm3d", (4, 2, 3, 5))):
        x = torch.from_numpy(data(shape, 21))
        y = getattr(nkt, name)(4)(x)
        assert y.shape == x.shape
        assert torch.equal(y, getattr(nkt, name)(4)(x[None])[0])
        np.testing.assert_allclose(y, getattr(torch.nn, name)(4)(x), atol=1e-5)


def test_channels_last_is_read_where_it_lies():
    """channels_last, channels_last_3d and an (N, C, L) view of (N, L, C) reach the
    library as they lie: y has the bits of the binding's on the (N, *spatial, C) array
    of the same memory, and its memory format."""
    for shape in ((4, 6, 9), (4, 6, 5, 7), (2, 6, 3, 5, 2)):
        x = in_layout(data(shape, 22), True)
        w, b = data((6,), 23), data((6,), 24)
        y = nkt.group_norm(x, 3, torch.from_numpy(w), torch.from_numpy(b))
        nhwc = x.movedim(1, -1)
        assert nhwc.is_contiguous() and y.movedim(1, -1).is_contiguous()
        want = nk.group_norm(nhwc.numpy(), 3, w, b, channels_last=True)
        np.testing.assert_array_equal(y.movedim(1, -1).numpy(), want)


def test_gradient_in_another_layout_is_that_of_its_copy():
    """dy contiguous for a channels_last y, or expanded (y.sum()): the gradients of dy
    laid out as x."""
    assert same_gradients_in_any_layout(nkt.GroupNorm(3, 6), (4, 6, 5, 7))


def test_gradients_of_some_inputs_only():
    """Each gradient is the same whichever of the others are wanted."""
    x, dy = (torch.from_numpy(data((4, 6, 5), seed)) for seed in (27, 28))
    gn = nkt.GroupNorm(2, 6)
    every = step(gn, x, dy)[1:]
    for k, p in enumerate((None, gn.weight, gn.bias)):
        for q in (gn.weight, gn.bias):
            q.requires_grad_(p is None or q is p)
        gn.zero_grad(set_to_none=True)
        t = x.clone().requires_grad_(p is None)
        gn(t).backward(dy)
        assert torch.equal((t.grad, gn.weight.grad, gn.bias.grad)[k], every[k])


@pytest.mark.parametrize("shape", [(0, 4, 3), (2, 4, 0), (2, 0, 3)])
def test_empty_input_as_pytorch(shape):
    """Empty y and dx, weight and bias gradients of 0 (PyTorch's weight gradient of
    (2, 4, 0) is NaN: 0 times its rstd of no value); InstanceNorm of no channel too."""
    ours = nkt.GroupNorm(2 if shape[1] else 1, shape[1])
    theirs = torch.nn.GroupNorm(2 if shape[1] else 1, shape[1])
    x = torch.empty(shape)
    got, want = step(ours, x, x), step(theirs, x, x)
    for g, w in zip(got, want):
        assert g.shape == w.shape
    assert not got[2].any() and not got[3].any()
    assert nkt.instance_norm(x[:, :0]).shape == x[:, :0].shape


def test_no_double_backward():
    x = torch.from_numpy(data((2, 4, 6), 29)).requires_grad_()
    y = nkt.GroupNorm(2, 4)(x)
    gx, = torch.autograd.grad((y * y).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="marked with @once_differentiable"):
        gx.sum().backward()


def test_other_tensors_are_refused_or_given_to_pytorch():
    x64 = torch.from_numpy(data((4, 6, 5), 30)).double()
    with pytest.raises(TypeError, match=r"normkernels.torch.group_norm: input is a "
                       r"torch.float64 tensor on cpu .*\(fallback=True gives"):
        nkt.group_norm(x64, 2)
    with pytest.raises(TypeError, match="normkernels.torch.instance_norm: running_var is "
                       "a torch.float64"):
        nkt.instance_norm(x64.float(), torch.zeros(6), torch.ones(6, dtype=F64))
    with pytest.raises(TypeError, match="GroupNorm: weight is a torch.float64"):
        nkt.GroupNorm(2, 6, dtype=F64)
    with pytest.raises(TypeError, match="InstanceNorm1d: running_mean is a "
                       "torch.float64"):
        nkt.InstanceNorm1d(6, track_running_stats=True, dtype=F64)
    with pytest.raises(TypeError, match="input is a torch.float64"):
        nkt.InstanceNorm1d(6)(x64)
    # fallback=True: PyTorch's own op, gradients and running statistics included.
    dy = torch.from_numpy(data((4, 6, 5), 31)).double()
    for ours, theirs in ((nkt.GroupNorm(2, 6, dtype=F64, fallback=True),
                          torch.nn.GroupNorm(2, 6, dtype=F64)),
                         (nkt.InstanceNorm1d(6, affine=True, track_running_stats=True,
                                             dtype=F64, fallback=True),
                          torch.nn.InstanceNorm1d(6, affine=True,
                                                  track_running_stats=True, dtype=F64))):
        for got, want in zip(step(ours, x64, dy), step(theirs, x64, dy)):
            assert torch.equal(got, want)
    assert torch.equal(ours.running_var, theirs.running_var)
    assert torch.equal(nkt.group_norm(x64, 3, fallback=True),
                       torch.nn.functional.group_norm(x64, 3))
    assert torch.equal(nkt.instance_norm(x64, fallback=True),
                       torch.nn.functional.instance_norm(x64))


def test_wrong_arguments_raise_clear_errors():
    x = torch.from_numpy(data((4, 6, 5), 32))
    with pytest.raises(ValueError, match=r"Expected number of channels in input to be "
                       r"divisible by num_groups, but got input of shape \[4, 6, 5\] and "
                       "num_groups=4"):
        nkt.group_norm(x, 4)
    with pytest.raises(ValueError, match="num_groups must be at least 1, not 0"):
        nkt.group_norm(x, 0)
    with pytest.raises(TypeError, match="num_groups must be an integer, not float"):
        nkt.group_norm(x, 2.0)
    with pytest.raises(ValueError, match=r"Expected weight to be a vector of size equal "
                       r"to the number of channels in input, but got weight of shape "
                       r"\[4\] and input of shape \[4, 6, 5\]"):
        nkt.group_norm(x, 2, torch.ones(4))
    with pytest.raises(ValueError, match=r"Expected bias to be a vector"):
        nkt.group_norm(x, 2, None, torch.ones(4))
    with pytest.raises(ValueError, match="input must have at least 2 dimensions"):
        nkt.group_norm(x[0, 0], 1)
    with pytest.raises(ValueError, match=r"expected 2D or 3D input \(got 4D input\)"):
        nkt.InstanceNorm1d(6)(x[None])
    with pytest.raises(ValueError, match=r"Expected more than 1 spatial element when "
                       r"training, got input size torch.Size\(\[4, 6, 1\]\)"):
        nkt.InstanceNorm1d(6)(x[..., :1])
    with pytest.raises(ValueError, match="Expected running_mean and running_var to be "
                       "defined when use_input_stats is false"):
        nkt.instance_norm(x, torch.zeros(6), None, use_input_stats=False)
    with pytest.raises(ValueError, match="running_var should contain 6 elements not 4"):
        nkt.instance_norm(x, None, torch.ones(4))
    with pytest.raises(ValueError, match="weight should contain 6 elements not 4"):
        nkt.instance_norm(x, torch.zeros(6), torch.ones(6), torch.ones(4),
                          use_input_stats=False)
    with pytest.raises(TypeError, match="momentum must be a real number, not NoneType"):
        nkt.instance_norm(x, torch.zeros(6), torch.ones(6), momentum=None)
    with pytest.raises(nk.NormKernelsError, match="nk_groupnorm_forward_f32.*eps"):
        nkt.group_norm(x, 2, eps=-1.0)
    y = SparseGradient.apply(nkt.GroupNorm(2, 6)(x.requires_grad_()))
    with pytest.raises(TypeError, match="the gradient dy is a torch.sparse_coo tensor"):
        y.backward(torch.ones(4, 6, 5))
