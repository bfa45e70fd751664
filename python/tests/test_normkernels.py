# SPDX-License-Identifier: Apache-2.0
"""The Python binding against a float64 NumPy reference (within the design.md bound),
against PyTorch when it imports, and on every error path."""
import numpy as np
import pytest

import normkernels as nk
from reference import (U, bn_inference_reference, bn_reference, data, reference,
                       stat_bounds, var_bound)


@pytest.mark.parametrize("shape", [(1,), (7, 3), (2, 4, 33), (5, 768), (3, 4099)])
def test_layer_norm_matches_reference(each_isa, shape):
    x = data(shape, 1, offset=3.0)
    gamma, beta = data(shape[-1:], 2), data(shape[-1:], 3)
    y, mean, rstd = nk.layer_norm(x, gamma, beta, eps=1e-5, return_stats=True)
    want, want_mean, want_rstd, bound = reference(x, gamma=gamma, beta=beta)
    assert y.shape == x.shape and y.dtype == np.float32
    assert np.all(np.abs(y - want) <= bound)
    assert mean.shape == shape[:-1] and rstd.shape == shape[:-1]
    mean_bound, rstd_bound = stat_bounds(x, want_rstd)
    assert np.all(np.abs(mean - want_mean) <= mean_bound)
    assert np.all(np.abs(rstd - want_rstd) <= rstd_bound)


@pytest.mark.parametrize("shape", [(4, 16), (3, 1000)])
def test_rms_norm_matches_reference(each_isa, shape):
    x, gamma = data(shape, 4), data(shape[-1:], 5)
    y, rrms = nk.rms_norm(x, gamma, return_stats=True)
    want, _, want_r, bound = reference(x, gamma=gamma, center=False)
    assert np.all(np.abs(y - want) <= bound)
    assert np.all(np.abs(rrms - want_r) <= stat_bounds(x, want_r)[1])


@pytest.mark.parametrize("center", [True, False])
def test_fused_add_forms(center):
    x, res = data((6, 130), 6), data((6, 130), 7)
    gamma, beta = data((130,), 8), data((130,), 9)
    if center:
        y, s = nk.add_layer_norm(x, res, gamma, beta)
    else:
        y, s = nk.add_rms_norm(x, res, gamma)
    np.testing.assert_array_equal(s, x + res)
    want, _, _, bound = reference(x, res, gamma, beta if center else None, center=center)
    assert np.all(np.abs(y - want) <= bound)


@pytest.mark.parametrize("center", [True, False])
def test_fused_sum_out(center):
    """s into a given array: residual (the residual stream in place), x, or another."""
    x, res = data((5, 96), 20), data((5, 96), 21)
    gamma, beta = data((96,), 22), data((96,), 23)

    def call(x, res, **kw):
        if center:
            return nk.add_layer_norm(x, res, gamma, beta, **kw)
        return nk.add_rms_norm(x, res, gamma, **kw)

    want_y, want_s = call(x, res)
    other = np.empty_like(x)
    y, s = call(x, res, sum_out=other)
    assert s is other
    np.testing.assert_array_equal(s, want_s)
    np.testing.assert_array_equal(y, want_y)
    for into in ("residual", "x"):
        xi, ri = x.copy(), res.copy()
        target = ri if into == "residual" else xi
        y, s = call(xi, ri, sum_out=target)
        assert s is target
        np.testing.assert_array_equal(s, want_s)
        np.testing.assert_array_equal(y, want_y)
    with pytest.raises(ValueError, match="sum_out"):
        call(x, res, sum_out=np.empty((5, 95), np.float32))
    with pytest.raises(nk.NormKernelsError):  # s and y overlap without being equal
        buf = np.empty(5 * 96 + 1, np.float32)
        call(x, res, out=buf[1:].reshape(5, 96), sum_out=buf[:-1].reshape(5, 96))


def test_in_place_and_out():
    x = data((3, 64), 10)
    want = nk.layer_norm(x.copy())
    out = np.empty_like(x)
    assert nk.layer_norm(x, out=out) is out
    np.testing.assert_array_equal(out, want)
    assert nk.layer_norm(x, out=x) is x
    np.testing.assert_array_equal(x, want)


def test_read_only_and_offset_views():
    # Arrays reach the library by their buffer's address, or by ndarray.ctypes.data
    # where the buffer is refused (read-only): both give the first element's address.
    buf = data((4 * 97 + 3,), 16)
    x = buf[3:].reshape(4, 97)  # 12 bytes past the allocation's start
    gamma, beta = data((97,), 17), data((97,), 18)
    want = nk.layer_norm(x.copy(), gamma.copy(), beta.copy())
    np.testing.assert_array_equal(nk.layer_norm(x, gamma, beta), want)
    for a in (x, gamma, beta):
        a.flags.writeable = False
    np.testing.assert_array_equal(nk.layer_norm(x, gamma, beta), want)
    with pytest.raises(ValueError, match="read-only"):
        nk.layer_norm(x, gamma, beta, out=x)


def test_issue_example():
    y = nk.layer_norm(np.ones((2, 3), np.float32) + np.arange(3, dtype=np.float32))
    np.testing.assert_allclose(y, [[-1.2247, 0.0, 1.2247]] * 2, atol=5e-5)


def test_matches_torch():
    torch = pytest.importorskip("torch")
    x = data((8, 4, 300), 11, offset=2.0)
    gamma, beta = data((300,), 12), data((300,), 13)
    want, _, _, bound = reference(x, gamma=gamma, beta=beta)
    t = torch.nn.functional.layer_norm(torch.from_numpy(x), (300,),
                                       torch.from_numpy(gamma), torch.from_numpy(beta),
                                       1e-5).numpy()
    ours = nk.layer_norm(x, gamma, beta)
    # Both are approximations of the float64 result: ours within the bound, so the two
    # differ by at most the bound plus torch's own error.
    assert np.all(np.abs(ours - t) <= bound + np.abs(t - want))
    tr = torch.from_numpy(x)
    t_rms = (tr * torch.rsqrt(tr.pow(2).mean(-1, keepdim=True) + 1e-5)).numpy()
    want_rms, _, _, bound_rms = reference(x, center=False)
    assert np.all(np.abs(nk.rms_norm(x) - t_rms) <= bound_rms + np.abs(t_rms - want_rms))


def test_wrong_inputs_raise_clear_errors():
    x = data((2, 8), 14)
    with pytest.raises(TypeError, match="float32"):
        nk.layer_norm(x.astype(np.float64))
    with pytest.raises(TypeError, match="ndarray"):
        nk.layer_norm([[1.0, 2.0]])
    with pytest.raises(ValueError, match="not row-strided"):
        nk.layer_norm(np.asfortranarray(data((4, 5), 15)))
    with pytest.raises(ValueError, match="gamma has shape"):
        nk.layer_norm(x, gamma=np.ones(7, np.float32))
    with pytest.raises(ValueError, match="residual has shape"):
        nk.add_layer_norm(x, np.ones((2, 7), np.float32))
    for add in (nk.add_layer_norm, nk.add_rms_norm):  # not a plain norm and garbage
        with pytest.raises(TypeError, match="residual must be a numpy.ndarray, not "
                           "NoneType"):
            add(x, None)
    with pytest.raises(ValueError, match=r"normalized dimensions \(0,\) hold no element"):
        nk.layer_norm(np.ones((3, 0), np.float32))
    with pytest.raises(ValueError, match="out has shape"):
        nk.layer_norm(x, out=np.empty((8, 2), np.float32))
    with pytest.raises(nk.NormKernelsError, match="eps") as e:
        nk.layer_norm(x, eps=-1.0)
    assert e.value.status == 3


def test_isa_and_threads():
    isas = nk.available_isas()
    assert nk.isa() == isas[0]
    with pytest.raises(nk.NormKernelsError, match="not an instruction set") as e:
        nk.set_isa("bogus")
    assert e.value.status == 3
    with pytest.raises(nk.NormKernelsError) as e:
        nk.set_isa("AVX3_ZEN4")
    assert e.value.status == 5
    nk.set_num_threads(2)
    assert nk.num_threads() == 2
    nk.set_num_threads(0)
    with pytest.raises(nk.NormKernelsError, match="nk_set_num_threads"):
        nk.set_num_threads(-1)
    assert nk.version() == "0.1.0"


def test_readme_snippet_runs():
    """The README's Python example, executed as written."""
    import pathlib
    import re
    readme = pathlib.Path(__file__).resolve().parents[2] / "README.md"
    blocks = re.findall(r"```python\n(.*?)```", readme.read_text(), re.S)
    assert blocks, "README.md has no python block"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
    nk.set_isa(None)
    nk.set_num_threads(0)


# ---------------------------------------------------------------- BatchNorm

@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("shape", [(2, 3), (4, 3, 5, 7), (2, 17, 111), (3, 8, 4, 4, 2)])
def test_batch_norm_training_matches_reference(each_isa, shape, channels_last):
    x = data(shape, 5, offset=2.0)
    c = shape[-1] if channels_last else shape[1]
    gamma, beta = data((c,), 6), data((c,), 7)
    rm, rv = np.zeros(c, np.float32), np.ones(c, np.float32)
    y, save_mean, save_rstd = nk.batch_norm(x, rm, rv, gamma, beta, training=True,
                                            momentum=0.1, channels_last=channels_last,
                                            return_stats=True)
    want, mean, var, count, bound = bn_reference(x, gamma, beta, 1e-5, channels_last)
    assert np.all(np.abs(y - want) <= bound)
    mean_bound, rstd_bound = stat_bounds(np.moveaxis(x, -1 if channels_last else 1, 0)
                                         .reshape(c, -1), 1 / np.sqrt(var + 1e-5))
    assert np.all(np.abs(save_mean - mean) <= mean_bound)
    assert np.all(np.abs(save_rstd - 1 / np.sqrt(var + 1e-5)) <= rstd_bound)
    want_rm, want_rv = 0.1 * mean, 0.9 + 0.1 * var * count / (count - 1)
    assert np.all(np.abs(rm - want_rm) <= 0.1 * mean_bound + 2 * U * np.abs(want_rm))
    assert np.all(np.abs(rv - want_rv) <= 0.1 * var_bound(x, var, 1e-5, channels_last)
                  * count / (count - 1) + 2 * U * np.abs(want_rv))


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("shape", [(2, 3), (4, 3, 5, 7), (2, 17, 111)])
def test_batch_norm_inference_matches_reference(each_isa, shape, channels_last):
    x = data(shape, 15, offset=1.0)
    c = shape[-1] if channels_last else shape[1]
    gamma, beta = data((c,), 16), data((c,), 17)
    mean, var = data((c,), 18), np.abs(data((c,), 19)) + 0.25
    y = nk.batch_norm(x, mean, var, gamma, beta, eps=1e-3, channels_last=channels_last)
    want, bound = bn_inference_reference(x, mean, var, gamma, beta, 1e-3, channels_last)
    assert np.all(np.abs(y - want) <= bound)


def test_batch_norm_matches_torch():
    torch = pytest.importorskip("torch")
    x = data((4, 6, 9, 5), 8, offset=1.0)
    gamma, beta = data((6,), 9), data((6,), 10)
    rm, rv = data((6,), 11), np.abs(data((6,), 12)) + 0.5
    trm, trv = torch.from_numpy(rm.copy()), torch.from_numpy(rv.copy())
    want = torch.nn.functional.batch_norm(torch.from_numpy(x), trm, trv,
                                          torch.from_numpy(gamma), torch.from_numpy(beta),
                                          training=True, momentum=0.3, eps=1e-3).numpy()
    y = nk.batch_norm(x, rm, rv, gamma, beta, training=True, momentum=0.3, eps=1e-3)
    _, _, _, _, bound = bn_reference(x, gamma, beta, 1e-3, False)
    assert np.all(np.abs(y - want) <= 2 * bound)
    assert np.allclose(rm, trm.numpy(), rtol=1e-6, atol=1e-7)
    assert np.allclose(rv, trv.numpy(), rtol=1e-6)
    # Inference with the running statistics, channels last.
    xl = np.ascontiguousarray(np.moveaxis(x, 1, -1))
    want = torch.nn.functional.batch_norm(torch.from_numpy(x), trm, trv,
                                          torch.from_numpy(gamma), torch.from_numpy(beta),
                                          training=False, eps=1e-3).numpy()
    y = nk.batch_norm(xl, rm, rv, gamma, beta, eps=1e-3, channels_last=True)
    _, bound = bn_inference_reference(x, rm, rv, gamma, beta, 1e-3, False)
    assert np.all(np.abs(np.moveaxis(y, -1, 1) - want) <= 2 * bound)  # both sides round


def test_sync_batch_norm_shards_equal_the_whole_batch():
    x = data((6, 5, 7, 3), 13, offset=4.0)
    count, mean, m2 = nk.batch_norm_moments(x[:2])
    for shard in (x[2:3], x[3:6], x[6:]):  # the last shard is empty
        count, mean, m2 = nk.moments_merge(count, mean, m2, *nk.batch_norm_moments(
            np.ascontiguousarray(shard)))
    assert count == 6 * 7 * 3
    _, want_mean, want_var, _, _ = bn_reference(x, np.ones(5, np.float32),
                                                np.zeros(5, np.float32), 1e-5, False)
    mean_bound, _ = stat_bounds(np.moveaxis(x, 1, 0).reshape(5, -1), np.ones(5))
    assert np.all(np.abs(mean - want_mean) <= mean_bound)
    assert np.all(np.abs(m2 / count - want_var) <= var_bound(x, want_var, 0.0))
    rm, rv = np.zeros(5, np.float32), np.ones(5, np.float32)
    nk.batch_norm_update_running(count, mean, m2, 0.5, rm, rv)
    want_rv = 0.5 + 0.5 * m2.astype(np.float64) / (count - 1)  # in double, then rounded
    assert np.all(np.abs(rv - want_rv) <= U * np.abs(want_rv))
    assert np.all(rm == (0.5 * mean.astype(np.float64)).astype(np.float32))


def test_batch_norm_errors():
    x = data((2, 3, 4), 14)
    with pytest.raises(ValueError, match="running_mean and running_var"):
        nk.batch_norm(x)
    with pytest.raises(ValueError, match="running_mean has shape"):
        nk.batch_norm(x, np.zeros(4, np.float32), np.ones(3, np.float32))
    with pytest.raises(TypeError, match="float32"):
        nk.batch_norm(x.astype(np.float64), training=True)
    with pytest.raises(nk.NormKernelsError, match="more than 1 value per channel") as e:
        nk.batch_norm(data((1, 3, 1), 15), training=True)
    assert e.value.status == 2
    with pytest.raises(nk.NormKernelsError, match="momentum"):
        nk.batch_norm(x, training=True, momentum=2.0)
