# SPDX-License-Identifier: Apache-2.0
"""normkernels.torch's BatchNorm: y, the gradients and the running statistics against
torch.nn's BatchNorm in float64 within bounds derived from design.md's, in training and
eval modes and both memory formats; the modules as PyTorch's; channels_last read where
it lies; what is refused or handed to PyTorch (fallback=True)."""
import numpy as np
import pytest

import normkernels as nk
from reference import bn_running_reference, data

torch = pytest.importorskip("torch")
import normkernels.torch as nkt  # noqa: E402 (needs torch)
from sparse_gradient import SparseGradient  # noqa: E402
from torch_steps import (bn_bounds, conv_losses, eval_is_pytorchs,  # noqa: E402
                         in_layout, same_gradients_in_any_layout, step, within)

F64 = torch.float64
EPS = 1e-5
# (module, shape, channels_last): an (N, C, L) channels_last is a view of (N, L, C).
CASES = [("BatchNorm1d", (16, 5), False), ("BatchNorm1d", (4, 6, 9), False),
         ("BatchNorm1d", (4, 6, 9), True), ("BatchNorm2d", (4, 3, 5, 7), False),
         ("BatchNorm2d", (4, 3, 5, 7), True), ("BatchNorm3d", (2, 4, 3, 5, 2), False),
         ("BatchNorm3d", (2, 4, 3, 5, 2), True)]


def pair(name, c, w, b, **kw):
    """The library's module and torch.nn's in float64, with the same parameters."""
    ours = getattr(nkt, name)(c, **kw)
    theirs = getattr(torch.nn, name)(c, dtype=F64, **kw)
    with torch.no_grad():
        for module in (ours, theirs):
            module.weight.copy_(torch.from_numpy(w))
            module.bias.copy_(torch.from_numpy(b))
    return ours, theirs


@pytest.mark.parametrize("momentum", [0.1, None])
@pytest.mark.parametrize("name, shape, channels_last", CASES)
def test_training_is_pytorchs_within_the_bound(name, shape, channels_last, momentum):
    """Two training steps against torch.nn's module in float64 from the same float32
    data and parameters: y, the gradients of input, weight and bias, the running
    statistics and num_batches_tracked. y within bn_reference's bound; the gradients
    within bn_gradient_bounds from the statistics the forward saved; the running
    statistics within design.md's bound on the batch's, carried through the updates
    (momentum=None: 1 / num_batches_tracked)."""
    c = shape[1]
    w, b = data((c,), 1), data((c,), 2)
    ours, theirs = pair(name, c, w, b, momentum=momentum)
    running = np.zeros(c), np.ones(c), np.zeros(c), np.zeros(c)
    for k in range(2):
        x, dy = data(shape, 10 + k, offset=2.0 + k), data(shape, 20 + k)
        got = step(ours, in_layout(x, channels_last), in_layout(dy, channels_last))
        want = step(theirs, torch.from_numpy(x).double(), torch.from_numpy(dy).double())
        like = in_layout(x, channels_last).stride()
        assert got[0].stride() == got[1].stride() == like  # in x's memory format
        for g, theirs_g, bound in zip(got, want, bn_bounds(x, dy, w, b, EPS)):
            assert within(g, theirs_g, bound)
        running = bn_running_reference(x, running, 1 / (k + 1) if momentum is None
                                       else momentum, EPS)
        assert within(ours.running_mean, theirs.running_mean, running[2])
        assert within(ours.running_var, theirs.running_var, running[3])
        assert int(ours.num_batches_tracked) == int(theirs.num_batches_tracked) == k + 1


@pytest.mark.parametrize("name, shape, channels_last", CASES)
def test_eval_is_pytorchs_within_the_bound(name, shape, channels_last):
    """Eval mode against torch.nn's in float64 with the same running statistics: y and
    the gradients within the bounds of eval_is_pytorchs."""
    c = shape[1]
    w, b = data((c,), 3), data((c,), 4)
    rm, rv = data((c,), 5), np.abs(data((c,), 6)) + 0.5
    ours, theirs = pair(name, c, w, b)
    for module in (ours, theirs):
        module.running_mean.copy_(torch.from_numpy(rm))
        module.running_var.copy_(torch.from_numpy(rv))
        module.eval()
    x, dy = data(shape, 7, offset=1.0), data(shape, 8)
    assert eval_is_pytorchs(ours, theirs, x, dy, w, b, channels_last)
    assert int(ours.num_batches_tracked) == 0


@pytest.mark.parametrize("memory_format", [torch.contiguous_format,
                                           torch.channels_last])
def test_training_gives_pytorchs_losses(memory_format):
    """Conv-BatchNorm-ReLU-Linear from the same initial weights, in either memory
    format: the same losses, within 1e-5 relative, for five SGD steps, and the same
    running statistics."""
    model, mine, *losses = conv_losses(torch.nn.BatchNorm2d(8), nkt.BatchNorm2d(8),
                                       memory_format)
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
    assert losses[1][-1] < losses[1][0]
    for name in ("running_mean", "running_var"):
        np.testing.assert_allclose(getattr(mine[1], name), getattr(model[1], name),
                                   rtol=1e-5, atol=1e-6)


def test_modules_are_pytorchs():
    """The same arguments, parameters, buffers and state_dict as torch.nn's; affine=False
    and track_running_stats=False as there."""
    for name in ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm"):
        ours, theirs = getattr(nkt, name)(4), getattr(torch.nn, name)(4)
        assert isinstance(ours, torch.nn.modules.batchnorm._BatchNorm)
        assert ours.state_dict().keys() == theirs.state_dict().keys()
        assert repr(ours) == repr(theirs)
        # DistributedDataParallel refuses torch.nn.SyncBatchNorm in a CPU model.
        assert isinstance(ours, getattr(torch.nn, name)) == (name != "SyncBatchNorm")
    theirs = torch.nn.BatchNorm2d(3, eps=1e-3, momentum=0.3)
    theirs.weight.data.normal_()
    theirs(torch.randn(4, 3, 2, 2))  # running statistics and num_batches_tracked of 1
    ours = nkt.BatchNorm2d(3, 1e-3, 0.3, device="cpu", dtype=torch.float32)
    ours.load_state_dict(theirs.state_dict())
    assert int(ours.num_batches_tracked) == 1
    assert repr(ours) == repr(theirs)
    assert "fallback=True" in repr(nkt.BatchNorm2d(3, fallback=True))
    x = torch.from_numpy(data((4, 3, 5, 5), 1))
    # affine=False: weight and bias None, as gamma of ones and beta of zeros.
    plain = nkt.BatchNorm2d(3, affine=False)
    assert plain.weight is None and plain.state_dict().keys() == \
        torch.nn.BatchNorm2d(3, affine=False).state_dict().keys()
    assert torch.equal(plain(x), nkt.BatchNorm2d(3)(x))
    # track_running_stats=False: no buffers; eval mode normalizes with the batch's.
    batch = nkt.BatchNorm2d(3, track_running_stats=False)
    assert batch.running_mean is None and batch.state_dict().keys() == {"weight", "bias"}
    y = batch(x)
    assert torch.equal(batch.eval()(x), y)


def test_channels_last_is_read_where_it_lies():
    """channels_last (4-D), channels_last_3d (5-D) and an (N, C, L) view of (N, L, C)
    reach the library as they lie, read as NHWC: y has the bits of the binding's on
    the (N, *spatial, C) array of the same memory. A transposed view is copied."""
    for shape in ((4, 6, 9), (4, 3, 5, 7), (2, 4, 3, 5, 2)):
        x = in_layout(data(shape, 1), True)
        assert nkt._tensors.channel_layout(x) == (x, nk._NHWC)
        w, b = data((shape[1],), 2), data((shape[1],), 3)
        y = nkt.batch_norm(x, None, None, torch.from_numpy(w), torch.from_numpy(b), True)
        nhwc = x.movedim(1, -1)
        assert nhwc.is_contiguous() and y.movedim(1, -1).is_contiguous()
        want = nk.batch_norm(nhwc.numpy(), None, None, w, b, True, channels_last=True)
        np.testing.assert_array_equal(y.movedim(1, -1).numpy(), want)
    x = torch.from_numpy(data((4, 3, 5, 7), 4))
    copied, layout = nkt._tensors.channel_layout(x.transpose(2, 3))
    assert layout == nk._NCHW and copied.is_contiguous()


def test_gradient_in_another_layout_is_that_of_its_copy():
    """dy contiguous for a channels_last y, or expanded (y.sum()): the gradients of dy
    laid out as x."""
    assert same_gradients_in_any_layout(nkt.BatchNorm2d(3), (4, 3, 5, 7))


def test_gradients_of_some_inputs_only():
    """Each gradient is the same whichever of the others are wanted, in training and in
    eval mode (the library's sums alone when dx is not wanted)."""
    x, dy = (torch.from_numpy(data((4, 3, 5, 7), seed)) for seed in (1, 2))
    for training in (True, False):
        bn = nkt.BatchNorm2d(3).train(training)
        bn.running_var.fill_(2.0)
        every = step(bn, x, dy)[1:]
        for k, p in enumerate((None, bn.weight, bn.bias)):
            flags = [p is None or q is p for q in (bn.weight, bn.bias)]
            bn.weight.requires_grad_(flags[0])
            bn.bias.requires_grad_(flags[1])
            bn.zero_grad(set_to_none=True)
            t = x.clone().requires_grad_(p is None)
            bn(t).backward(dy)
            assert torch.equal((t.grad, bn.weight.grad, bn.bias.grad)[k], every[k])
        bn.requires_grad_(True)


def test_inference_without_gradients_and_with():
    """Under no_grad, eval mode calls the library without an autograd Function; y is
    the same either way."""
    bn = nkt.BatchNorm2d(3).eval()
    bn.running_mean.fill_(0.5)
    x = torch.from_numpy(data((2, 3, 4, 4), 1))
    with torch.no_grad():
        y = bn(x)
    assert y.grad_fn is None
    y_graph = bn(x)
    assert y_graph.grad_fn is not None and torch.equal(y, y_graph.detach())


def test_empty_batch_as_pytorch():
    """An empty batch: empty y and dx, weight and bias gradients of 0, running
    statistics unchanged, as PyTorch's module gives them."""
    ours, theirs = nkt.BatchNorm2d(3), torch.nn.BatchNorm2d(3)
    x, dy = torch.empty(0, 3, 4, 4), torch.empty(0, 3, 4, 4)
    for got, want in zip(step(ours, x, dy), step(theirs, x, dy)):
        assert torch.equal(got, want)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        assert torch.equal(getattr(ours, name), getattr(theirs, name))


def test_no_double_backward():
    x = in_layout(data((2, 3, 4, 4), 1), False).requires_grad_()
    y = nkt.BatchNorm2d(3)(x)
    gx, = torch.autograd.grad((y * y).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="marked with @once_differentiable"):
        gx.sum().backward()


def test_other_tensors_are_refused_or_given_to_pytorch():
    x64 = torch.from_numpy(data((4, 3, 2, 2), 1)).double()
    with pytest.raises(TypeError, match=r"normkernels.torch.batch_norm: input is a "
                       r"torch.float64 tensor on cpu .*\(fallback=True gives"):
        nkt.batch_norm(x64, None, None, training=True)
    with pytest.raises(TypeError, match="running_var is a torch.float64"):
        nkt.batch_norm(x64.float(), torch.zeros(3), torch.ones(3, dtype=F64))
    with pytest.raises(TypeError, match="BatchNorm2d: weight is a torch.float64"):
        nkt.BatchNorm2d(3, dtype=F64)
    with pytest.raises(TypeError, match="BatchNorm1d: running_mean is a torch.float64"):
        nkt.BatchNorm1d(3, affine=False, dtype=F64)
    with pytest.raises(TypeError, match="SyncBatchNorm: weight is a torch.float32 "
                       "tensor on meta"):
        nkt.SyncBatchNorm(3, device="meta")
    with pytest.raises(TypeError, match="input is a torch.float64"):
        nkt.BatchNorm2d(3, affine=False, track_running_stats=False)(x64)
    # fallback=True: PyTorch's own op, running statistics and gradients included.
    ours = nkt.BatchNorm2d(3, dtype=F64, fallback=True)
    theirs = torch.nn.BatchNorm2d(3, dtype=F64)
    dy = torch.from_numpy(data((4, 3, 2, 2), 2)).double()
    for got, want in zip(step(ours, x64, dy), step(theirs, x64, dy)):
        assert torch.equal(got, want)
    assert torch.equal(ours.running_var, theirs.running_var)
    with pytest.raises(ValueError, match="SyncBatchNorm expected input tensor to be on "
                       "GPU"):  # PyTorch's SyncBatchNorm, which takes CUDA tensors
        nkt.SyncBatchNorm(3, fallback=True).double()(x64)


def test_wrong_arguments_raise_clear_errors():
    x = torch.from_numpy(data((4, 3, 5), 1))
    with pytest.raises(ValueError, match=r"expected 4D input \(got 3D input\)"):
        nkt.BatchNorm2d(3)(x)
    with pytest.raises(ValueError, match=r"Expected more than 1 value per channel when "
                       r"training, got input size torch.Size\(\[1, 3, 1\]\)"):
        nkt.BatchNorm1d(3)(x[:1, :, :1])
    with pytest.raises(ValueError, match="running_mean should contain 3 elements not 4"):
        nkt.batch_norm(x, torch.zeros(4), torch.ones(3))
    with pytest.raises(ValueError, match="weight should contain 3 elements not 2"):
        nkt.batch_norm(x, None, None, torch.ones(2), training=True)
    with pytest.raises(ValueError, match="running_mean and running_var are required"):
        nkt.batch_norm(x, None, None)
    with pytest.raises(ValueError, match="running_var must be contiguous: the library"):
        nkt.batch_norm(x, torch.zeros(3), torch.ones(6)[::2], training=True)
    with pytest.raises(ValueError, match="input must have at least 2 dimensions"):
        nkt.batch_norm(x[0, 0], None, None, training=True)
    with pytest.raises(nk.NormKernelsError, match="eps"):
        nkt.batch_norm(x, None, None, training=True, eps=-1.0)
    with pytest.raises(nk.NormKernelsError, match="momentum"):
        nkt.batch_norm(x, torch.zeros(3), torch.ones(3), training=True, momentum=2.0)
    y = SparseGradient.apply(nkt.BatchNorm1d(3)(x.requires_grad_()))
    with pytest.raises(TypeError, match="the gradient dy is a torch.sparse_coo tensor"):
        y.backward(torch.ones(4, 3, 5))


def test_convert_sync_batchnorm():
    """A model's BatchNorm modules (PyTorch's and ours) become the library's
    SyncBatchNorm, sharing their parameters and buffers, as PyTorch's conversion."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.BatchNorm2d(4),
                                torch.nn.Sequential(nkt.BatchNorm1d(5, affine=False)))
    bn, inner = model[1], model[2][0]
    converted = nkt.SyncBatchNorm.convert_sync_batchnorm(model, fallback=True)
    assert converted is model and type(model[1]) is type(model[2][0]) is nkt.SyncBatchNorm
    assert model[1].weight is bn.weight and model[1].running_var is bn.running_var
    assert model[2][0].weight is None and model[2][0].running_mean is inner.running_mean
    assert model[1].fallback and model[1].process_group is None
    single = nkt.SyncBatchNorm.convert_sync_batchnorm(torch.nn.BatchNorm3d(2), "group")
    assert type(single) is nkt.SyncBatchNorm and single.process_group == "group"
    with pytest.raises(TypeError, match="SyncBatchNorm: weight is a torch.float64"):
        nkt.SyncBatchNorm.convert_sync_batchnorm(torch.nn.BatchNorm2d(2, dtype=F64))
