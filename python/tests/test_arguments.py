# SPDX-License-Identifier: Apache-2.0
"""Scalar arguments: each checked against its C type before the call (no value wraps
around, rounds to 0 or to inf on its way to C), the error naming the argument and
the value given."""
import numpy as np
import pytest

import normkernels as nk
from reference import data

FLT_MAX = float(np.finfo(np.float32).max)
FLT_TRUE_MIN = 2.0 ** -149  # the smallest positive float32 (subnormal)

x2 = data((2, 8), 1)
g8, b8 = data((8,), 2), data((8,), 3)
x3 = data((2, 3, 4), 4)
g3, b3 = data((3,), 5), data((3,), 6)
rm3, rv3 = data((3,), 7), np.abs(data((3,), 8)) + 0.5


def with_eps(eps):
    """Every function taking eps, called with it."""
    return {
        "layer_norm": lambda: nk.layer_norm(x2, g8, b8, eps=eps),
        "rms_norm": lambda: nk.rms_norm(x2, g8, eps=eps),
        "add_layer_norm": lambda: nk.add_layer_norm(x2, x2, g8, b8, eps=eps),
        "add_rms_norm": lambda: nk.add_rms_norm(x2, x2, g8, eps=eps),
        "batch_norm training": lambda: nk.batch_norm(x3, rm3.copy(), rv3.copy(), g3, b3,
                                                     training=True, eps=eps),
        "batch_norm inference": lambda: nk.batch_norm(x3, rm3, rv3, g3, b3, eps=eps),
        "group_norm": lambda: nk.group_norm(x3, 3, g3, b3, eps=eps),
        "instance_norm": lambda: nk.instance_norm(x3, g3, b3, eps=eps),
    }


def with_momentum(momentum):
    """Every function taking momentum, called with it."""
    return {
        "batch_norm": lambda: nk.batch_norm(x3, rm3.copy(), rv3.copy(), training=True,
                                            momentum=momentum),
        "batch_norm_update_running": lambda: nk.batch_norm_update_running(
            10, rm3, rv3, momentum, rm3.copy(), rv3.copy()),
    }


@pytest.mark.parametrize("name", list(with_eps(0)))
@pytest.mark.parametrize("eps, error, message", [
    (1e40, OverflowError, r"eps = 1e\+40 is beyond float32's range"),
    (-1e40, OverflowError, r"eps = -1e\+40 is beyond float32's range"),
    (np.float64(2.0 ** 128), OverflowError, r"eps = 3.402823669209385e\+38 is beyond"),
    (10 ** 400, OverflowError, r"eps = 10{400} is beyond float32's range"),
    (1e-50, ValueError, r"eps = 1e-50 rounds to 0 in float32"),
    (2.0 ** -150, ValueError, r"eps = 7.006492321624085e-46 rounds to 0"),
    ("1e-5", TypeError, "eps must be a real number, not str"),
    (None, TypeError, "eps must be a real number, not NoneType"),
    (True, TypeError, "eps must be a real number, not bool"),
])
def test_eps_out_of_float32_is_refused(name, eps, error, message):
    with pytest.raises(error, match=message):
        with_eps(eps)[name]()


@pytest.mark.parametrize("name", list(with_eps(0)))
def test_eps_at_float32_limits_is_taken(name):
    """The largest float32, the smallest positive one (a constant row then still gives
    beta, as eps > 0 promises), NumPy scalars and ints."""
    for eps in (FLT_MAX, FLT_TRUE_MIN, np.float32(1e-3), np.float64(1e-3), 1):
        with_eps(eps)[name]()
    y = nk.layer_norm(np.full((1, 8), 3.0, np.float32), g8, b8, eps=FLT_TRUE_MIN)
    np.testing.assert_array_equal(y[0], b8)


def test_non_finite_eps_is_the_librarys_error():
    with pytest.raises(nk.NormKernelsError, match="eps"):
        nk.layer_norm(x2, eps=float("inf"))
    with pytest.raises(nk.NormKernelsError, match="eps"):
        nk.layer_norm(x2, eps=float("nan"))


@pytest.mark.parametrize("name", list(with_momentum(0)))
@pytest.mark.parametrize("momentum, error, message", [
    (1e40, OverflowError, r"momentum = 1e\+40 is beyond float32's range"),
    (1e-50, ValueError, r"momentum = 1e-50 rounds to 0 in float32"),
    ("0.1", TypeError, "momentum must be a real number, not str"),
])
def test_momentum_out_of_float32_is_refused(name, momentum, error, message):
    with pytest.raises(error, match=message):
        with_momentum(momentum)[name]()


@pytest.mark.parametrize("name", list(with_momentum(0)))
def test_momentum_scalars_are_taken(name):
    for momentum in (0, 1, np.float32(0.25), FLT_TRUE_MIN):
        with_momentum(momentum)[name]()


def merge(count_a, count_b):
    ones = np.ones(3, np.float32)
    return nk.moments_merge(count_a, ones, ones, count_b, ones, ones)


@pytest.mark.parametrize("call, message", [
    (lambda: merge(2 ** 70, 1), r"count_a = 1180591620717411303424 is out of range for "
                                r"uint64_t \[0, 18446744073709551615\]"),
    (lambda: merge(1, 2 ** 64), r"count_b = 18446744073709551616 is out of range"),
    (lambda: merge(-5, 1), r"count_a = -5 is out of range for uint64_t"),
    (lambda: merge(1, np.int64(-1)), r"count_b = -1 is out of range"),
    (lambda: nk.batch_norm_update_running(-3, rm3, rv3, 0.1, rm3.copy(), rv3.copy()),
     r"count = -3 is out of range for uint64_t"),
    (lambda: nk.batch_norm_update_running(2 ** 64, rm3, rv3, 0.1, rm3.copy(), rv3.copy()),
     r"count = 18446744073709551616 is out of range"),
    (lambda: nk.set_num_threads(2 ** 32 + 1),
     r"n = 4294967297 is out of range for int \[-2147483648, 2147483647\]"),
    (lambda: nk.set_num_threads(2 ** 31), r"n = 2147483648 is out of range"),
    (lambda: nk.set_num_threads(-2 ** 31 - 1), r"n = -2147483649 is out of range"),
])
def test_integers_out_of_their_c_type_are_refused(call, message):
    threads = nk.num_threads()
    with pytest.raises(OverflowError, match=message):
        call()
    assert nk.num_threads() == threads


@pytest.mark.parametrize("call, message", [
    (lambda: merge(3.0, 1), "count_a must be an integer, not float"),
    (lambda: merge(True, 1), "count_a must be an integer, not bool"),
    (lambda: merge(1, "2"), "count_b must be an integer, not str"),
    (lambda: nk.batch_norm_update_running(None, rm3, rv3, 0.1, rm3, rv3),
     "count must be an integer, not NoneType"),
    (lambda: nk.set_num_threads(2.5), "n must be an integer, not float"),
    (lambda: nk.set_num_threads(np.True_), "n must be an integer, not bool"),
])
def test_integers_must_be_integers(call, message):
    with pytest.raises(TypeError, match=message):
        call()


def test_numpy_integers_are_taken():
    ones = np.ones(3, np.float32)
    count, _, _ = nk.moments_merge(np.int64(3), ones, ones, np.uint64(4), ones, ones)
    assert count == 7 and type(count) is int
    count, _, _ = merge(np.uint64(2 ** 64 - 2), np.uint8(1))  # the largest sum
    assert count == 2 ** 64 - 1
    with pytest.raises(nk.NormKernelsError, match="overflow"):  # the library's check
        merge(np.uint64(2 ** 64 - 1), 1)
    nk.batch_norm_update_running(np.int32(10), rm3, rv3, 0.1, rm3.copy(), rv3.copy())
    try:
        nk.set_num_threads(np.int32(2))
        assert nk.num_threads() == 2
        nk.set_num_threads(np.array(1))  # a 0-d integer array has __index__ too
        assert nk.num_threads() == 1
    finally:
        nk.set_num_threads(0)
