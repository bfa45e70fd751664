# SPDX-License-Identifier: Apache-2.0
"""BatchNorm's backward through the binding: batch_norm_backward against the float64
reference within design.md's bound, from the statistics the forward saved, in both
layouts; SyncBatchNorm's backward steps over shards; options, empty batches and every
argument check."""
import numpy as np
import pytest

import normkernels as nk
from reference import bn_backward_reference, data

SHAPES = [(2, 3), (4, 3, 5, 7), (2, 17, 111), (3, 8, 4, 4, 2), (64, 5)]


class Case:
    """A training forward on random data in one layout, its saved statistics, and a
    gradient dy of its y."""

    def __init__(self, shape, channels_last=False, seed=0):
        self.channels_last = channels_last
        self.x, self.dy = data(shape, seed, offset=2.0), data(shape, seed + 1)
        c = shape[-1] if channels_last else shape[1]
        self.gamma, self.beta = data((c,), seed + 2), data((c,), seed + 3)
        _, self.mean, self.rstd = nk.batch_norm(self.x, None, None, self.gamma, self.beta,
                                                True, channels_last=channels_last,
                                                return_stats=True)

    def grads(self, **kw):
        kw.setdefault("gamma", self.gamma)
        return nk.batch_norm_backward(self.dy, self.x, self.mean, self.rstd,
                                      channels_last=self.channels_last, **kw)

    def reference(self):
        return bn_backward_reference(self.dy, self.x, self.mean, self.rstd, self.gamma,
                                     self.channels_last)


def within(got, want, bound):
    return np.all(np.abs(got - want) <= bound)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_backward_matches_reference(each_isa, shape, channels_last):
    case = Case(shape, channels_last)
    dx, dgamma, dbeta = case.grads()
    want_dx, want_dgamma, want_dbeta, *bounds = case.reference()
    assert dx.shape == shape and dx.dtype == np.float32 and dx.flags.c_contiguous
    assert within(dx, want_dx, bounds[0])
    assert within(dgamma, want_dgamma, bounds[1])
    assert within(dbeta, want_dbeta, bounds[2])


@pytest.mark.parametrize("channels_last", [False, True])
def test_shards_reduced_and_applied_give_the_whole_batchs_gradients(channels_last):
    """SyncBatchNorm's backward over shards along N (one of them empty): the sums over
    the shards are the whole batch's dbeta and dgamma, and each shard's dx lies within
    the bound of the whole batch's reference. One shard gives the bits of
    batch_norm_backward."""
    case = Case((7, 6, 5, 3), channels_last, seed=4)
    dx, dgamma, dbeta = case.grads()
    whole = nk.batch_norm_backward_reduce(case.dy, case.x, case.mean, case.rstd,
                                          channels_last)
    np.testing.assert_array_equal(whole[0], dbeta)
    np.testing.assert_array_equal(whole[1], dgamma)
    count = case.x.size // case.gamma.size
    alone = nk.batch_norm_backward_apply(case.dy, case.x, case.mean, case.rstd, count,
                                         *whole, case.gamma, channels_last)
    np.testing.assert_array_equal(alone, dx)
    cuts = [0, 3, 3, 5, 7]
    shards = [(case.dy[a:b], case.x[a:b]) for a, b in zip(cuts, cuts[1:])]
    sums = [nk.batch_norm_backward_reduce(dy, x, case.mean, case.rstd, channels_last)
            for dy, x in shards]
    sum_dy, sum_dy_xhat = (np.sum([s[k] for s in sums], 0, dtype=np.float32)
                           for k in (0, 1))
    want_dx, want_dgamma, want_dbeta, *bounds = case.reference()
    assert within(sum_dy, want_dbeta, bounds[2]) and within(sum_dy_xhat, want_dgamma,
                                                            bounds[1])
    got = np.concatenate([nk.batch_norm_backward_apply(
        dy, x, case.mean, case.rstd, count, sum_dy, sum_dy_xhat,
        channels_last=channels_last, weight=case.gamma) for dy, x in shards])
    assert within(got, want_dx, bounds[0])


def test_options_give_the_same_bits():
    """gamma None is gamma of ones; param_grads=False leaves dx as it was; weight= is
    gamma; out=dy works in place."""
    case = Case((5, 4, 6), seed=8)
    dx, dgamma, dbeta = case.grads()
    ones = np.ones_like(case.gamma)
    for a, b in zip(case.grads(gamma=None), case.grads(gamma=ones)):
        np.testing.assert_array_equal(a, b)
    no_params = case.grads(param_grads=False)
    assert no_params[1:] == (None, None)
    np.testing.assert_array_equal(no_params[0], dx)
    for a, b in zip(case.grads(gamma=None, weight=case.gamma), (dx, dgamma, dbeta)):
        np.testing.assert_array_equal(a, b)
    dy = case.dy.copy()
    assert nk.batch_norm_backward(dy, case.x, case.mean, case.rstd, case.gamma,
                                  out=dy)[0] is dy
    np.testing.assert_array_equal(dy, dx)
    dy = case.dy.copy()
    assert nk.batch_norm_backward_apply(dy, case.x, case.mean, case.rstd, 30, dbeta,
                                        dgamma, case.gamma, out=dy) is dy
    np.testing.assert_array_equal(dy, dx)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("shape", [(0, 3, 4), (2, 3, 0), (0, 3)])
def test_empty_batch_gives_zero_parameter_gradients(shape, channels_last):
    """As PyTorch: an empty dx, and dgamma / dbeta of 0, the sums over no value; an
    empty shard's sums are 0 too."""
    x = np.empty(shape, np.float32)
    c = shape[-1] if channels_last else shape[1]
    stats = data((c,), 1), np.abs(data((c,), 2)) + 0.5
    dx, dgamma, dbeta = nk.batch_norm_backward(x, x, *stats, data((c,), 3),
                                               channels_last)
    assert dx.shape == shape
    np.testing.assert_array_equal(dgamma, np.zeros(c, np.float32))
    np.testing.assert_array_equal(dbeta, np.zeros(c, np.float32))
    for s in nk.batch_norm_backward_reduce(x, x, *stats, channels_last):
        np.testing.assert_array_equal(s, np.zeros(c, np.float32))
    # The values per channel (nonzero for no channel: c-abi.md checks the count
    # against n * spatial before the empty no-op).
    axis = len(shape) - 1 if channels_last else 1
    count = int(np.prod([d for i, d in enumerate(shape) if i != axis]))
    assert nk.batch_norm_backward_apply(x, x, *stats, count, *stats,
                                        channels_last=channels_last).shape == shape


def test_matches_torch_native_batch_norm_backward():
    """PyTorch's own BatchNorm backward kernel, in float64 from the same saved
    statistics: within the bound."""
    torch = pytest.importorskip("torch")
    case = Case((6, 5, 9, 7), seed=10)
    f64 = [torch.from_numpy(a.astype(np.float64))
           for a in (case.dy, case.x, case.gamma, case.mean, case.rstd)]
    dy, x, gamma, mean, rstd = f64
    want = torch.ops.aten.native_batch_norm_backward(
        dy, x, gamma, None, None, mean, rstd, True, 1e-5, [True, True, True])
    for got, theirs, bound in zip(case.grads(), want, case.reference()[3:]):
        assert within(got, theirs.numpy(), bound)


def test_wrong_arguments_raise_clear_errors():
    case = Case((2, 3, 4), seed=12)
    x, dy, mean, rstd = case.x, case.dy, case.mean, case.rstd
    with pytest.raises(TypeError, match="dy is required: the gradient of the forward's"):
        nk.batch_norm_backward(None, x, mean, rstd)
    with pytest.raises(TypeError, match=r"save_rstd is required: the forward's saved "
                       r"statistic \(return_stats=True\)"):
        nk.batch_norm_backward(dy, x, mean, None)
    with pytest.raises(TypeError, match=r"dy must have dtype float32 \(x's: dy, x and "
                       r"out have one dtype\), not float64"):
        nk.batch_norm_backward(dy.astype(np.float64), x, mean, rstd)
    with pytest.raises(ValueError, match=r"dy has shape \(2, 3, 3\); expected "
                       r"\(2, 3, 4\)"):
        nk.batch_norm_backward(dy[..., :3].copy(), x, mean, rstd)
    with pytest.raises(ValueError, match=r"save_mean has shape \(4,\); expected \(3,\)"):
        nk.batch_norm_backward(dy, x, np.zeros(4, np.float32), rstd)
    with pytest.raises(ValueError, match=r"gamma has shape \(4,\); expected \(3,\)"):
        nk.batch_norm_backward(dy, x, mean, rstd, np.ones(4, np.float32))
    with pytest.raises(ValueError, match=r"save_mean has shape \(3,\); expected \(4,\)"):
        nk.batch_norm_backward(dy, x, mean, rstd, channels_last=True)
    with pytest.raises(ValueError, match="dy must be C-contiguous"):
        nk.batch_norm_backward(np.asfortranarray(dy), x, mean, rstd)
    with pytest.raises(ValueError, match="x must be C-contiguous; it is channels_last"):
        nk.batch_norm_backward(dy, np.moveaxis(np.moveaxis(x, 1, -1).copy(), -1, 1),
                               mean, rstd)
    with pytest.raises(ValueError, match="x must have at least 2 dimensions"):
        nk.batch_norm_backward(dy[0, 0], x[0, 0], mean, rstd)
    read_only = dy.copy()
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="out is read-only"):
        nk.batch_norm_backward(dy, x, mean, rstd, out=read_only)
    with pytest.raises(TypeError, match="param_grads must be a bool, not str"):
        nk.batch_norm_backward(dy, x, mean, rstd, param_grads="dgamma")
    with pytest.raises(TypeError, match="got both gamma and weight"):
        nk.batch_norm_backward(dy, x, mean, rstd, case.gamma, weight=case.gamma)
    with pytest.raises(TypeError, match="rstd is required"):
        nk.batch_norm_backward_reduce(dy, x, mean, None)
    sums = nk.batch_norm_backward_reduce(dy, x, mean, rstd)
    with pytest.raises(TypeError, match="sum_dy_xhat is required: step 1's sums"):
        nk.batch_norm_backward_apply(dy, x, mean, rstd, 8, sums[0], None)
    with pytest.raises(ValueError, match=r"sum_dy has shape \(2,\); expected \(3,\)"):
        nk.batch_norm_backward_apply(dy, x, mean, rstd, 8, sums[0][:2].copy(), sums[1])
    with pytest.raises(OverflowError, match=r"total_count = -1 is out of range for "
                       "uint64_t"):
        nk.batch_norm_backward_apply(dy, x, mean, rstd, -1, *sums)
    with pytest.raises(TypeError, match="total_count must be an integer, not float"):
        nk.batch_norm_backward_apply(dy, x, mean, rstd, 8.0, *sums)


def test_library_errors_name_the_function():
    case = Case((2, 3, 4), seed=14)
    x, dy, mean, rstd = case.x, case.dy, case.mean, case.rstd
    sums = nk.batch_norm_backward_reduce(dy, x, mean, rstd)
    with pytest.raises(nk.NormKernelsError, match="nk_batchnorm_backward_apply_f32") as e:
        nk.batch_norm_backward_apply(dy, x, mean, rstd, 7, *sums)  # fewer than 8
    assert e.value.status == 2
    with pytest.raises(nk.NormKernelsError, match="nk_batchnorm_backward_f32") as e:
        nk.batch_norm_backward(dy, x, mean, rstd, out=x)  # dx may be dy only
    assert e.value.status == 4
