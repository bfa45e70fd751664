# SPDX-License-Identifier: Apache-2.0
"""The LayerNorm family on float16 arrays. Forwards: y against the float64 reference
on the widened input (the fused forms: on the rounded sum) rounded once to float16,
equal except within design.md's bound of a rounding midpoint; the statistics the f32
forwards' on the widened input, bitwise; the sum x + residual rounded once. Backwards:
dx the f32 backward's on the widened arrays rounded once (NumPy's float32 -> float16
rounds to nearest even), dgamma and dbeta its bits. Views and in place; mixed dtypes,
and what float16 is refused by (the functions without a tensor)."""
import numpy as np
import pytest

import normkernels as nk
from reference import assert_rounded, data, reference, round_half

NAMES = ["layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm"]
F16 = np.float16


def call(name, x, residual, gamma, beta, **kw):
    """name's function of the binding over the last axis."""
    params = (gamma, beta) if "layer" in name else (gamma,)
    inputs = (x, residual) if name.startswith("add") else (x,)
    return getattr(nk, name)(*inputs, *params, **kw)


def halves(shape, seed, offset=0.0):
    return data(shape, seed, offset).astype(F16)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", [(1,), (7, 3), (2, 4, 33), (5, 768), (3, 4099)])
def test_float16_is_the_rounded_reference(each_isa, name, shape):
    center, fused = "layer" in name, name.startswith("add")
    x = halves(shape, 1, offset=3.0)
    residual = halves(shape, 2) if fused else None
    gamma, beta = data(shape[-1:], 3), data(shape[-1:], 4)
    out = call(name, x, residual, gamma, beta, return_stats=True)
    y, stats = out[0], out[2 if fused else 1:]
    assert y.dtype == F16 and y.shape == shape
    assert all(v.dtype == np.float32 and v.shape == shape[:-1] for v in stats)
    s = x
    if fused:
        s = out[1]
        assert s.dtype == F16
        exact = x.astype(np.float64) + residual.astype(np.float64)
        np.testing.assert_array_equal(s, round_half(exact, "f16"))
    s32 = s.astype(np.float32)  # exact
    want, _, _, bound = reference(s32, gamma=gamma, beta=beta if center else None,
                                  center=center)
    exact_share = assert_rounded(y, want, bound, "f16")
    assert exact_share > 0.8 or x.size < 64  # a few values may all be near midpoints
    f32 = call(name.removeprefix("add_"), s32, None, gamma, beta, return_stats=True)
    for got, expected in zip(stats, f32[1:]):
        np.testing.assert_array_equal(got, expected)


def test_rounding_reference_is_numpys_float16():
    """round_half against NumPy's float64 -> float16 conversion (correctly rounded), on
    every float16 value, the midpoints to the next and values just beside them."""
    values = np.arange(2 ** 16, dtype=np.uint16).view(F16)
    values = values[np.isfinite(values)].astype(np.float64)
    values.sort()
    mid = (values[:-1] + values[1:]) / 2
    probes = np.concatenate([values, mid, mid * (1 + 2.0 ** -40), mid * (1 - 2.0 ** -40),
                             [65519.99, 65520.0, 1e6, 2.0 ** -25, 2.0 ** -26]])
    with np.errstate(over="ignore"):  # 65520 and beyond: inf
        for v in (probes, -probes):
            np.testing.assert_array_equal(round_half(v, "f16"), v.astype(F16))


@pytest.mark.parametrize("name", NAMES)
def test_float16_views_and_in_place(each_isa, name):
    """Row-strided float16 views (strides of 2-byte elements) give the contiguous
    call's bits, writing nothing between rows; the sum into residual in place."""
    fused = name.startswith("add")
    gamma, beta = data((64,), 3), data((64,), 4)
    x = halves((9, 200), 1)[:, 10:74]
    residual = halves((9, 150), 2)[:, 3:67] if fused else None
    want = call(name, x.copy(), None if residual is None else residual.copy(), gamma,
                beta, return_stats=True)
    out = np.full((9, 100), np.nan, F16)
    kw = {"sum_out": residual} if fused else {}
    got = call(name, x, residual, gamma, beta, out=out[:, 20:84], return_stats=True,
               **kw)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    assert got[0].base is out and np.isnan(out[:, :20]).all()
    assert np.isnan(out[:, 84:]).all()
    if fused:
        assert got[1] is residual
    y = call(name, x, residual if fused else None, gamma, beta, out=x)  # in place
    assert (y[0] if fused else y) is x


def test_mixed_dtypes_are_refused():
    x, x32 = halves((2, 8), 1), data((2, 8), 1)
    g16 = np.ones(8, F16)
    one_dtype = r"\(x's: x, residual, out and sum_out have one dtype\)"
    with pytest.raises(TypeError, match=rf"residual must have dtype float16 {one_dtype}, "
                       "not float32"):
        nk.add_layer_norm(x, x32)
    with pytest.raises(TypeError, match="residual must have dtype float32 .*not "
                       "float16"):
        nk.add_rms_norm(x32, x)
    with pytest.raises(TypeError, match=r"out must have dtype float16 .*not float32"):
        nk.layer_norm(x, out=x32)
    with pytest.raises(TypeError, match=r"sum_out must have dtype float16 .*not float32"):
        nk.add_rms_norm(x, x, sum_out=x32)
    with pytest.raises(TypeError, match=r"gamma must have dtype float32 \(gamma and beta "
                       r"are float32 with x of either dtype\), not float16"):
        nk.layer_norm(x, g16)
    with pytest.raises(TypeError, match="beta must have dtype float32"):
        nk.add_layer_norm(x, x, None, g16)
    with pytest.raises(TypeError, match="x must have dtype float32 or float16, not "
                       "float64"):
        nk.rms_norm(x.astype(np.float64))


def _float16_calls():
    """(name, call) of every function without a half form (they take no tensor), given
    a float16 array."""
    c = np.ones(3, np.float32)
    return [
        ("moments_merge", lambda: nk.moments_merge(1, c.astype(F16), c, 1, c, c)),
        ("batch_norm_update_running",
         lambda: nk.batch_norm_update_running(2, c, c, 0.1, c.astype(F16), c)),
    ]


@pytest.mark.parametrize("name, fn", _float16_calls(), ids=lambda v: v if isinstance(
    v, str) else "")
def test_functions_without_a_half_form_refuse_float16(name, fn):
    with pytest.raises(TypeError, match=rf"^{name}: \w+ is float16; it takes float32 "
                       r"arrays only \(moments, statistics and parameters are float32"):
        fn()


def test_every_function_without_a_half_form_is_checked():
    """Every function of the binding but these takes float16 tensors: the LayerNorm
    family's here, BatchNorm's and GroupNorm's in test_channelnorm_half."""
    halves_taken = set(NAMES) | {name + "_backward" for name in NAMES} | {
        "batch_norm", "batch_norm_moments", "batch_norm_backward",
        "batch_norm_backward_reduce", "batch_norm_backward_apply", "group_norm",
        "instance_norm", "group_norm_backward", "instance_norm_backward",
        "isa", "available_isas", "set_isa", "num_threads", "set_num_threads", "version",
        "NormKernelsError"}
    assert {name for name, _ in _float16_calls()} == set(nk.__all__) - halves_taken


def bits(a):
    """a's float16 or float32 bit patterns: equal only for the same values (-0 and 0
    apart, NaNs by payload)."""
    return a.view(np.uint16 if a.dtype == F16 else np.uint32)


def stats_of(name, x, gamma, beta):
    """The saved statistics of name's forward (unfused) on x, of x's dtype."""
    out = call(name.removeprefix("add_"), x, None, gamma, beta, return_stats=True)
    return out[1:]


def backward(name, dy, x, stats, gamma, dsum=None, **kw):
    """name's backward of the binding over the last axis."""
    if name.startswith("add"):
        kw["dsum"] = dsum
    return getattr(nk, name + "_backward")(dy, x, *stats, gamma, **kw)


def assert_f32_backward_rounded(got, name, dy, x, stats, gamma, dsum=None, **kw):
    """got, name's float16 backward, against the f32 backward on the widened arrays: dx
    rounded once to float16, dgamma (and dbeta) bitwise."""
    def wide(a):
        return None if a is None else a.astype(np.float32)
    want = backward(name, wide(dy), wide(x), stats, gamma, wide(dsum), **kw)
    assert got[0].dtype == F16 and got[0].shape == x.shape
    np.testing.assert_array_equal(bits(got[0]), bits(want[0].astype(F16)))
    for g, w in zip(got[1:], want[1:]):
        assert (g is None) == (w is None)
        if g is not None:
            assert g.dtype == np.float32
            np.testing.assert_array_equal(bits(g), bits(w))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", [(1,), (7, 3), (2, 4, 33), (5, 768), (3, 4099)])
def test_float16_backward_is_the_f32_rounded(each_isa, name, shape):
    fused = name.startswith("add")
    x = halves(shape, 1, offset=3.0)
    gamma, beta = data(shape[-1:], 3), data(shape[-1:], 4)
    stats = stats_of(name, x, gamma, beta)
    dy, dsum = halves(shape, 5), halves(shape, 6) if fused else None
    got = backward(name, dy, x, stats, gamma, dsum)
    assert_f32_backward_rounded(got, name, dy, x, stats, gamma, dsum)
    # without gamma (of ones), dsum or the parameters' gradients
    got = backward(name, dy, x, stats, None, param_grads=False)
    assert_f32_backward_rounded(got, name, dy, x, stats, None, param_grads=False)


def test_float16_backward_over_a_normalized_shape():
    x, dy = halves((3, 4, 5), 1), halves((3, 4, 5), 2)
    gamma = data((4, 5), 3)
    _, mean, rstd = nk.layer_norm(x, gamma, None, return_stats=True,
                                  normalized_shape=(4, 5))
    got = nk.layer_norm_backward(dy, x, mean, rstd, gamma, normalized_shape=(4, 5))
    want = nk.layer_norm_backward(dy.astype(np.float32), x.astype(np.float32), mean,
                                  rstd, gamma, normalized_shape=(4, 5))
    np.testing.assert_array_equal(bits(got[0]), bits(want[0].astype(F16)))
    np.testing.assert_array_equal(bits(got[1]), bits(want[1]))
    np.testing.assert_array_equal(bits(got[2]), bits(want[2]))


@pytest.mark.parametrize("name", NAMES)
def test_float16_backward_views_and_in_place(each_isa, name):
    """Row-strided float16 dy, x, dsum and out give the contiguous call's bits, writing
    nothing between out's rows; out=dy (and out=dsum) in place."""
    fused = name.startswith("add")
    gamma, beta = data((64,), 3), data((64,), 4)
    x = halves((9, 200), 1)[:, 10:74]
    stats = stats_of(name, x, gamma, beta)
    dy = halves((9, 130), 5)[:, 1:65]
    dsum = halves((9, 150), 6)[:, 3:67] if fused else None
    want = backward(name, dy.copy(), x.copy(), stats, gamma,
                    None if dsum is None else dsum.copy())
    assert_f32_backward_rounded(want, name, dy, x, stats, gamma, dsum)
    out = np.full((9, 100), np.nan, F16)
    got = backward(name, dy, x, stats, gamma, dsum, out=out[:, 20:84])
    for a, b in zip(got, want):
        np.testing.assert_array_equal(bits(a), bits(b))
    assert got[0].base is out and np.isnan(out[:, :20]).all()
    assert np.isnan(out[:, 84:]).all()
    for target in (dy, dsum) if fused else (dy,):
        original = target.copy()
        d = (dy, dsum) if target is dy else (dy.copy(), dsum)  # out=dsum: dy apart
        got = backward(name, d[0], x, stats, gamma, d[1], out=target)
        assert got[0] is target
        np.testing.assert_array_equal(bits(target), bits(want[0]))
        target[...] = original


def test_float16_backward_mixed_dtypes_are_refused():
    x, x32 = halves((2, 8), 1), data((2, 8), 1)
    s = np.ones(2, np.float32)
    one_dtype = r"\(x's: dy, x, dsum and out have one dtype\)"
    with pytest.raises(TypeError, match=rf"dy must have dtype float16 {one_dtype}, not "
                       "float32"):
        nk.layer_norm_backward(x32, x, s, s)
    with pytest.raises(TypeError, match="dy must have dtype float32 .*not float16"):
        nk.rms_norm_backward(x, x32, s)
    with pytest.raises(TypeError, match=r"out must have dtype float16 .*not float32"):
        nk.rms_norm_backward(x, x, s, out=x32)
    with pytest.raises(TypeError, match=r"dsum must have dtype float16 \(sum's: dy, "
                       r"sum, dsum and out have one dtype\), not float32"):
        nk.add_layer_norm_backward(x, x, s, s, dsum=x32)
    with pytest.raises(TypeError, match="dsum must have dtype float32 .*not float16"):
        nk.add_rms_norm_backward(x32, x32, s, dsum=x)
    with pytest.raises(TypeError, match=r"gamma must have dtype float32 \(gamma and beta "
                       r"are float32 with x of either dtype\), not float16"):
        nk.rms_norm_backward(x, x, s, np.ones(8, F16))
    with pytest.raises(TypeError, match=r"rstd must have dtype float32 \(the saved "
                       r"statistics are float32 with x of either dtype\), not float16"):
        nk.layer_norm_backward(x, x, s, s.astype(F16))
    with pytest.raises(TypeError, match="sum must have dtype float32 or float16, not "
                       "float64"):
        nk.add_rms_norm_backward(x, x.astype(np.float64), s)
