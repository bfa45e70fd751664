#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench_check.py BENCH_BINARY: the benchmark suite measures what it says.

1. --nk_verify: every case, run once on a NaN-filled output, writes exactly the
   elements its bytes count and nothing just after them (a shape argument that did
   not reach the kernel would leave part of y unwritten, or count bytes the kernel
   never touched); every kernel (--full) in the first process, the quick selection
   in the others.
2. A short timed run of each process (one per oneDNN ISA): oneDNN ran capped at the
   ISA of the process's cases (as oneDNN reports it, and as the implementation it
   chose names it); each case's bytes follow from its shape, it has both offsets, and
   its ratios are its bytes/s over the copy baseline and oneDNN at the same offset
   and threads, measured in that same process, as listed in the same JSON."""
import json
import os
import re
import subprocess
import sys
import tempfile

bench = sys.argv[1]
processes = subprocess.run([bench, "--nk_processes"], check=True, capture_output=True,
                           text=True).stdout.split()
assert processes, "no processes"
for i, isas in enumerate(processes):
    subprocess.run([bench, "--nk_verify", f"--nk_isas={isas}"] + ["--full"] * (i == 0),
                   check=True)

TENSORS = {"layernorm": 2, "rmsnorm": 2, "add_layernorm": 4, "add_rmsnorm": 4,
           "layernorm_backward": 3, "rmsnorm_backward": 3, "add_layernorm_backward": 4,
           "add_rmsnorm_backward": 4,
           "batchnorm_training": 2, "batchnorm_inference": 2, "batchnorm_moments": 1,
           "batchnorm_backward": 3}
WITH_ONEDNN = ("layernorm", "layernorm_backward", "batchnorm_training",
               "batchnorm_inference", "batchnorm_backward")
SHAPES = "(1024x1024|8x512x7x7 NCHW|32x64x56x56 NHWC)"
PLACES = "/offset:(0|16)/threads:1/"
FILTER = "|".join([
    f"^[a-z_]+/[A-Z0-9_]+/{SHAPES}{PLACES}", f"^onednn_[a-z_]+/{SHAPES}{PLACES}",
    # the copies of their bytes: x and y (and the residual and sum, or dy) of each shape
    f"^copy_(memcpy|nt)/floats:(1048576|1572864|2097152|200704|100352|6422528|3211264"
    f"|9633792|301056)"
    f"{PLACES}"])


def cap(isa):
    """oneDNN's ISA for cases of `isa`."""
    return "avx512_core" if isa.startswith("AVX3") else {"AVX2": "avx2"}.get(isa, "sse41")


def timed(isas, full, tmp):
    out = os.path.join(tmp, "bench.json")
    subprocess.run([bench, f"--nk_isas={isas}", f"--nk_json={out}",
                    f"--benchmark_filter={FILTER}", "--benchmark_min_time=0.01"]
                   + ["--full"] * full, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def check(data, isas, full):
    baselines = {b["name"]: b["bytes_per_second"] for b in data["baselines"]}
    with_onednn = any(name.startswith("onednn_") for name in baselines)
    assert data["isas"] == isas.split(","), data["isas"]
    if with_onednn:  # fails if the cap was not applied: oneDNN runs at its best
        assert data["onednn_isa"] == cap(data["isas"][0]), (isas, data["onednn_isa"])
    cases = data["cases"]
    bn = ["batchnorm_training", "batchnorm_inference", "batchnorm_backward"]
    bn += ["batchnorm_moments"] * full
    want = [(k, "1024x1024") for k in ("layernorm", "layernorm_backward")]
    want += [(k, "32x64x56x56 NHWC") for k in bn]
    if full:
        want += [(k + b, "1024x1024") for k in ("rmsnorm", "add_layernorm", "add_rmsnorm")
                 for b in ("", "_backward")]
        want += [(k, "8x512x7x7 NCHW") for k in bn]
    got = sorted((c["kernel"], c["shape"], c["offset"]) for c in cases)
    assert got == sorted((k, s, o) for k, s in want for o in (0, 16)), (isas, got)
    for c in cases:
        name = re.fullmatch(r"[a-z_]+/([A-Z0-9_]+)/([^/]+)/offset:(\d+)/threads:(\d+)",
                            c["name"])
        assert name and name.groups() == (c["isa"], c["shape"], str(c["offset"]),
                                          str(c["threads"])), c
        dims = [int(d) for d in re.findall(r"\d+", c["shape"])]
        elements = 1
        for d in dims:
            elements *= d
        assert c["bytes"] == TENSORS[c["kernel"]] * elements * 4, c
        place = f"offset:{c['offset']}/threads:1"
        floats = c["bytes"] // 8
        copy = max(baselines[f"copy_memcpy/floats:{floats}/{place}"],
                   baselines[f"copy_nt/floats:{floats}/{place}"])
        assert c["copy_bytes_per_second"] == copy, c
        assert abs(c["x_copy"] - c["bytes_per_second"] / copy) <= 1e-9 * c["x_copy"], c
        if with_onednn and c["kernel"] in WITH_ONEDNN:
            dnnl = baselines[f"onednn_{c['kernel']}/{c['shape']}/{place}"]
            assert c["onednn_bytes_per_second"] == dnnl, c
            want = c["bytes_per_second"] / dnnl
            assert abs(c["x_onednn"] - want) <= 1e-9 * want, c
            assert c["onednn_isa"] == data["onednn_isa"], c
            # "bnorm_jit:avx512_core", "bnorm_tbb_jit:avx2"; "...:any" names none
            impl_isa = c["onednn_impl"].rpartition(":")[2]
            assert impl_isa in ("any", c["onednn_isa"]), c
        else:
            assert c["onednn_bytes_per_second"] == 0 and c["onednn_isa"] == "", c
    return len(cases)


with tempfile.TemporaryDirectory() as tmp:
    for i, isas in enumerate(processes):
        n = check(timed(isas, i == 0, tmp), isas, i == 0)
        print(f"{isas}: {n} cases at both offsets; oneDNN at the matching ISA; bytes "
              "follow the shapes; ratios use this process's baselines")
