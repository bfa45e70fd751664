# SPDX-License-Identifier: Apache-2.0
"""NumPy and PyTorch users' conventions: weight= / bias=, normalized_shape,
momentum=None with num_batches_tracked, zero-size inputs, channels_last views."""
import numpy as np
import pytest

import normkernels as nk
from reference import bn_inference_reference, bn_reference, data, reference

ROW_FUNCTIONS = {  # name: (call with gamma / beta given by keyword, takes beta)
    "layer_norm": (lambda x, **kw: nk.layer_norm(x, **kw), True),
    "rms_norm": (lambda x, **kw: nk.rms_norm(x, **kw), False),
    "add_layer_norm": (lambda x, **kw: nk.add_layer_norm(x, x, **kw), True),
    "add_rms_norm": (lambda x, **kw: nk.add_rms_norm(x, x, **kw), False),
}


@pytest.mark.parametrize("name", ROW_FUNCTIONS)
def test_weight_and_bias_are_gamma_and_beta(name):
    call, has_beta = ROW_FUNCTIONS[name]
    x, gamma, beta = data((3, 40), 1), data((40,), 2), data((40,), 3)
    ours = {"gamma": gamma, "beta": beta} if has_beta else {"gamma": gamma}
    torch_names = {"weight": gamma, "bias": beta} if has_beta else {"weight": gamma}
    np.testing.assert_array_equal(call(x, **torch_names), call(x, **ours))
    with pytest.raises(TypeError, match="got both gamma and weight"):
        call(x, gamma=gamma, weight=gamma)
    if has_beta:
        with pytest.raises(TypeError, match="got both beta and bias"):
            call(x, beta=beta, bias=beta)
    else:
        with pytest.raises(TypeError, match="bias"):
            call(x, bias=beta)


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_weight_and_bias(training):
    x, gamma, beta = data((4, 3, 5), 4), data((3,), 5), data((3,), 6)
    stats = data((3,), 7), np.abs(data((3,), 8)) + 0.5
    want = nk.batch_norm(x, *[s.copy() for s in stats], gamma, beta, training)
    got = nk.batch_norm(x, *[s.copy() for s in stats], training=training, weight=gamma,
                        bias=beta)
    np.testing.assert_array_equal(got, want)
    with pytest.raises(TypeError, match="got both gamma and weight"):
        nk.batch_norm(x, *stats, gamma, weight=gamma)
    with pytest.raises(TypeError, match="got both beta and bias"):
        nk.batch_norm(x, *stats, beta=beta, bias=beta)


# ---------------------------------------------------------------- normalized_shape

@pytest.mark.parametrize("center", [True, False])
@pytest.mark.parametrize("shape, normalized_shape", [
    ((2, 3, 4, 8), (4, 8)), ((5, 3, 7), [3, 7]), ((4, 3, 2, 5), (3, 2, 5)), ((6, 9), 9),
    ((6, 9), np.int64(9)), ((2, 4, 8), (2, 4, 8))])
def test_normalized_shape(each_isa, center, shape, normalized_shape):
    """Several trailing dims normalized together, as F.layer_norm: gamma and beta of
    that shape, statistics shaped as the leading dims."""
    norm = tuple(np.atleast_1d(normalized_shape).tolist())
    lead = shape[:len(shape) - len(norm)]
    x, gamma, beta = data(shape, 1, offset=2.0), data(norm, 2), data(norm, 3)
    if center:
        y, mean, rstd = nk.layer_norm(x, gamma, beta, return_stats=True,
                                      normalized_shape=normalized_shape)
        assert mean.shape == lead
    else:
        y, rstd = nk.rms_norm(x, gamma, return_stats=True,
                              normalized_shape=normalized_shape)
    assert y.shape == shape and rstd.shape == lead
    rows = x.reshape(-1, gamma.size)
    want, _, want_rstd, bound = reference(rows, gamma=gamma.ravel(),
                                          beta=beta.ravel() if center else None,
                                          center=center)
    assert np.all(np.abs(y.reshape(rows.shape) - want) <= bound)
    assert np.allclose(rstd.ravel(), want_rstd, rtol=1e-5)


def test_normalized_shape_in_the_fused_forms():
    x, r = data((3, 4, 6), 4), data((3, 4, 6), 5)
    gamma, beta = data((4, 6), 6), data((4, 6), 7)
    y, s = nk.add_layer_norm(x, r, gamma, beta, normalized_shape=(4, 6))
    want = nk.layer_norm(x + r, gamma, beta, normalized_shape=(4, 6))
    np.testing.assert_array_equal(s, x + r)
    np.testing.assert_array_equal(y, want)
    y, s = nk.add_rms_norm(x, r, gamma, normalized_shape=(4, 6))
    np.testing.assert_array_equal(y, nk.rms_norm(x + r, gamma, normalized_shape=(4, 6)))


def test_normalized_shape_matches_torch():
    torch = pytest.importorskip("torch")
    x, gamma, beta = data((3, 5, 4, 8), 8, offset=1.0), data((4, 8), 9), data((4, 8), 10)
    t = torch.nn.functional.layer_norm(torch.from_numpy(x), (4, 8),
                                       torch.from_numpy(gamma), torch.from_numpy(beta))
    ours = nk.layer_norm(x, weight=gamma, bias=beta, normalized_shape=(4, 8))
    np.testing.assert_allclose(ours, t.numpy(), rtol=1e-5, atol=1e-5)


def test_normalized_shape_errors():
    x = data((2, 3, 4), 11)
    with pytest.raises(ValueError, match=r"normalized_shape \(3, 5\) does not match"):
        nk.layer_norm(x, normalized_shape=(3, 5))
    with pytest.raises(ValueError, match="does not match"):
        nk.layer_norm(x, normalized_shape=(1, 2, 3, 4))
    with pytest.raises(ValueError, match="at least one dimension"):
        nk.layer_norm(x, normalized_shape=())
    with pytest.raises(TypeError, match="normalized_shape must be an integer"):
        nk.layer_norm(x, normalized_shape=(3, 4.0))
    with pytest.raises(ValueError, match=r"gamma has shape \(12,\); expected \(3, 4\)"):
        nk.layer_norm(x, np.ones(12, np.float32), normalized_shape=(3, 4))
    with pytest.raises(ValueError, match=r"dimensions \(0, 4\) hold no element"):
        nk.layer_norm(np.ones((2, 0, 4), np.float32), normalized_shape=(0, 4))


# ---------------------------------------------------------------- momentum=None

def batches(count, shape=(4, 3, 5), seed=20):
    return [data(shape, seed + i, offset=i) for i in range(count)]


def test_momentum_none_is_a_cumulative_average():
    rm, rv = np.full(3, 7.0, np.float32), np.full(3, 7.0, np.float32)
    tracked = np.zeros((), np.int64)
    means, variances = [], []
    for x in batches(4):
        nk.batch_norm(x, rm, rv, training=True, momentum=None,
                      num_batches_tracked=tracked)
        _, mean, var, count, _ = bn_reference(x, np.ones(3), np.zeros(3), 1e-5, False)
        means.append(mean)
        variances.append(var * count / (count - 1))
    assert tracked == 4
    np.testing.assert_allclose(rm, np.mean(means, 0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rv, np.mean(variances, 0), rtol=1e-5)


def test_momentum_none_drives_torchs_buffers():
    """A torch.nn.BatchNorm2d(momentum=None)'s own buffers, through .numpy() (shared
    memory), updated as the module updates them."""
    torch = pytest.importorskip("torch")
    ours = torch.nn.BatchNorm2d(3, momentum=None)
    theirs = torch.nn.BatchNorm2d(3, momentum=None)
    for x in batches(3, (2, 3, 4, 5)):
        want = theirs(torch.from_numpy(x)).detach().numpy()
        y = nk.batch_norm(x, ours.running_mean.numpy(), ours.running_var.numpy(),
                          training=True, momentum=None,
                          num_batches_tracked=ours.num_batches_tracked.numpy())
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
    assert int(ours.num_batches_tracked) == int(theirs.num_batches_tracked) == 3
    np.testing.assert_allclose(ours.running_mean, theirs.running_mean, rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(ours.running_var, theirs.running_var, rtol=1e-5)


def test_num_batches_tracked():
    x = batches(1)[0]
    rm, rv = np.zeros(3, np.float32), np.ones(3, np.float32)
    tracked = np.array([5], np.int64)
    nk.batch_norm(x, rm, rv, training=True, momentum=0.1, num_batches_tracked=tracked)
    assert tracked[0] == 6  # counted with a float momentum too, as the module does
    nk.batch_norm(x, rm, rv, training=False, num_batches_tracked=tracked)
    assert tracked[0] == 6  # not at inference
    with pytest.raises(ValueError, match="momentum=None .* needs num_batches_tracked"):
        nk.batch_norm(x, rm, rv, training=True, momentum=None)
    with pytest.raises(TypeError, match="one-element int64"):
        nk.batch_norm(x, rm, rv, training=True, momentum=None, num_batches_tracked=3)
    with pytest.raises(TypeError, match="one-element int64"):
        nk.batch_norm(x, rm, rv, training=True, num_batches_tracked=np.zeros(2, np.int64))
    with pytest.raises(ValueError, match="num_batches_tracked = -1 is negative"):
        nk.batch_norm(x, rm, rv, training=True, num_batches_tracked=np.array(-1))
    with pytest.raises(OverflowError, match="num_batches_tracked"):
        nk.batch_norm(x, rm, rv, training=True, num_batches_tracked=np.array(2 ** 63 - 1))
    stuck = np.zeros((), np.int64)
    with pytest.raises(nk.NormKernelsError):  # a refused call does not count
        nk.batch_norm(data((1, 3, 1), 1), rm, rv, training=True,
                      num_batches_tracked=stuck)
    assert stuck == 0
    # Without running statistics momentum=None is as harmless as in F.batch_norm.
    nk.batch_norm(x, training=True, momentum=None)


# ---------------------------------------------------------------- zero-size inputs

@pytest.mark.parametrize("shape, normalized_shape", [
    ((0, 8), None), ((2, 0, 8), None), ((0, 4, 8), (4, 8)), ((3, 0, 2, 5), (2, 5))])
def test_empty_rows_give_empty_outputs(shape, normalized_shape):
    norm = shape[-1:] if normalized_shape is None else normalized_shape
    lead = shape[:len(shape) - len(norm)]
    x, gamma, beta = np.empty(shape, np.float32), data(norm, 1), data(norm, 2)
    kw = {"normalized_shape": normalized_shape, "return_stats": True}
    y, mean, rstd = nk.layer_norm(x, gamma, beta, **kw)
    assert y.shape == shape and mean.shape == lead and rstd.shape == lead
    y, rrms = nk.rms_norm(x, gamma, **kw)
    assert y.shape == shape and rrms.shape == lead
    out, s = np.empty(shape, np.float32), np.empty(shape, np.float32)
    y, s2, mean, rstd = nk.add_layer_norm(x, x, gamma, beta, out=out, sum_out=s, **kw)
    assert y is out and s2 is s and mean.shape == lead
    y, s2, rrms = nk.add_rms_norm(x, x, gamma, **kw)
    assert y.shape == s2.shape == shape


def test_empty_rows_as_torch():
    torch = pytest.importorskip("torch")
    for shape in ((0, 8), (2, 0, 8)):
        t = torch.nn.functional.layer_norm(torch.empty(shape), (8,))
        assert nk.layer_norm(np.empty(shape, np.float32)).shape == tuple(t.shape)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("shape", [(0, 3, 4), (2, 3, 0), (0, 3), (2, 0, 4)])
def test_empty_batch_norm(shape, channels_last):
    """Empty y; running statistics unchanged (as F.batch_norm); save_mean / save_rstd
    NaN, the statistics of no value (as torch.native_batch_norm)."""
    x = np.empty(shape, np.float32)
    c = shape[-1] if channels_last else shape[1]
    rm, rv = data((c,), 3), np.abs(data((c,), 4)) + 0.5
    rm0, rv0 = rm.copy(), rv.copy()
    y, save_mean, save_rstd = nk.batch_norm(x, rm, rv, data((c,), 5), data((c,), 6),
                                            training=True, channels_last=channels_last,
                                            return_stats=True)
    assert y.shape == shape and save_mean.shape == save_rstd.shape == (c,)
    assert np.all(np.isnan(save_mean)) and np.all(np.isnan(save_rstd))
    np.testing.assert_array_equal(rm, rm0)
    np.testing.assert_array_equal(rv, rv0)
    assert nk.batch_norm(x, rm, rv, channels_last=channels_last).shape == shape
    count, mean, m2 = nk.batch_norm_moments(x, channels_last=channels_last)
    spatial = int(np.prod(shape[1:-1] if channels_last else shape[2:]))
    assert count == shape[0] * spatial
    assert mean.shape == m2.shape == (c,)
    assert not np.any(mean) and not np.any(m2)


def test_empty_batch_norm_as_torch():
    torch = pytest.importorskip("torch")
    for shape in ((0, 3, 4), (2, 3, 0), (2, 0, 4)):
        c = shape[1]
        trm, trv = torch.zeros(c), torch.ones(c)
        t = torch.nn.functional.batch_norm(torch.empty(shape), trm, trv, training=True)
        rm, rv = np.zeros(c, np.float32), np.ones(c, np.float32)
        y = nk.batch_norm(np.empty(shape, np.float32), rm, rv, training=True)
        assert y.shape == tuple(t.shape)
        np.testing.assert_array_equal(rm, trm.numpy())
        np.testing.assert_array_equal(rv, trv.numpy())


def test_empty_channels_merge():
    empty = np.empty(0, np.float32)
    count, mean, m2 = nk.moments_merge(2, empty, empty, 3, empty, empty)
    assert count == 5 and mean.shape == m2.shape == (0,)
    nk.batch_norm_update_running(5, empty, empty, 0.1, empty.copy(), empty.copy())


# ---------------------------------------------------------------- channels_last

def test_channels_last_tensor_is_refused_naming_its_view():
    """A channels_last tensor's NCHW view (what torch's .numpy() gives) is refused with
    the zero-copy route, which then gives the right result."""
    nhwc = data((2, 5, 6, 3), 12, offset=1.0)
    x = np.moveaxis(nhwc, -1, 1)  # (N, C, H, W) with channels-last memory
    gamma, beta = data((3,), 13), data((3,), 14)
    rm, rv = data((3,), 15), np.abs(data((3,), 16)) + 0.5
    with pytest.raises(ValueError, match=r"numpy.moveaxis\(x, 1, -1\) is a contiguous "
                       r"\(N, \*spatial, C\) view .* channels_last=True"):
        nk.batch_norm(x, rm, rv, gamma, beta)
    with pytest.raises(ValueError, match=r"moveaxis\(x, 1, -1\)"):
        nk.batch_norm_moments(x)
    view = np.moveaxis(x, 1, -1)
    assert np.shares_memory(view, nhwc) and view.flags.c_contiguous
    y = nk.batch_norm(view, rm, rv, gamma, beta, channels_last=True)
    want, bound = bn_inference_reference(view, rm, rv, gamma, beta, 1e-5, True)
    assert np.all(np.abs(y - want) <= bound)
    # The other way round: channels-first memory seen as (N, H, W, C).
    with pytest.raises(ValueError, match=r"numpy.moveaxis\(x, -1, 1\) .* "
                       "channels_last=False"):
        nk.batch_norm(np.moveaxis(data((2, 3, 4, 4), 17), 1, -1), rm, rv,
                      channels_last=True)
    with pytest.raises(ValueError, match=r"C-contiguous; numpy.ascontiguousarray"):
        nk.batch_norm(data((2, 3, 8), 18)[:, :, ::2], rm, rv)


def test_channels_last_torch_tensor():
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(data((2, 3, 5, 6), 19)).contiguous(
        memory_format=torch.channels_last)
    gamma, beta = data((3,), 20), data((3,), 21)
    with pytest.raises(ValueError, match="channels_last=True"):
        nk.batch_norm(t.numpy(), training=True)
    y = nk.batch_norm(np.moveaxis(t.numpy(), 1, -1), gamma=gamma, beta=beta,
                      training=True, channels_last=True)
    want = torch.nn.functional.batch_norm(t, None, None, torch.from_numpy(gamma),
                                          torch.from_numpy(beta), training=True)
    np.testing.assert_allclose(np.moveaxis(y, -1, 1), want.numpy(), rtol=1e-4, atol=1e-5)
