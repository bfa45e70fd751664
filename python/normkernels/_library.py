# SPDX-License-Identifier: Apache-2.0
"""Finding and declaring libnormkernels for ctypes."""
import ctypes
import ctypes.util
import os

# float32 arrays go by address (an int, from the buffer protocol; see _ptr):
# ctypes.data_as() took 2.5 us per array, half of a small call's time (LayerNorm of
# 1x64 with gamma, beta and out: 9.3 -> 4.9 us per call; 3.2 us through the buffer).
_addr = ctypes.c_void_p
_size_t = ctypes.c_size_t
_status = ctypes.c_int

# name: (restype, argtypes); every kernel returns nk_status.
_SIGNATURES = {
    "nk_version": (ctypes.c_char_p, []),
    "nk_status_string": (ctypes.c_char_p, [_status]),
    "nk_last_error": (ctypes.c_char_p, []),
    "nk_get_isa": (ctypes.c_char_p, []),
    "nk_list_isas": (_size_t, [ctypes.POINTER(ctypes.c_char_p), _size_t]),
    "nk_set_isa": (_status, [ctypes.c_char_p]),
    "nk_get_num_threads": (ctypes.c_int, []),
    "nk_set_num_threads": (_status, [ctypes.c_int]),
    "nk_layernorm_forward_f32": (_status, [_size_t, _size_t, _addr, _addr, _addr,
                                           ctypes.c_float, _addr, _addr, _addr]),
    "nk_rmsnorm_forward_f32": (_status, [_size_t, _size_t, _addr, _addr,
                                         ctypes.c_float, _addr, _addr]),
    "nk_add_layernorm_forward_f32": (_status, [_size_t, _size_t, _addr, _addr,
                                               _addr, _addr, ctypes.c_float,
                                               _addr, _addr, _addr, _addr]),
    "nk_add_rmsnorm_forward_f32": (_status, [_size_t, _size_t, _addr, _addr,
                                             _addr, ctypes.c_float, _addr,
                                             _addr, _addr]),
    "nk_layernorm_forward_strided_f32": (_status, [
        _size_t, _size_t, _addr, _size_t, _addr, _addr, ctypes.c_float, _addr, _size_t,
        _addr, _addr]),
    "nk_rmsnorm_forward_strided_f32": (_status, [
        _size_t, _size_t, _addr, _size_t, _addr, ctypes.c_float, _addr, _size_t, _addr]),
    "nk_add_layernorm_forward_strided_f32": (_status, [
        _size_t, _size_t, _addr, _size_t, _addr, _size_t, _addr, _addr, ctypes.c_float,
        _addr, _size_t, _addr, _size_t, _addr, _addr]),
    "nk_add_rmsnorm_forward_strided_f32": (_status, [
        _size_t, _size_t, _addr, _size_t, _addr, _size_t, _addr, ctypes.c_float, _addr,
        _size_t, _addr, _size_t, _addr]),
    "nk_layernorm_backward_f32": (_status, [
        _size_t, _size_t, _addr, _addr, _addr, _addr, _addr, _addr, _addr, _addr]),
    "nk_rmsnorm_backward_f32": (_status, [
        _size_t, _size_t, _addr, _addr, _addr, _addr, _addr, _addr]),
    "nk_add_layernorm_backward_f32": (_status, [
        _size_t, _size_t, _addr, _addr, _addr, _addr, _addr, _addr, _addr, _addr,
        _addr]),
    "nk_add_rmsnorm_backward_f32": (_status, [
        _size_t, _size_t, _addr, _addr, _addr, _addr, _addr, _addr, _addr]),
    "nk_layernorm_backward_strided_f32": (_status, [
        _size_t, _size_t, _addr, _size_t, _addr, _size_t, _addr, _addr, _addr, _addr,
        _size_t, _addr, _addr]),
    "nk_rmsnorm_backward_strided_f32": (_status, [
        _size_t, _size_t, _addr, _size_t, _addr, _size_t, _addr, _addr, _addr, _size_t,
        _addr]),
    "nk_add_layernorm_backward_strided_f32": (_status, [
        _size_t, _size_t, _addr, _size_t, _addr, _size_t, _addr, _size_t, _addr, _addr,
        _addr, _addr, _size_t, _addr, _addr]),
    "nk_add_rmsnorm_backward_strided_f32": (_status, [
        _size_t, _size_t, _addr, _size_t, _addr, _size_t, _addr, _size_t, _addr, _addr,
        _addr, _size_t, _addr]),
    "nk_batchnorm_forward_training_f32": (_status, [
        _size_t, _size_t, _size_t, ctypes.c_int, _addr, _addr, _addr,
        ctypes.c_float, ctypes.c_float, _addr, _addr, _addr, _addr, _addr]),
    "nk_batchnorm_forward_inference_f32": (_status, [
        _size_t, _size_t, _size_t, ctypes.c_int, _addr, _addr, _addr, _addr,
        _addr, ctypes.c_float, _addr]),
    "nk_batchnorm_backward_f32": (_status, [
        _size_t, _size_t, _size_t, ctypes.c_int, _addr, _addr, _addr, _addr, _addr,
        _addr, _addr, _addr]),
    "nk_batchnorm_backward_reduce_f32": (_status, [
        _size_t, _size_t, _size_t, ctypes.c_int, _addr, _addr, _addr, _addr, _addr,
        _addr]),
    "nk_batchnorm_backward_apply_f32": (_status, [
        _size_t, _size_t, _size_t, ctypes.c_int, _addr, _addr, _addr, _addr, _addr,
        ctypes.c_uint64, _addr, _addr, _addr]),
    "nk_groupnorm_forward_f32": (_status, [
        _size_t, _size_t, _size_t, _size_t, ctypes.c_int, _addr, _addr, _addr,
        ctypes.c_float, _addr, _addr, _addr]),
    "nk_groupnorm_backward_f32": (_status, [
        _size_t, _size_t, _size_t, _size_t, ctypes.c_int, _addr, _addr, _addr, _addr,
        _addr, _addr, _addr, _addr]),
    "nk_batchnorm_moments_f32": (_status, [_size_t, _size_t, _size_t, ctypes.c_int,
                                           _addr, _addr, _addr]),
    "nk_moments_merge_f32": (_status, [_size_t, ctypes.c_uint64, _addr, _addr,
                                       ctypes.c_uint64, _addr, _addr, _addr,
                                       _addr]),
    "nk_batchnorm_update_running_f32": (_status, [_size_t, ctypes.c_uint64, _addr,
                                                  _addr, ctypes.c_float, _addr,
                                                  _addr]),
}
# The half forms (_bf16, _f16) of every kernel with tensors (all but nk_moments_merge
# and nk_batchnorm_update_running): the f32 forms' arguments, the tensors (nk_bf16 /
# nk_f16 bit patterns) by address too.
_SIGNATURES.update({name[:-3] + half: _SIGNATURES[name] for name in list(_SIGNATURES)
                    if name.startswith(("nk_layernorm_", "nk_rmsnorm_",
                                        "nk_add_layernorm_", "nk_add_rmsnorm_",
                                        "nk_batchnorm_", "nk_groupnorm_"))
                    and name != "nk_batchnorm_update_running_f32"
                    for half in ("bf16", "f16")})


def _candidates():
    """Where the library may be, in order: $NK_LIBRARY, the library scripts/install.sh
    installed this package with, beside the package, the system."""
    env = os.environ.get("NK_LIBRARY")
    if env:
        yield env
    try:
        from ._installed import LIBRARY
        yield LIBRARY
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(os.listdir(here)):
        if name.startswith("libnormkernels.so"):
            yield os.path.join(here, name)
    found = ctypes.util.find_library("normkernels")
    if found:
        yield found
    yield "libnormkernels.so.0"


def load():
    """Loads the first library that opens (its path: ._name) and declares its
    functions."""
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
            continue
        for name, (restype, argtypes) in _SIGNATURES.items():
            try:
                fn = getattr(lib, name)
            except AttributeError:  # nk_version, declared first, tells which it is
                raise ImportError(f"normkernels: {path} (libnormkernels "
                                  f"{lib.nk_version().decode()}) has no {name}; it is "
                                  "older than this package") from None
            fn.restype = restype
            fn.argtypes = argtypes
        return lib
    raise ImportError(
        "normkernels: cannot load libnormkernels; set NK_LIBRARY to its path, or install "
        "the library with this package (scripts/install.sh PREFIX). Tried:\n  "
        + "\n  ".join(errors))


def check_version(lib, version):
    """The library's major.minor must be the package's: the ABI the package declares."""
    found = lib.nk_version().decode()
    wanted = ".".join(version.split(".")[:2])
    if ".".join(found.split(".")[:2]) != wanted:
        raise ImportError(f"normkernels {version} needs libnormkernels {wanted}.x; "
                          f"{lib._name} is {found} (NK_LIBRARY may name another library)")
