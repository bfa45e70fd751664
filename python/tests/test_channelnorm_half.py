# SPDX-License-Identifier: Apache-2.0
"""BatchNorm and GroupNorm (InstanceNorm) on float16 arrays through the binding: every
function's float16 call against the float32 one on the widened arrays, in both
layouts: its tensor outputs (y, dx) that result rounded once (NumPy's float32 ->
float16 rounds to nearest even; fp16 overflow to inf), bitwise; its float outputs
(statistics, moments, running statistics, sums, dgamma, dbeta) its bits. y also
against the float64 reference rounded. Empty arrays, in place, mixed dtypes refused
naming the argument, and the library's errors naming the _f16 kernel."""
import numpy as np
import pytest

import normkernels as nk
from reference import assert_rounded, bn_reference, data

F16, F32 = np.float16, np.float32
# (N, C, *spatial): one value per channel a sample, odd sizes, a long channel.
SHAPES = [(2, 3), (4, 6, 5, 7), (3, 17, 111), (2, 8, 4, 4, 2)]
# (shape, groups): one group, some, one per channel (InstanceNorm), a long set.
GROUPS = [((2, 6, 5), 1), ((3, 12, 7, 5), 4), ((5, 7, 3, 1), 7), ((2, 4, 2053), 2)]


def laid_out(shape, channels_last):
    """shape (N, C, *spatial) as x's shape: (N, *spatial, C) with channels_last."""
    return (shape[0],) + shape[2:] + (shape[1],) if channels_last else shape


def halves(shape, seed, offset=0.0):
    return data(shape, seed, offset).astype(F16)


def wide(a):
    """a float16 array widened (exactly) to float32."""
    return a.astype(F32)


def bits(a):
    """a's float16 or float32 bit patterns: equal only for the same values (-0 and 0
    apart, NaNs by payload)."""
    return a.view(np.uint16 if a.dtype == F16 else np.uint32)


def assert_rounded_once(got, want):
    """got, a float16 tensor output, is want (the float32 function's) rounded once."""
    assert got.dtype == F16 and got.shape == want.shape
    with np.errstate(over="ignore"):  # 65520 and beyond: inf, as the kernels round
        np.testing.assert_array_equal(bits(got), bits(want.astype(F16)))


def assert_same(got, want):
    """got, a float output of a float16 call, has the float32 call's bits."""
    assert got.dtype == F32 and want.dtype == F32
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_batch_norm_forwards(each_isa, shape, channels_last):
    """Training (running statistics updated, saved statistics), then inference with
    the running statistics, and the moments."""
    x = halves(laid_out(shape, channels_last), 1, offset=2.0)
    c = shape[1]
    gamma, beta = data((c,), 2), data((c,), 3)
    results = {}
    for a in (x, wide(x)):
        running = data((c,), 4), np.abs(data((c,), 5)) + 0.5
        out = nk.batch_norm(a, *running, gamma, beta, True, 0.3, 1e-3, channels_last,
                            return_stats=True)
        y = nk.batch_norm(a, *running, gamma, beta, channels_last=channels_last)
        results[a.dtype] = out, running, y, nk.batch_norm_moments(a, channels_last)
    (y, mean, rstd), running, y_eval, moments = results[np.dtype(F16)]
    (y32, mean32, rstd32), running32, y_eval32, moments32 = results[np.dtype(F32)]
    assert_rounded_once(y, y32)
    assert_rounded_once(y_eval, y_eval32)
    for got, want in zip((mean, rstd, *running, *moments[1:]),
                         (mean32, rstd32, *running32, *moments32[1:])):
        assert_same(got, want)
    assert moments[0] == moments32[0] == x.size // c
    # y against the float64 reference on the widened x, rounded once to float16.
    nchw = np.moveaxis(wide(x), -1, 1) if channels_last else wide(x)
    want, _, _, _, bound = bn_reference(nchw, gamma, beta, 1e-3, False)
    if channels_last:
        want, bound = np.moveaxis(want, 1, -1), np.moveaxis(bound, 1, -1)
    assert assert_rounded(y, want, bound, "f16") > 0.8


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_batch_norm_backwards(each_isa, shape, channels_last):
    """batch_norm_backward (with gamma and without, param_grads or not), and
    SyncBatchNorm's backward steps: reduce's sums, apply's dx."""
    x = halves(laid_out(shape, channels_last), 4, offset=2.0)
    dy = halves(x.shape, 5)
    c = shape[1]
    gamma = data((c,), 6)
    _, mean, rstd = nk.batch_norm(x, None, None, gamma, None, True,
                                  channels_last=channels_last, return_stats=True)
    for kw in ({"gamma": gamma}, {"param_grads": False}):
        got = nk.batch_norm_backward(dy, x, mean, rstd, channels_last=channels_last, **kw)
        want = nk.batch_norm_backward(wide(dy), wide(x), mean, rstd,
                                      channels_last=channels_last, **kw)
        assert_rounded_once(got[0], want[0])
        for g, w in zip(got[1:], want[1:]):
            assert (g is None) == (w is None)
            if g is not None:
                assert_same(g, w)
    sums = nk.batch_norm_backward_reduce(dy, x, mean, rstd, channels_last)
    sums32 = nk.batch_norm_backward_reduce(wide(dy), wide(x), mean, rstd, channels_last)
    for g, w in zip(sums, sums32):
        assert_same(g, w)
    count = 3 * x.size // c  # as if over three such shards
    dx = nk.batch_norm_backward_apply(dy, x, mean, rstd, count, *sums, gamma,
                                      channels_last)
    assert_rounded_once(dx, nk.batch_norm_backward_apply(
        wide(dy), wide(x), mean, rstd, count, *sums32, gamma, channels_last))


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("shape, groups", GROUPS)
def test_group_norm_forward_and_backward(each_isa, shape, groups, channels_last):
    """group_norm (y, mean, rstd) and group_norm_backward (dx, dgamma, dbeta); with a
    group per channel, instance_norm and its backward give the same bits."""
    x = halves(laid_out(shape, channels_last), 7, offset=-1.0)
    dy = halves(x.shape, 8)
    c = shape[1]
    gamma, beta = data((c,), 9), data((c,), 10)
    out = nk.group_norm(x, groups, gamma, beta, 1e-4, channels_last, return_stats=True)
    out32 = nk.group_norm(wide(x), groups, gamma, beta, 1e-4, channels_last,
                          return_stats=True)
    assert_rounded_once(out[0], out32[0])
    assert_same(out[1], out32[1])
    assert_same(out[2], out32[2])
    grads = nk.group_norm_backward(dy, x, *out[1:], groups, gamma, channels_last)
    grads32 = nk.group_norm_backward(wide(dy), wide(x), *out[1:], groups, gamma,
                                     channels_last)
    assert_rounded_once(grads[0], grads32[0])
    assert_same(grads[1], grads32[1])
    assert_same(grads[2], grads32[2])
    if groups == c:
        instance = nk.instance_norm(x, gamma, beta, 1e-4, channels_last,
                                    return_stats=True)
        for a, b in zip(instance, out):
            np.testing.assert_array_equal(bits(a), bits(b))
        for a, b in zip(nk.instance_norm_backward(dy, x, *out[1:], gamma, channels_last),
                        grads):
            np.testing.assert_array_equal(bits(a), bits(b))


def test_overflow_in_place_and_empty():
    """fp16 values of 65520 and beyond round to inf, as NumPy's conversion; out=x and
    out=dy in place; empty float16 arrays give empty float16 results."""
    x = halves((4, 3, 50), 11)
    gamma = np.array([1.0, 3e4, -6e4], F32)
    y = nk.batch_norm(x, None, None, gamma, None, True)
    assert np.isinf(y[:, 1:]).any() and not np.isinf(y[:, 0]).any()
    assert_rounded_once(y, nk.batch_norm(wide(x), None, None, gamma, None, True))
    _, mean, rstd = nk.group_norm(x, 3, gamma, return_stats=True)
    want = nk.group_norm(x.copy(), 3, gamma)
    assert nk.group_norm(x, 3, gamma, out=x) is x
    np.testing.assert_array_equal(bits(x), bits(want))
    dy, x = halves(x.shape, 12), halves(x.shape, 11)
    want = nk.group_norm_backward(dy, x, mean, rstd, 3, gamma)[0]
    assert nk.group_norm_backward(dy, x, mean, rstd, 3, gamma, out=dy)[0] is dy
    np.testing.assert_array_equal(bits(dy), bits(want))
    empty = np.empty((0, 3, 4), F16)
    for result in (nk.batch_norm(empty, None, None, training=True),
                   nk.group_norm(empty, 3),
                   nk.batch_norm_backward(empty, empty, mean[0], rstd[0])[0]):
        assert result.dtype == F16 and result.shape == empty.shape


def test_mixed_dtypes_are_refused():
    x, x32 = halves((2, 3, 4), 13), data((2, 3, 4), 13)
    c16, c = np.ones(3, F16), np.ones(3, F32)
    s16, s = np.ones((2, 3), F16), np.ones((2, 3), F32)
    one_dtype = r"\(x's: x and out have one dtype\)"
    with pytest.raises(TypeError, match=rf"out must have dtype float16 {one_dtype}, not "
                       "float32"):
        nk.batch_norm(x, None, None, training=True, out=x32)
    with pytest.raises(TypeError, match=rf"out must have dtype float32 {one_dtype}, not "
                       "float16"):
        nk.group_norm(x32, 3, out=x)
    with pytest.raises(TypeError, match=r"running_mean must have dtype float32 \(running "
                       r"statistics are float32 with x of either dtype\), not float16"):
        nk.batch_norm(x, c16, c, training=True)
    with pytest.raises(TypeError, match=r"running_var must have dtype float32"):
        nk.batch_norm(x, c, c16)
    with pytest.raises(TypeError, match=r"gamma must have dtype float32 \(gamma and beta "
                       r"are float32 with x of either dtype\), not float16"):
        nk.batch_norm(x, None, None, c16, training=True)
    with pytest.raises(TypeError, match=r"beta must have dtype float32 \(gamma and beta"):
        nk.instance_norm(x, None, c16)
    gradient = r"\(x's: dy, x and out have one dtype\)"
    with pytest.raises(TypeError, match=rf"dy must have dtype float16 {gradient}, not "
                       "float32"):
        nk.batch_norm_backward(x32, x, c, c)
    with pytest.raises(TypeError, match=rf"dy must have dtype float32 {gradient}, not "
                       "float16"):
        nk.batch_norm_backward_reduce(x, x32, c, c)
    with pytest.raises(TypeError, match=rf"out must have dtype float16 {gradient}"):
        nk.group_norm_backward(x, x, s, s, 3, out=x32)
    with pytest.raises(TypeError, match=r"save_rstd must have dtype float32 \(the saved "
                       r"statistics are float32 with x of either dtype\), not float16"):
        nk.batch_norm_backward(x, x, c, c16)
    with pytest.raises(TypeError, match=r"mean must have dtype float32 \(the saved "
                       "statistics"):
        nk.instance_norm_backward(x, x, s16, s)
    with pytest.raises(TypeError, match=r"sum_dy_xhat must have dtype float32 \(the sums "
                       r"are float32 with x of either dtype\), not float16"):
        nk.batch_norm_backward_apply(x, x, c, c, 8, c, c16)
    with pytest.raises(TypeError, match=r"gamma must have dtype float32 \(gamma and "):
        nk.batch_norm_backward_apply(x, x, c, c, 8, c, c, c16)
    with pytest.raises(TypeError, match="x must have dtype float32 or float16, not "
                       "float64"):
        nk.batch_norm_moments(x.astype(np.float64))


def test_library_errors_name_the_f16_kernel():
    """float16 arrays reach the _f16 kernels, which name themselves in their errors."""
    x, c = halves((2, 3, 4), 14), np.ones(3, np.float32)
    with pytest.raises(nk.NormKernelsError, match="nk_batchnorm_forward_training_f16.*"
                       "eps"):
        nk.batch_norm(x, None, None, training=True, eps=-1.0)
    with pytest.raises(nk.NormKernelsError, match="nk_batchnorm_forward_inference_f16"):
        nk.batch_norm(x, c, c, eps=-1.0)
    with pytest.raises(nk.NormKernelsError, match="nk_batchnorm_backward_f16"):
        nk.batch_norm_backward(x, x, c, c, out=x)  # dx may be dy only
    with pytest.raises(nk.NormKernelsError, match="nk_batchnorm_backward_apply_f16"):
        nk.batch_norm_backward_apply(x, x, c, c, 7, c, c)  # fewer than 8
    with pytest.raises(nk.NormKernelsError, match="nk_groupnorm_forward_f16.*eps"):
        nk.group_norm(x, 3, eps=-1.0)
    s = np.ones((2, 3), np.float32)
    with pytest.raises(nk.NormKernelsError, match="nk_groupnorm_backward_f16"):
        nk.group_norm_backward(x, x, s, s, 3, out=x)
