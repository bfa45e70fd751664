# SPDX-License-Identifier: Apache-2.0
"""Arguments checked before they reach C: integers within their C type, floats within
float32, arrays as the kernels read them. Nothing reaches C wrapped, rounded to 0 or
to inf: ctypes would convert such values silently."""
import ctypes
import operator

import sys

import numpy as np

_INT_RANGES = {
    "int": (-2 ** 31, 2 ** 31 - 1),
    "int64_t": (-2 ** 63, 2 ** 63 - 1),
    "uint64_t": (0, 2 ** 64 - 1),
}
# Doubles of magnitude _F32_INF or more round to inf in float32, those of _F32_ZERO
# or less to 0 (halfway cases round to even: 2^128 and 0).
_F32_INF = 2.0 ** 128 - 2.0 ** 103
_F32_ZERO = 2.0 ** -150
_NOT_NUMBERS = (bool, np.bool_, str, bytes)
_FLOAT32 = np.dtype(np.float32)  # compared as a dtype: half the time of np.float32
FLOAT16 = np.dtype(np.float16)


def integer(value, name, ctype):
    """value as an int within ctype's range. Anything with __index__ (int, NumPy
    integers) but bool, as NumPy and PyTorch take sizes."""
    if type(value) is not int:
        if isinstance(value, _NOT_NUMBERS):
            raise TypeError(f"{name} must be an integer, not {type(value).__name__}")
        try:
            value = operator.index(value)
        except TypeError:
            raise TypeError(f"{name} must be an integer, not {type(value).__name__}") \
                from None
    lo, hi = _INT_RANGES[ctype]
    if lo <= value <= hi:
        return value
    raise OverflowError(f"{name} = {value} is out of range for {ctype} [{lo}, {hi}]")


def float32(value, name):
    """value as a float for a float32 argument. A finite value beyond float32's range
    (it would become inf) and a nonzero one that rounds to 0 are refused; NaN and inf
    go on to the library, which names them."""
    if type(value) is not float:
        if isinstance(value, _NOT_NUMBERS):
            raise TypeError(f"{name} must be a real number, not {type(value).__name__}")
        try:
            value = float(value)
        except TypeError:
            raise TypeError(f"{name} must be a real number, not {type(value).__name__}") \
                from None
        except OverflowError:  # an int beyond double's range
            raise _beyond_float32(name, value) from None
    if _F32_ZERO < value < _F32_INF or -_F32_INF < value < -_F32_ZERO or value == 0:
        return value
    if value != value or abs(value) == float("inf"):
        return value
    if abs(value) >= _F32_INF:
        raise _beyond_float32(name, value)
    raise ValueError(f"{name} = {value!r} rounds to 0 in float32 (smallest 1.4e-45)")


def _beyond_float32(name, value):
    return OverflowError(f"{name} = {value!r} is beyond float32's range (largest "
                         "3.4028235e+38)")


def alias(value, torch_value, name, torch_name):
    """One of an argument given under our name and under PyTorch's (weight, bias)."""
    if torch_value is None:
        return value
    if value is not None:
        raise TypeError(f"got both {name} and {torch_name} (PyTorch's name for {name})")
    return torch_value


_char = ctypes.c_char


def ptr(a):
    """The address of a checked array, or None (NULL).

    Through the buffer protocol: 0.2 us against 0.6 us for ndarray.ctypes.data, which
    remains for what from_buffer refuses (read-only, empty or non-contiguous arrays)."""
    if a is None:
        return None
    try:
        return ctypes.addressof(_char.from_buffer(a))
    except (TypeError, ValueError):
        return a.ctypes.data


def view_ptr(a):
    """ptr of an array that may be a strided view, which from_buffer refuses: asked
    first, 0.7 us against 1.25 us through from_buffer's exception."""
    if a is not None and not a.flags.c_contiguous:
        return a.ctypes.data
    return ptr(a)


class HalfRefused(TypeError):
    """A float16 array given where only float32 is taken (moments_merge's and
    batch_norm_update_running's moments and running statistics, which have no half
    form), the function named from the stack when raised (a wrapper around each
    function cost every call 0.35 us)."""

    def __init__(self, name, function=None):
        function = function or _public_caller()
        super().__init__(f"{function}: {name} is float16; it takes float32 arrays only "
                         "(moments, statistics and parameters are float32 in every "
                         "precision: only the norms' tensors x, residual, dy, dsum and "
                         "out may be float16)")
        self.name = name


def _public_caller():
    """The outermost function of the normkernels package on the stack whose name is
    public (the function the user called)."""
    frame, found = sys._getframe(1), "this function"
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        name = frame.f_code.co_name
        if module.split(".")[0] == "normkernels" and not name.startswith("_"):
            found = name
        frame = frame.f_back
    return found


def array(a, name, shape=None, contiguous=True, dtype=_FLOAT32, whose=None):
    """a as an ndarray of dtype (float32 unless told; float16 where only float32 is
    taken raises HalfRefused, unless whose is given) and of the given shape, no copy,
    C-contiguous unless told otherwise; None stays None. whose: whose dtype it must
    have, for the message."""
    if a is None:
        return None
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, not {type(a).__name__}")
    if a.dtype != dtype:
        if whose is not None:
            raise TypeError(f"{name} must have dtype {dtype} ({whose}), not {a.dtype}")
        if a.dtype == FLOAT16 and dtype == _FLOAT32:
            raise HalfRefused(name)
        raise TypeError(f"{name} must have dtype {dtype}, not {a.dtype}")
    if shape is not None and a.shape != shape:
        raise ValueError(f"{name} has shape {a.shape}; expected {shape}")
    if contiguous and not a.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (numpy.ascontiguousarray copies "
                         "it)")
    return a


def half_or_float32(a, name):
    """a, an ndarray of float32 or float16 (a norm's x, or sum), in any layout: its
    dtype sets that of the other tensors of the call."""
    if isinstance(a, np.ndarray) and a.dtype == FLOAT16:
        return a
    if isinstance(a, np.ndarray) and a.dtype != _FLOAT32:
        raise TypeError(f"{name} must have dtype float32 or float16, not {a.dtype}")
    return array(a, name, contiguous=False)


def writable(a, name):
    if a is not None and not a.flags.writeable:
        raise ValueError(f"{name} is read-only")
    return a


def int_tuple(value, name):
    """value, an int or a list / tuple of ints (a shape), as a tuple."""
    if isinstance(value, (list, tuple)):
        return tuple(integer(d, name, "int64_t") for d in value)
    return (integer(value, name, "int64_t"),)


def channels_last_in_memory(a):
    """Whether a, seen as (N, C, *spatial), is a channels_last tensor's view: its
    (N, *spatial, C) transpose is C-contiguous."""
    return a.ndim > 2 and np.moveaxis(a, 1, -1).flags.c_contiguous


def row_stride(a, name, lead_ndim, cols, output=False):
    """The row stride in elements of a checked array read as rows of cols elements, a
    row being the axes from lead_ndim on (output: a is written, so not read-only).
    cols for a C-contiguous array; the stride of a row-strided view (a row's axes
    dense, the leading axes one stride of a row or more apart: x[:, :64] of a wider
    buffer, one head of a [tokens][heads][dim] array). Other layouts are refused,
    saying what to give instead."""
    if output:
        writable(a, name)
    if a.flags.c_contiguous:
        return cols
    ld = row_pitch(a.shape, a.strides, lead_ndim, cols, a.itemsize)
    if ld is None:
        raise _not_row_strided(a, name, output)
    return ld


def row_pitch(shape, strides, lead_ndim, cols, unit):
    """The row stride in elements of a view of this shape and strides (unit of them
    to an element: NumPy's bytes of one, 4 or 2; PyTorch's elements, 1) read as rows of
    cols elements from axis lead_ndim on, or None when it is not row-strided."""
    step = unit
    for d in range(len(shape) - 1, lead_ndim - 1, -1):
        if shape[d] != 1 and strides[d] != step:
            return None
        step *= shape[d]
    ld = None
    for d in range(lead_ndim - 1, -1, -1):
        if shape[d] == 1:
            continue
        if ld is None:  # the innermost leading axis sets the stride
            if strides[d] % unit or strides[d] < step:
                return None
            ld, step = strides[d] // unit, strides[d]
        elif strides[d] != step:
            return None
        step *= shape[d]
    return cols if ld is None else ld


def _not_row_strided(a, name, output):
    route = f"numpy.ascontiguousarray({name}) copies it"
    if output:
        route = "give a C-contiguous array, or None for a new one"
    elif channels_last_in_memory(a):
        route = (f"it is channels_last in memory: numpy.moveaxis({name}, 1, -1), a "
                 "contiguous view of it (no copy), is normalized over C")
    return ValueError(f"{name} (shape {a.shape}, strides {a.strides}) is not "
                      "row-strided: a row's axes must be contiguous and the leading axes "
                      f"one stride of a row or more apart; {route}")
