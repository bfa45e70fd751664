# SPDX-License-Identifier: Apache-2.0
"""GroupNorm and InstanceNorm through the binding: group_norm and group_norm_backward
against the float64 reference within design.md's bound, in both layouts, with one
group, some and one per channel; instance_norm as group_norm with C groups; options,
empty tensors and every argument check."""
import numpy as np
import pytest

import normkernels as nk
from reference import data, gn_backward_reference, gn_reference, gn_stat_bounds

# (shape as (N, C, *spatial), groups): one group, some, one per channel; odd sizes,
# a set of one value ((3, 6) with 6 groups), a long set.
CASES = [((2, 6, 5), 1), ((2, 6, 5), 3), ((2, 6, 5), 6), ((3, 12, 7, 5), 4),
         ((1, 9, 3, 3, 2), 3), ((4, 30, 17), 10), ((3, 6), 2), ((3, 6), 6),
         ((2, 4, 2053), 2), ((5, 7, 3, 1), 7)]


def laid_out(shape, channels_last):
    """shape (N, C, *spatial) as x's shape: (N, *spatial, C) with channels_last."""
    return (shape[0],) + shape[2:] + (shape[1],) if channels_last else shape


class Case:
    """A forward on random data in one layout, its saved statistics, and a gradient dy
    of its y."""

    def __init__(self, shape, groups, channels_last=False, seed=0, offset=2.0):
        self.groups, self.channels_last = groups, channels_last
        shape = laid_out(shape, channels_last)
        self.x, self.dy = data(shape, seed, offset), data(shape, seed + 1)
        c = shape[-1] if channels_last else shape[1]
        self.gamma, self.beta = data((c,), seed + 2), data((c,), seed + 3)
        self.y, self.mean, self.rstd = self.forward(return_stats=True)

    def forward(self, **kw):
        kw.setdefault("gamma", self.gamma)
        kw.setdefault("beta", self.beta)
        return nk.group_norm(self.x, self.groups, channels_last=self.channels_last, **kw)

    def grads(self, **kw):
        kw.setdefault("gamma", self.gamma)
        return nk.group_norm_backward(self.dy, self.x, self.mean, self.rstd, self.groups,
                                      channels_last=self.channels_last, **kw)

    def reference(self):
        return gn_reference(self.x, self.groups, self.gamma, self.beta,
                            channels_last=self.channels_last)

    def backward_reference(self):
        return gn_backward_reference(self.dy, self.x, self.mean, self.rstd, self.groups,
                                     self.gamma, self.channels_last)


def within(got, want, bound):
    return np.all(np.abs(got - want) <= bound)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("shape, groups", CASES)
def test_forward_matches_reference(each_isa, shape, groups, channels_last):
    case = Case(shape, groups, channels_last)
    want, want_mean, want_rstd, bound = case.reference()
    assert case.y.shape == case.x.shape and case.y.dtype == np.float32
    assert case.mean.shape == case.rstd.shape == (shape[0], groups)
    assert within(case.y, want, bound)
    mean_bound, rstd_bound = gn_stat_bounds(case.x, groups, want_rstd, channels_last)
    assert within(case.mean, want_mean, mean_bound)
    assert within(case.rstd, want_rstd, rstd_bound)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("shape, groups", CASES)
def test_backward_matches_reference(each_isa, shape, groups, channels_last):
    case = Case(shape, groups, channels_last, seed=4)
    dx, dgamma, dbeta = case.grads()
    want_dx, want_dgamma, want_dbeta, *bounds = case.backward_reference()
    assert dx.shape == case.x.shape and dx.dtype == np.float32 and dx.flags.c_contiguous
    assert within(dx, want_dx, bounds[0])
    assert within(dgamma, want_dgamma, bounds[1])
    assert within(dbeta, want_dbeta, bounds[2])


@pytest.mark.parametrize("channels_last", [False, True])
def test_ill_conditioned_sets_within_the_bound(channels_last):
    """1e3 + N(0, 1): the bound grows with M r, the condition number; y and dx within
    it."""
    case = Case((3, 8, 9, 7), 2, channels_last, seed=6, offset=1e3)
    want, _, _, bound = case.reference()
    assert within(case.y, want, bound)
    dx, dgamma, dbeta = case.grads()
    want_dx, want_dgamma, want_dbeta, *bounds = case.backward_reference()
    assert within(dx, want_dx, bounds[0]) and within(dgamma, want_dgamma, bounds[1])


@pytest.mark.parametrize("channels_last", [False, True])
def test_instance_norm_is_group_norm_with_a_group_per_channel(channels_last):
    case = Case((3, 5, 4, 6), 5, channels_last, seed=8)
    got = nk.instance_norm(case.x, case.gamma, case.beta, channels_last=channels_last,
                           return_stats=True)
    for a, b in zip(got, (case.y, case.mean, case.rstd)):
        np.testing.assert_array_equal(a, b)
    grads = nk.instance_norm_backward(case.dy, case.x, case.mean, case.rstd, case.gamma,
                                      channels_last)
    for a, b in zip(grads, case.grads()):
        np.testing.assert_array_equal(a, b)


def test_options_give_the_same_bits():
    """gamma / beta None are ones / zeros; weight= / bias= are gamma / beta; out=x and
    out=dy work in place; param_grads=False leaves dx as it was."""
    case = Case((4, 6, 3, 5), 2, seed=12)
    c = case.gamma.size
    ones, zeros = np.ones(c, np.float32), np.zeros(c, np.float32)
    np.testing.assert_array_equal(case.forward(gamma=None, beta=None),
                                  case.forward(gamma=ones, beta=zeros))
    np.testing.assert_array_equal(
        nk.group_norm(case.x, 2, weight=case.gamma, bias=case.beta), case.y)
    x = case.x.copy()
    assert nk.group_norm(x, 2, case.gamma, case.beta, out=x) is x
    np.testing.assert_array_equal(x, case.y)
    dx, dgamma, dbeta = case.grads()
    for a, b in zip(case.grads(gamma=None), case.grads(gamma=ones)):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(case.grads(gamma=None, weight=case.gamma), (dx, dgamma, dbeta)):
        np.testing.assert_array_equal(a, b)
    no_params = case.grads(param_grads=False)
    assert no_params[1:] == (None, None)
    np.testing.assert_array_equal(no_params[0], dx)
    dy = case.dy.copy()
    assert nk.group_norm_backward(dy, case.x, case.mean, case.rstd, 2, case.gamma,
                                  out=dy)[0] is dy
    np.testing.assert_array_equal(dy, dx)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("shape", [(0, 4, 3), (2, 4, 0), (2, 0, 3), (0, 4)])
def test_empty_tensors(shape, channels_last):
    """As PyTorch: empty y and dx; dgamma and dbeta 0, the sums over no value; mean and
    rstd (N, groups) NaN, the statistics of no value. InstanceNorm of no channel too."""
    shape = laid_out(shape, channels_last)
    x = np.empty(shape, np.float32)
    c = shape[-1] if channels_last else shape[1]
    groups = 2 if c else 1
    y, mean, rstd = nk.group_norm(x, groups, data((c,), 1), data((c,), 2),
                                  channels_last=channels_last, return_stats=True)
    assert y.shape == shape and mean.shape == rstd.shape == (shape[0], groups)
    assert np.all(np.isnan(mean)) and np.all(np.isnan(rstd))
    dx, dgamma, dbeta = nk.group_norm_backward(x, x, mean, rstd, groups, data((c,), 3),
                                               channels_last)
    assert dx.shape == shape
    np.testing.assert_array_equal(dgamma, np.zeros(c, np.float32))
    np.testing.assert_array_equal(dbeta, np.zeros(c, np.float32))
    y, mean, rstd = nk.instance_norm(x, channels_last=channels_last, return_stats=True)
    assert y.shape == shape and mean.shape == (shape[0], c)
    dx, dgamma, _ = nk.instance_norm_backward(x, x, mean, rstd,
                                              channels_last=channels_last)
    assert dx.shape == shape and dgamma.shape == (c,) and not np.any(dgamma)


def test_matches_torch_group_norm():
    """PyTorch's own GroupNorm in float64: y within the bound; its backward kernel from
    the same saved statistics within the bound."""
    torch = pytest.importorskip("torch")
    case = Case((3, 8, 6, 5), 4, seed=14)
    want, _, _, bound = case.reference()
    x, dy, gamma, beta, mean, rstd = (torch.from_numpy(a.astype(np.float64)) for a in (
        case.x, case.dy, case.gamma, case.beta, case.mean, case.rstd))
    theirs = torch.nn.functional.group_norm(x, 4, gamma, beta).numpy()
    assert within(case.y, theirs, bound * (1 + 2.0 ** -20))
    grads = torch.ops.aten.native_group_norm_backward(dy, x, mean, rstd, gamma, 3, 8, 30,
                                                      4, [True, True, True])
    for got, theirs, bound in zip(case.grads(), grads, case.backward_reference()[3:]):
        assert within(got, theirs.numpy(), bound)


def test_wrong_arguments_raise_clear_errors():
    case = Case((2, 6, 4), 3, seed=16)
    x, dy, mean, rstd = case.x, case.dy, case.mean, case.rstd
    with pytest.raises(ValueError, match="groups = 4 does not divide the 6 channels of "
                       "x"):
        nk.group_norm(x, 4)
    with pytest.raises(ValueError, match="groups = 4 does not divide the 6 channels"):
        nk.group_norm_backward(dy, x, mean, rstd, 4)
    with pytest.raises(ValueError, match="groups = 0; it must be at least 1"):
        nk.group_norm(x, 0)
    with pytest.raises(ValueError, match="groups = -3; it must be at least 1"):
        nk.group_norm(x, -3)
    with pytest.raises(TypeError, match="groups must be an integer, not float"):
        nk.group_norm(x, 3.0)
    with pytest.raises(TypeError, match="groups must be an integer, not NoneType"):
        nk.group_norm(x, None)
    with pytest.raises(ValueError, match=r"gamma has shape \(3,\); expected \(6,\)"):
        nk.group_norm(x, 3, np.ones(3, np.float32))
    with pytest.raises(ValueError, match=r"beta has shape \(4,\); expected \(6,\)"):
        nk.group_norm(np.moveaxis(x, 1, -1).copy(), 3, beta=np.ones(4, np.float32),
                      channels_last=True)
    with pytest.raises(TypeError, match="x must have dtype float32 or float16, not "
                       "float64"):
        nk.group_norm(x.astype(np.float64), 3)
    with pytest.raises(ValueError, match="x must have at least 2 dimensions"):
        nk.instance_norm(x[0, 0])
    with pytest.raises(ValueError, match="x must be C-contiguous; it is channels_last"):
        nk.group_norm(np.moveaxis(np.moveaxis(x, 1, -1).copy(), -1, 1), 3)
    read_only = x.copy()
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="out is read-only"):
        nk.group_norm(x, 3, out=read_only)
    with pytest.raises(TypeError, match="got both gamma and weight"):
        nk.group_norm(x, 3, case.gamma, weight=case.gamma)
    with pytest.raises(TypeError, match="dy is required: the gradient of the forward's"):
        nk.group_norm_backward(None, x, mean, rstd, 3)
    with pytest.raises(TypeError, match=r"rstd is required: the forward's saved "
                       r"statistic \(return_stats=True\)"):
        nk.group_norm_backward(dy, x, mean, None, 3)
    with pytest.raises(ValueError, match=r"mean has shape \(2, 3\); expected \(2, 6\)"):
        nk.instance_norm_backward(dy, x, mean, rstd)
    with pytest.raises(ValueError, match=r"rstd has shape \(6,\); expected \(2, 3\)"):
        nk.group_norm_backward(dy, x, mean, rstd.ravel().copy(), 3)
    with pytest.raises(ValueError, match=r"dy has shape \(2, 6, 3\); expected"):
        nk.group_norm_backward(dy[..., :3].copy(), x, mean, rstd, 3)
    with pytest.raises(TypeError, match="param_grads must be a bool, not int"):
        nk.group_norm_backward(dy, x, mean, rstd, 3, param_grads=1)


def test_library_errors_name_the_function():
    case = Case((2, 6, 4), 3, seed=18)
    with pytest.raises(nk.NormKernelsError, match="nk_groupnorm_forward_f32.*eps") as e:
        nk.group_norm(case.x, 3, eps=-1.0)
    assert e.value.status == 3
    with pytest.raises(nk.NormKernelsError, match="nk_groupnorm_backward_f32") as e:
        case.grads(out=case.x)  # dx may be dy only
    assert e.value.status == 4
