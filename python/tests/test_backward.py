# SPDX-License-Identifier: Apache-2.0
"""The LayerNorm family's backward through the binding: against the float64 reference
within design.md's bound, from the statistics the forward saved; row-strided views,
normalized_shape, in place, empty batches and every argument check."""
import copy

import numpy as np
import pytest

import normkernels as nk
from reference import backward_reference, data

NAMES = ["layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm"]
GIVEN = object()  # an argument of Case.grads left as the case has it


class Case:
    """A forward of name on random data with its saved tensors, and a gradient dy of
    its y (dsum of its sum in the fused forms) to run the backward with."""

    def __init__(self, name, shape, seed=0, offset=3.0, normalized_shape=None):
        self.center = "layer" in name
        self.fused = name.startswith("add")
        norm = (shape[-1:] if normalized_shape is None
                else tuple(np.atleast_1d(normalized_shape)))
        self.x = data(shape, seed, offset)
        self.residual = data(shape, seed + 1) if self.fused else None
        self.gamma, self.beta = data(norm, seed + 2), data(norm, seed + 3)
        self.dy, self.dsum = data(shape, seed + 4), data(shape, seed + 5)
        self.kw = {"normalized_shape": normalized_shape}
        saved = getattr(nk, name)(
            *((self.x, self.residual) if self.fused else (self.x,)), gamma=self.gamma,
            **({"beta": self.beta} if self.center else {}), return_stats=True, **self.kw)
        self.rows = saved[1] if self.fused else self.x  # what the backward reads
        self.stats = saved[-2:] if self.center else (None, saved[-1])
        self.backward = getattr(nk, name + "_backward")

    def grads(self, dy=GIVEN, rows=GIVEN, gamma=GIVEN, dsum=GIVEN, **kw):
        """The backward's outputs, always as (dx, dgamma, dbeta)."""
        def given(value, name):
            return getattr(self, name) if value is GIVEN else value
        args = [given(dy, "dy"), given(rows, "rows")]
        args += [s for s in self.stats if s is not None] + [given(gamma, "gamma")]
        if self.fused:
            args.append(given(dsum, "dsum"))
        out = self.backward(*args, **dict(self.kw, **kw))
        return out if self.center else out + (None,)

    def reference(self):
        cols = self.gamma.size
        mean, r = self.stats
        return backward_reference(
            self.dy.reshape(-1, cols), self.rows.reshape(-1, cols),
            None if mean is None else mean.ravel(), r.ravel(), self.gamma.ravel(),
            self.dsum.reshape(-1, cols) if self.fused else None)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", [(1,), (7, 3), (2, 4, 33), (5, 768), (3, 4099),
                                   (300, 64)])
def test_backward_matches_reference(each_isa, name, shape):
    case = Case(name, shape)
    dx, dgamma, dbeta = case.grads()
    want_dx, want_dgamma, want_dbeta, dx_bound, dgamma_bound, dbeta_bound = \
        case.reference()
    assert dx.shape == shape and dx.dtype == np.float32 and dx.flags.c_contiguous
    assert dgamma.shape == shape[-1:] and dgamma.dtype == np.float32
    assert np.all(np.abs(dx.reshape(want_dx.shape) - want_dx) <= dx_bound)
    assert np.all(np.abs(dgamma - want_dgamma) <= dgamma_bound)
    if case.center:
        assert dbeta.shape == shape[-1:]
        assert np.all(np.abs(dbeta - want_dbeta) <= dbeta_bound)


@pytest.mark.parametrize("name", NAMES)
def test_options_give_the_same_bits(name):
    """gamma None is gamma of ones; param_grads=False leaves dx as it was; dsum None is
    dsum of zeros; weight= is gamma."""
    case = Case(name, (9, 40), 1)
    dx, dgamma, dbeta = case.grads()
    ones = np.ones_like(case.gamma)
    for a, b in zip(case.grads(gamma=None), case.grads(gamma=ones)):
        np.testing.assert_array_equal(a, b)
    assert case.grads(param_grads=False)[1:] == (None, None)
    np.testing.assert_array_equal(case.grads(param_grads=False)[0], dx)
    for a, b in zip(case.grads(gamma=None, weight=case.gamma), (dx, dgamma, dbeta)):
        np.testing.assert_array_equal(a, b)
    if case.fused:
        zeros = np.zeros_like(case.dsum)
        for a, b in zip(case.grads(dsum=None), case.grads(dsum=zeros)):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("given_out", [False, True])
def test_plain_calls_give_the_bits_of_the_checked_path(monkeypatch, name, dtype,
                                                       given_out):
    """The common call (C-contiguous arrays normalized over their last axis: the
    binding's short path) and the same call through every check (normalized_shape
    given) give the same bits, forward and backward; the short path is taken."""
    taken = []
    for short in ("_plain_forward", "_plain_backward"):
        def counted(*args, _f=getattr(nk, short)):
            result = _f(*args)
            taken.append(result is not None)
            return result
        monkeypatch.setattr(nk, short, counted)
    center, fused = "layer" in name, name.startswith("add")
    shape = (3, 5, 67)
    x, r, dy, dsum = (data(shape, seed).astype(dtype) for seed in range(4))
    gamma, beta = data(67, 4), data(67, 5)
    forward, backward = getattr(nk, name), getattr(nk, name + "_backward")
    runs = []
    for kw in ({}, {"normalized_shape": 67}):
        taken.clear()
        params = {"gamma": gamma, **({"beta": beta} if center else {})}
        outs = {"out": np.empty_like(x)} if given_out else {}
        saved = forward(*((x, r) if fused else (x,)), **params, **outs, return_stats=True,
                        **kw)
        rows = saved[1] if fused else x
        stats = saved[-2:] if center else saved[-1:]
        grads = backward(dy, rows, *stats, gamma, **({"dsum": dsum} if fused else {}),
                         **({"out": np.empty_like(x)} if given_out else {}), **kw)
        assert taken == ([True, True] if not kw else [])
        runs.append(tuple(saved) + tuple(grads))
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b, strict=True)


@pytest.mark.parametrize("name", NAMES)
def test_normalized_shape_and_torchs_statistics(name):
    """Several trailing dims as one row, as the forward; the statistics as the forward
    returns them or with trailing 1s (torch.native_layer_norm's)."""
    case = Case(name, (3, 5, 4, 6), 2, normalized_shape=(4, 6))
    dx, dgamma, dbeta = case.grads()
    assert dx.shape == (3, 5, 4, 6) and dgamma.shape == (4, 6)
    flat = copy.copy(case)  # the same rows as [15, 24]
    flat.kw = {}
    flat.dy, flat.dsum, flat.rows = (a.reshape(15, 24)
                                     for a in (case.dy, case.dsum, case.rows))
    flat.gamma = case.gamma.ravel()
    flat.stats = tuple(None if s is None else s.ravel() for s in case.stats)
    for a, b in zip(case.grads(), flat.grads()):
        if a is not None:
            np.testing.assert_array_equal(a.reshape(b.shape), b)
    case.stats = tuple(None if s is None else s.reshape(3, 5, 1, 1) for s in case.stats)
    for a, b in zip(case.grads(), (dx, dgamma, dbeta)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", NAMES)
def test_row_strided_views_give_the_bits_of_their_copies(each_isa, name):
    """x (sum), dy, dsum and out as q, k, v windows of fused [n, 3 * 64] buffers."""
    case = Case(name, (37, 64), 3)
    want = case.grads()
    rows, grads = data((37, 192), 4), data((37, 192), 5)
    rows[:, 64:128], grads[:, :64], grads[:, 128:] = case.rows, case.dy, case.dsum
    case.dsum = grads[:, 128:]
    sink = np.full((37, 2, 64), np.nan, np.float32)
    got = case.grads(dy=grads[:, :64], rows=rows[:, 64:128], out=sink[:, 1])
    assert got[0].base is sink
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    assert np.all(np.isnan(sink[:, 0]))
    # In place, where dy (or dsum) lies in its buffer; the other columns unchanged.
    for at in (0, 128) if case.fused else (0,):
        buf = grads.copy()
        case.dsum = buf[:, 128:]
        window = buf[:, at:at + 64]
        assert case.grads(dy=buf[:, :64], rows=rows[:, 64:128], out=window)[0] is window
        np.testing.assert_array_equal(window, want[0])
        window[:] = grads[:, at:at + 64]
        np.testing.assert_array_equal(buf, grads)


def test_in_place_on_contiguous_arrays():
    case = Case("add_layer_norm", (6, 50), 6)
    want = case.grads()
    dy, case.dsum = case.dy.copy(), case.dsum.copy()
    assert case.grads(dy=dy, out=dy)[0] is dy
    np.testing.assert_array_equal(dy, want[0])
    dsum = case.dsum
    assert case.grads(out=dsum)[0] is dsum
    np.testing.assert_array_equal(dsum, want[0])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", [(0, 8), (2, 0, 8)])
def test_empty_batch_gives_zero_parameter_gradients(name, shape):
    """As PyTorch: an empty dx, and dgamma / dbeta of 0, the sums over no row."""
    dx, dgamma, dbeta = Case(name, shape).grads()
    assert dx.shape == shape
    np.testing.assert_array_equal(dgamma, np.zeros(8, np.float32))
    if "layer" in name:
        np.testing.assert_array_equal(dbeta, np.zeros(8, np.float32))


def test_matches_torch_native_layer_norm_backward():
    """PyTorch's own LayerNorm backward kernel, in float64 from the same saved
    statistics: within the bound."""
    torch = pytest.importorskip("torch")
    case = Case("layer_norm", (4, 6, 300), 7)
    mean, rstd = (torch.from_numpy(s.astype(np.float64)) for s in case.stats)
    want = torch.ops.aten.native_layer_norm_backward(
        *(torch.from_numpy(a.astype(np.float64)) for a in (case.dy, case.x)), [300],
        mean.unsqueeze(-1), rstd.unsqueeze(-1),
        *(torch.from_numpy(a.astype(np.float64)) for a in (case.gamma, case.beta)),
        [True, True, True])
    bounds = case.reference()[3:]
    for got, theirs, bound in zip(case.grads(), want, bounds):
        assert np.all(np.abs(got - theirs.numpy().reshape(got.shape))
                      <= bound.reshape(got.shape))


def test_wrong_arguments_raise_clear_errors():
    case = Case("layer_norm", (2, 8), 8)
    fused = Case("add_rms_norm", (2, 8), 9)
    mean, rstd = case.stats
    with pytest.raises(TypeError, match=r"dy must have dtype float32 \(x's: dy, x, dsum "
                       r"and out have one dtype\), not float64"):
        case.grads(dy=case.dy.astype(np.float64))
    with pytest.raises(TypeError, match="x must be a numpy.ndarray, not list"):
        case.grads(rows=case.x.tolist())
    with pytest.raises(ValueError, match=r"dy has shape \(2, 7\); expected \(2, 8\)"):
        case.grads(dy=case.dy[:, :7].copy())
    with pytest.raises(ValueError, match=r"dsum has shape \(8,\); expected \(2, 8\)"):
        fused.grads(dsum=fused.dsum[0])
    with pytest.raises(ValueError, match=r"normalized_shape \(4,\) does not match sum's "
                       "trailing dimensions"):
        fused.grads(normalized_shape=4)
    with pytest.raises(ValueError, match=r"gamma has shape \(7,\); expected \(8,\)"):
        case.grads(gamma=np.ones(7, np.float32))
    with pytest.raises(ValueError, match=r"rstd has shape \(3,\); expected \(2,\), one "
                       r"value per row \(or \(2, 1\), as torch.native_layer_norm"):
        nk.layer_norm_backward(case.dy, case.x, mean, np.ones(3, np.float32))
    with pytest.raises(ValueError, match=r"rrms has shape \(1, 2\)"):
        nk.rms_norm_backward(case.dy, case.x, np.ones((1, 2), np.float32))
    with pytest.raises(TypeError, match="mean is required: the forward's saved"):
        nk.layer_norm_backward(case.dy, case.x, None, rstd)
    with pytest.raises(TypeError, match="rrms is required"):
        nk.add_rms_norm_backward(case.dy, case.x, None)
    with pytest.raises(TypeError, match="dy is required"):
        nk.layer_norm_backward(None, case.x, mean, rstd)
    with pytest.raises(ValueError, match="mean must be C-contiguous"):
        nk.layer_norm_backward(case.dy, case.x, np.ones((2, 2), np.float32)[:, 0], rstd)
    with pytest.raises(ValueError, match=r"^dy \(shape .*\) is not row-strided"):
        case.grads(dy=np.asfortranarray(case.dy))
    with pytest.raises(ValueError, match=r"^out .* is not row-strided: .*; give a "
                       "C-contiguous array, or None for a new one"):
        case.grads(out=np.empty((8, 2), np.float32).T)
    with pytest.raises(ValueError, match="out is read-only"):
        case.grads(out=np.broadcast_to(case.dy[0], (2, 8)))
    with pytest.raises(TypeError, match="got both gamma and weight"):
        case.grads(weight=case.gamma)
    with pytest.raises(TypeError, match="param_grads must be a bool, not str"):
        case.grads(param_grads="dgamma")
    with pytest.raises(TypeError, match="bias"):
        nk.layer_norm_backward(case.dy, case.x, mean, rstd, bias=case.beta)
    with pytest.raises(ValueError, match=r"normalized dimensions \(0,\) hold no element"):
        nk.rms_norm_backward(np.ones((3, 0), np.float32), np.ones((3, 0), np.float32),
                             np.ones(3, np.float32))


def test_overlap_is_the_librarys_error():
    case = Case("layer_norm", (4, 64), 10)
    buf = np.concatenate([case.dy, case.dy], axis=1)
    with pytest.raises(nk.NormKernelsError, match="overlap") as e:
        case.grads(dy=buf[:, :64], out=buf[:, 32:96])
    assert e.value.status == 4
    with pytest.raises(nk.NormKernelsError, match="nk_layernorm_backward_f32") as e:
        case.grads(out=case.x)  # dx may be dy only
    assert e.value.status == 4
