# SPDX-License-Identifier: Apache-2.0
"""Row-strided views in the LayerNorm family (x, residual, out, sum_out): read and
written in place through the C _strided forms, the same bits as their contiguous
copies; other layouts refused naming what to do."""
import numpy as np
import pytest

import normkernels as nk
from reference import data

g64, b64 = data((64,), 1), data((64,), 2)


def call(name, x, residual=None, **kw):
    """name's function with random gamma (and beta), returning every output."""
    if name == "layer_norm":
        return nk.layer_norm(x, g64, b64, return_stats=True, **kw)
    if name == "rms_norm":
        return nk.rms_norm(x, g64, return_stats=True, **kw)
    if name == "add_layer_norm":
        return nk.add_layer_norm(x, residual, g64, b64, return_stats=True, **kw)
    return nk.add_rms_norm(x, residual, g64, return_stats=True, **kw)


NAMES = ["layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm"]


def contiguous(a):
    return None if a is None else np.ascontiguousarray(a)


@pytest.mark.parametrize("name", NAMES)
def test_qkv_windows_give_the_bits_of_their_copies(each_isa, name):
    """q and k of a fused [n, 3 * 64] QKV buffer, normalized where they lie, into
    windows of other buffers; the columns around the windows are left alone."""
    qkv = data((37, 192), 3, offset=1.0)
    stream = data((37, 3, 64), 4)  # the residual: one of three interleaved streams
    fused = name.startswith("add")
    residual = stream[:, 1] if fused else None
    want = call(name, contiguous(qkv[:, :64]), contiguous(residual))
    got = call(name, qkv[:, :64], residual)
    for w, g in zip(want, got):
        assert g.flags.c_contiguous  # outputs the binding creates
        np.testing.assert_array_equal(g, w)
    # Into windows: out (and sum_out) at other columns of wider buffers.
    sink = np.full((37, 3, 64), np.nan, np.float32)
    kw = {"out": sink[:, 2], "sum_out": sink[:, 0]} if fused else {"out": sink[:, 2]}
    got = call(name, qkv[:, :64], residual, **kw)
    assert got[0] is kw["out"]
    np.testing.assert_array_equal(sink[:, 2], want[0])
    if fused:
        np.testing.assert_array_equal(sink[:, 0], want[1])
    assert np.all(np.isnan(sink[:, 1]))
    # In place in the buffer: q normalized where it lies, k and v unchanged.
    before = qkv.copy()
    call(name, qkv[:, :64], residual, out=qkv[:, :64])
    np.testing.assert_array_equal(qkv[:, :64], want[0])
    np.testing.assert_array_equal(qkv[:, 64:], before[:, 64:])


@pytest.mark.parametrize("name", ["add_layer_norm", "add_rms_norm"])
def test_residual_stream_window_updated_in_place(name):
    x, stream = data((9, 64), 5), data((9, 2, 64), 6)
    want = call(name, x, contiguous(stream[:, 0]))
    residual = stream[:, 0]
    got = call(name, x, residual, sum_out=residual)
    assert got[1] is residual
    np.testing.assert_array_equal(stream[:, 0], want[1])
    np.testing.assert_array_equal(got[0], want[0])


def test_one_head_and_normalized_shape_views():
    """One head of a [tokens, heads, dim] array; several trailing dims (a row's axes
    dense) under one stride; leading axes that collapse to one stride."""
    tokens = data((11, 4, 64), 7)
    np.testing.assert_array_equal(nk.layer_norm(tokens[:, 2], g64, b64),
                                  nk.layer_norm(contiguous(tokens[:, 2]), g64, b64))
    block = data((5, 6, 8), 8)[:, 1:5]  # normalized over (4, 8), rows 48 floats apart
    g, b = data((4, 8), 9), data((4, 8), 10)
    np.testing.assert_array_equal(
        nk.layer_norm(block, g, b, normalized_shape=(4, 8)),
        nk.layer_norm(contiguous(block), g, b, normalized_shape=(4, 8)))
    batch = data((3, 5, 100), 11)[:, :, 10:74]  # (3, 5) rows, 100 floats apart
    np.testing.assert_array_equal(nk.rms_norm(batch, g64),
                                  nk.rms_norm(contiguous(batch), g64))


def test_torch_slices():
    torch = pytest.importorskip("torch")
    qkv = torch.from_numpy(data((16, 192), 12))
    k = qkv[:, 64:128]
    want = torch.nn.functional.layer_norm(k, (64,), torch.from_numpy(g64),
                                          torch.from_numpy(b64))
    np.testing.assert_allclose(nk.layer_norm(k.numpy(), g64, b64), want.numpy(),
                               rtol=1e-5, atol=1e-5)


def test_other_layouts_are_refused():
    x = data((8, 128), 13)
    for view in (x[:, ::2], x.T[:64], x[::-1, :64], np.broadcast_to(x[0, :64], (8, 64)),
                 data((4, 3, 64), 14)[:, 1:3, :]):
        with pytest.raises(ValueError, match=r"^x \(shape .*, strides .*\) is not "
                           r"row-strided: .*numpy.ascontiguousarray\(x\) copies it"):
            nk.layer_norm(view, g64, b64)
    with pytest.raises(ValueError, match=r"^residual .* is not row-strided"):
        nk.add_layer_norm(x[:, :64], x[:, ::2])
    with pytest.raises(ValueError, match=r"^out .* is not row-strided: .*; give a "
                       "C-contiguous array, or None for a new one"):
        nk.layer_norm(x[:, :64], out=x[:, ::2])
    with pytest.raises(ValueError, match=r"^sum_out .* is not row-strided"):
        nk.add_rms_norm(x[:, :64], x[:, 64:], sum_out=x[:, ::2])
    with pytest.raises(ValueError, match="out is read-only"):
        nk.layer_norm(x[:, :64], out=np.broadcast_to(x[0, :64], (8, 64)))
    # A channels_last tensor's NCHW view: the message names its NHWC view.
    nchw = np.moveaxis(data((2, 5, 5, 3), 15), -1, 1)
    with pytest.raises(ValueError, match=r"numpy.moveaxis\(x, 1, -1\), a contiguous view "
                       r"of it \(no copy\), is normalized over C"):
        nk.layer_norm(nchw)


def test_overlapping_windows_are_the_librarys_error():
    """Windows of one buffer that share elements without being the same view."""
    buf = data((8, 192), 16)
    with pytest.raises(nk.NormKernelsError, match="overlap") as e:
        nk.layer_norm(buf[:, :64], out=buf[:, 32:96])
    assert e.value.status == 4
    # q and k windows of one stride interleave without sharing an element: accepted,
    # with the bits of contiguous copies
    x, r = buf[:, :64].copy(), buf[:, 64:128].copy()
    y, s = nk.add_layer_norm(buf[:, :64], buf[:, 64:128], sum_out=buf[:, 128:])
    y_ref, s_ref = nk.add_layer_norm(x, r)
    assert np.array_equal(y, y_ref) and np.array_equal(s, s_ref)
    assert np.array_equal(buf[:, 128:], s_ref)
