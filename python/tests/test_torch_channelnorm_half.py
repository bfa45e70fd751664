# SPDX-License-Identifier: Apache-2.0
"""normkernels.torch's BatchNorm, SyncBatchNorm, GroupNorm and InstanceNorm on bfloat16
and float16 tensors, in both memory formats, training and eval: y and the input's
gradient the float32 module's on the widened tensors rounded once (bitwise), and
within the fp32 bound of PyTorch's float64 results rounded, and of PyTorch's float32
results on the widened tensors rounded; the weight's and bias's gradients and the
running statistics (float32) the float32 module's bits. Modules of half parameters and
buffers; the _bf16 / _f16 kernels called on the tensors where they lie; mixed dtypes
refused or given to PyTorch."""
import copy

import numpy as np
import pytest

import normkernels as nk
from reference import assert_rounded, data

torch = pytest.importorskip("torch")
import normkernels.torch as nkt  # noqa: E402 (needs torch)
from torch_steps import (bn_bounds, eval_bounds, gn_bounds, in_layout,  # noqa: E402
                         step, within)

HALVES = {torch.bfloat16: "bf16", torch.float16: "f16"}
F32, F64 = torch.float32, torch.float64
EPS = 1e-5
# (module, shape, channels_last): an (N, C, L) channels_last is a view of (N, L, C).
BATCH = [("BatchNorm1d", (16, 5), False), ("BatchNorm1d", (4, 6, 9), True),
         ("BatchNorm2d", (4, 3, 5, 7), False), ("BatchNorm2d", (4, 3, 5, 7), True),
         ("BatchNorm3d", (2, 4, 3, 5, 2), True)]
# (groups, shape, channels_last); None: InstanceNorm (a group per channel).
GROUPS = [(3, (4, 6, 9), True), (4, (3, 8, 5, 7), False), (4, (3, 8, 5, 7), True),
          (2, (2, 6, 3, 5, 2), False), (None, (3, 5, 4, 7), True),
          (None, (2, 4, 3, 5, 2), False)]
INSTANCE = {3: "InstanceNorm1d", 4: "InstanceNorm2d", 5: "InstanceNorm3d"}


def rounded(a, dtype):
    """a (NumPy, float32) rounded to dtype and widened back: the values a half tensor
    holds, as float32."""
    return torch.from_numpy(a).to(dtype).float().numpy()


def f64(t):
    return t.detach().to(F64).numpy()


def twins(ours, theirs):
    """ours (the library's module, float32 parameters) and a copy of it, and theirs
    (torch.nn's) in float32 and float64, all holding ours' parameters and buffers."""
    theirs64 = copy.deepcopy(theirs).double()
    for t in (theirs, theirs64):
        t.load_state_dict(ours.state_dict())
    return ours, copy.deepcopy(ours), theirs, theirs64


def check_step(modules, x, dy, dtype, channels_last, bounds):
    """One forward and backward of x and dy (float32 arrays holding half values) in
    dtype through modules[0], against modules[1] (the same module in float32) on the
    widened tensors and torch.nn's in float32 and float64 (modules[2:]). bounds(dx):
    the bounds on (y, dx, dweight, dbias) against the float64 results, dx being
    PyTorch's float64 one."""
    ours, wide, theirs, exact = modules
    fmt = HALVES[dtype]
    t = in_layout(x, channels_last)
    got = step(ours, t.to(dtype), in_layout(dy, channels_last).to(dtype))
    want = step(wide, t, in_layout(dy, channels_last))
    theirs = step(theirs, torch.from_numpy(x), torch.from_numpy(dy))
    exact = step(exact, torch.from_numpy(x).double(), torch.from_numpy(dy).double())
    bounds = bounds(exact[1].numpy())
    for k in (0, 1):  # y and dx: rounded once to dtype, in x's memory format
        assert got[k].dtype is dtype and got[k].stride() == t.stride()
        assert torch.equal(got[k], want[k].to(dtype))
        assert assert_rounded(f64(got[k]), f64(exact[k]), bounds[k], fmt) > 0.8
        theirs_bound = bounds[k] + np.abs(f64(theirs[k]) - f64(exact[k]))
        assert_rounded(f64(got[k]), f64(theirs[k]), theirs_bound, fmt)
    for g, w, e, bound in zip(got[2:], want[2:], exact[2:], bounds[2:]):
        assert g is w is None or torch.equal(g, w) and within(g, e, bound)


def assert_same_buffers(ours, wide):
    for name, buffer in ours.named_buffers():
        assert torch.equal(buffer, getattr(wide, name)), name


def with_parameters(ours, theirs, w, b):
    """twins of ours (its weight w, its bias b) and theirs."""
    with torch.no_grad():
        ours.weight.copy_(torch.from_numpy(w))
        ours.bias.copy_(torch.from_numpy(b))
    return twins(ours, theirs)


def eval_mode(modules):
    """modules in eval mode, torch.nn's holding the running statistics of ours: (them,
    those statistics as arrays)."""
    for m in modules:
        m.eval()
    for m in modules[2:]:
        m.load_state_dict(modules[0].state_dict())
    return modules, [getattr(modules[0], n).numpy().copy() for n in ("running_mean",
                                                                     "running_var")]


@pytest.mark.parametrize("dtype", HALVES, ids=HALVES.get)
@pytest.mark.parametrize("name, shape, channels_last", BATCH)
def test_batchnorm_is_the_rounded_float32(name, shape, channels_last, dtype):
    """A training step (running statistics and num_batches_tracked the float32 module's
    bits), then an eval step with the running statistics it left."""
    c = shape[1]
    w, b = data((c,), 1), data((c,), 2)
    modules = with_parameters(getattr(nkt, name)(c, momentum=0.3),
                              getattr(torch.nn, name)(c, momentum=0.3), w, b)
    x, dy = rounded(data(shape, 3, 2.0), dtype), rounded(data(shape, 4), dtype)
    check_step(modules, x, dy, dtype, channels_last,
               lambda _: bn_bounds(x, dy, w, b, EPS))
    assert_same_buffers(*modules[:2])
    assert int(modules[0].num_batches_tracked) == 1
    modules, (rm, rv) = eval_mode(modules)
    x, dy = rounded(data(shape, 5, 1.0), dtype), rounded(data(shape, 6), dtype)
    check_step(modules, x, dy, dtype, channels_last,
               lambda exact_dx: eval_bounds(x, dy, rm, rv, w, b, exact_dx, EPS))
    assert_same_buffers(*modules[:2])


@pytest.mark.parametrize("dtype", HALVES, ids=HALVES.get)
@pytest.mark.parametrize("groups, shape, channels_last", GROUPS)
def test_groupnorm_and_instancenorm_are_the_rounded_float32(groups, shape, channels_last,
                                                            dtype):
    """GroupNorm, and InstanceNorm (affine, running statistics tracked): a training
    step (its running statistics the float32 module's bits), an eval step (GroupNorm's
    is the same step; InstanceNorm's normalizes with the running statistics)."""
    c = shape[1]
    if groups is None:
        name = INSTANCE[len(shape)]
        kw = {"affine": True, "track_running_stats": True, "momentum": 0.3}
        ours, theirs = getattr(nkt, name)(c, **kw), getattr(torch.nn, name)(c, **kw)
    else:
        ours, theirs = nkt.GroupNorm(groups, c), torch.nn.GroupNorm(groups, c)
    w, b = data((c,), 7), data((c,), 8)
    modules = with_parameters(ours, theirs, w, b)
    x, dy = rounded(data(shape, 9, -1.0), dtype), rounded(data(shape, 10), dtype)
    check_step(modules, x, dy, dtype, channels_last,
               lambda _: gn_bounds(x, dy, groups or c, w, b, channels_last, EPS))
    assert_same_buffers(*modules[:2])
    x, dy = rounded(data(shape, 11, 1.0), dtype), rounded(data(shape, 12), dtype)
    if groups is not None:
        for m in modules:
            m.eval()
        check_step(modules, x, dy, dtype, channels_last,
                   lambda _: gn_bounds(x, dy, groups, w, b, channels_last, EPS))
    else:
        modules, (rm, rv) = eval_mode(modules)
        check_step(modules, x, dy, dtype, channels_last,
                   lambda exact_dx: eval_bounds(x, dy, rm, rv, w, b, exact_dx, EPS))


@pytest.mark.parametrize("dtype", HALVES, ids=HALVES.get)
@pytest.mark.parametrize("name", ["BatchNorm2d", "GroupNorm", "InstanceNorm2d"])
def test_modules_of_half_parameters_and_buffers(name, dtype):
    """A module built with dtype=bfloat16 / float16: its parameters and running
    statistics widened exactly; y, the gradients and the updated running statistics
    the float32 module's (holding the widened values) rounded once to dtype."""
    kw = {"affine": True, "track_running_stats": True} if name.startswith("Inst") else {}
    make = (lambda **d: nkt.GroupNorm(2, 4, **d)) if name == "GroupNorm" else \
        (lambda **d: getattr(nkt, name)(4, momentum=0.3, **kw, **d))
    ours = make(dtype=dtype)
    with torch.no_grad():
        for p in ours.parameters():
            p.normal_()
        for n, buffer in ours.named_buffers():
            if n == "running_var":
                buffer.uniform_(0.5, 2.0)
            elif n == "running_mean":
                buffer.normal_()
    wide = make()
    wide.load_state_dict({k: v.float() if v.is_floating_point() else v
                          for k, v in ours.state_dict().items()})
    x = torch.from_numpy(data((3, 4, 5, 6), 13, 1.0)).to(dtype)
    x = x.contiguous(memory_format=torch.channels_last)
    dy = torch.from_numpy(data((3, 4, 5, 6), 14)).to(dtype)
    for training in (True, False):
        ours.train(training), wide.train(training)
        got, want = step(ours, x, dy), step(wide, x.float(), dy.float())
        for g, w in zip(got, want):
            assert g.dtype is dtype and torch.equal(g, w.to(dtype))
        for n, buffer in ours.named_buffers():
            widened = getattr(wide, n)
            assert torch.equal(buffer, widened.to(buffer.dtype)), n
            widened.copy_(buffer)  # from here on the same values again


@pytest.mark.parametrize("dtype", HALVES, ids=HALVES.get)
def test_half_tensors_reach_the_half_kernels_where_they_lie(monkeypatch, dtype):
    """A training and an eval step run the kernels of x's dtype on the input and dy
    themselves (channels_last, read as they lie): no widened copies."""
    t = HALVES[dtype]
    real, calls = nk._CHANNEL_NORMS[t], []

    def spy(name):
        at = 5 if name.startswith("groupnorm") else 4  # x's argument (groups before)

        def call(*args):
            calls.append((name, args[at:at + 2]))
            return getattr(real, name)(*args)
        return call

    monkeypatch.setitem(nk._CHANNEL_NORMS, t, type(real)(**{
        name: spy(name) for name in vars(real)}))
    x = torch.from_numpy(data((4, 6, 5, 7), 15)).to(dtype)
    x = x.contiguous(memory_format=torch.channels_last).requires_grad_()
    dy = torch.from_numpy(data((4, 6, 5, 7), 16)).to(dtype)
    dy = dy.contiguous(memory_format=torch.channels_last)
    for module, forward, backward in (
            (nkt.BatchNorm2d(6), "batchnorm_forward_training", "batchnorm_backward"),
            (nkt.BatchNorm2d(6).eval(), "batchnorm_forward_inference",
             "batchnorm_backward_reduce"),
            (nkt.GroupNorm(3, 6), "groupnorm_forward", "groupnorm_backward"),
            (nkt.InstanceNorm2d(6, track_running_stats=True), "batchnorm_moments",
             "groupnorm_backward")):
        calls.clear()
        module(x).backward(dy)
        assert (forward, x.data_ptr()) in [(name, args[0]) for name, args in calls]
        assert (backward, (x.data_ptr(), dy.data_ptr())) in calls


@pytest.mark.parametrize("dtype", HALVES, ids=HALVES.get)
def test_sync_batchnorm_is_the_rounded_float32(monkeypatch, dtype):
    """SyncBatchNorm's synchronized step (two processes, faked: every all_gather gives
    this shard twice, all_reduce doubles) in dtype: y and dx the float32 module's on
    the widened tensors rounded once, the weight's and bias's gradients and the running
    statistics its bits."""
    def all_gather(tensors, t, group=None):
        for out in tensors:
            out.copy_(t)

    monkeypatch.setattr(torch.distributed, "get_world_size", lambda group=None: 2)
    monkeypatch.setattr(torch.distributed, "all_gather", all_gather)
    monkeypatch.setattr(torch.distributed, "all_reduce",
                        lambda t, group=None: t.mul_(2))
    ours = nkt.SyncBatchNorm(3, momentum=0.3, process_group="faked")
    with torch.no_grad():
        ours.weight.normal_()
    wide = copy.deepcopy(ours)
    x = torch.from_numpy(data((4, 3, 5, 6), 17, 1.0)).to(dtype)
    x = x.contiguous(memory_format=torch.channels_last)
    dy = torch.from_numpy(data((4, 3, 5, 6), 18)).to(dtype)
    got, want = step(ours, x, dy), step(wide, x.float(), dy.float())
    for k, (g, w) in enumerate(zip(got, want)):
        assert torch.equal(g, w.to(dtype) if k < 2 else w)
    assert got[0].dtype is dtype and got[0].stride() == x.stride()
    assert_same_buffers(ours, wide)


@pytest.mark.parametrize("dtype", HALVES, ids=HALVES.get)
def test_mixed_dtypes_are_refused_or_given_to_pytorch(dtype):
    other = torch.float16 if dtype is torch.bfloat16 else torch.bfloat16
    x = torch.from_numpy(data((4, 3, 5), 19)).to(dtype)
    c, c_other = torch.ones(3), torch.ones(3, dtype=other)
    rule = (r"; the library takes weight, bias, running_mean and running_var of "
            r"input's dtype or float32 \(fallback=True")
    with pytest.raises(TypeError, match=rf"normkernels.torch.batch_norm: running_mean is "
                       rf"a {other} tensor and input a {dtype} one{rule}"):
        nkt.batch_norm(x, c_other, c, training=True)
    with pytest.raises(TypeError, match=rf"instance_norm: weight is a {other} tensor and "
                       rf"input a {dtype} one{rule}"):
        nkt.instance_norm(x, weight=c_other)
    with pytest.raises(TypeError, match=rf"group_norm: bias is a {other} tensor and "
                       rf"input a {dtype} one; the library takes weight and bias of "
                       r"input's dtype or float32"):
        nkt.group_norm(x, 3, c, c_other)
    with pytest.raises(TypeError, match=rf"batch_norm: running_mean is a {dtype} tensor "
                       r"and input a torch.float32 one"):
        nkt.BatchNorm1d(3, dtype=dtype)(x.float())
    with pytest.raises(TypeError, match=rf"SyncBatchNorm: running_mean is a {dtype} "
                       r"tensor and input a torch.float32 one"):
        nkt.SyncBatchNorm(3, affine=False, dtype=dtype)(x.float())
    with pytest.raises(TypeError, match=rf"group_norm: weight is a {other} tensor"):
        nkt.GroupNorm(1, 3, dtype=other)(x)
    # fallback=True: PyTorch's own op, which refuses these too (RuntimeError).
    with pytest.raises(RuntimeError):
        nkt.batch_norm(x, c_other, c, training=True, fallback=True)
