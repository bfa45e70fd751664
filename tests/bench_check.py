#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench_check.py BENCH_BINARY: the benchmark suite measures what it says.

1. --nk_verify: every case, run once on a NaN-filled output, writes exactly the
   elements its bytes count and nothing just after them (a shape argument that did
   not reach the kernel would leave part of y unwritten, or count bytes the kernel
   never touched); every kernel (--full) in the first process, the quick selection
   in the others.
2. A short timed run of each process (one per oneDNN ISA), in two rounds: oneDNN ran
   capped at the ISA of the process's cases (as oneDNN reports it, and as the
   implementation it chose names it); each case's bytes follow from its shape, it has
   both offsets, and each round's figures of its copy baselines and oneDNN are runs
   of the baselines of the same offset and threads in that same process, as listed in
   the same JSON; its figures are the medians of the rounds' and its ratios the
   medians of the rounds' ratios, against the faster copy of each round. Google
   Benchmark's repetitions, which would take a case apart from its baselines, are
   refused."""
import json
import os
import re
import statistics
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

for flag in ("--benchmark_repetitions=3", "--benchmark_enable_random_interleaving=true"):
    r = subprocess.run([bench, flag], capture_output=True, text=True)
    assert r.returncode == 2 and "--nk_rounds" in r.stderr and not r.stdout, (flag, r)

TENSORS = {"layernorm": 2, "rmsnorm": 2, "add_layernorm": 4, "add_rmsnorm": 4,
           "layernorm_backward": 3, "rmsnorm_backward": 3, "add_layernorm_backward": 4,
           "add_rmsnorm_backward": 4,
           "batchnorm_training": 2, "batchnorm_inference": 2, "batchnorm_moments": 1,
           "batchnorm_backward": 3}
WITH_ONEDNN = ("layernorm", "layernorm_backward", "batchnorm_training",
               "batchnorm_inference", "batchnorm_backward")
SHAPES = "(1024x1024|8x512x7x7 NCHW|32x64x56x56 NHWC)"
PLACES = "/offset:(0|16)/threads:1/"
# The cases; each brings its copy baselines and oneDNN along.
FILTER = f"^[a-z_]+/[A-Z0-9_]+/{SHAPES}{PLACES}"


ROUNDS = 2


def close(a, b):
    return abs(a - b) <= 1e-12 * abs(b)


def cap(isa):
    """oneDNN's ISA for cases of `isa`."""
    return "avx512_core" if isa.startswith("AVX3") else {"AVX2": "avx2"}.get(isa, "sse41")


def timed(isas, full, tmp):
    out = os.path.join(tmp, "bench.json")
    subprocess.run([bench, f"--nk_isas={isas}", f"--nk_json={out}",
                    f"--benchmark_filter={FILTER}", "--benchmark_min_time=0.01",
                    f"--nk_rounds={ROUNDS}"]
                   + ["--full"] * full, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def check(data, isas, full):
    baselines = {b["name"]: b["runs"] for b in data["baselines"]}
    assert data["rounds"] == ROUNDS, data["rounds"]
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
        ours = c["round_bytes_per_second"]
        assert len(ours) == ROUNDS and all(v > 0 for v in ours), c
        for kind in ("memcpy", "nt"):
            assert set(c[f"round_copy_{kind}"]) <= \
                set(baselines[f"copy_{kind}/floats:{floats}/{place}"]), c
        copy = [max(m, n) for m, n in zip(c["round_copy_memcpy"], c["round_copy_nt"])]
        assert close(c["bytes_per_second"], statistics.median(ours)), c
        assert close(c["copy_bytes_per_second"], statistics.median(copy)), c
        assert close(c["x_copy"], statistics.median(o / k for o, k in zip(ours, copy))), c
        if with_onednn and c["kernel"] in WITH_ONEDNN:
            dnnl = c["round_onednn"]
            runs = baselines[f"onednn_{c['kernel']}/{c['shape']}/{place}"]
            assert len(dnnl) == ROUNDS and set(dnnl) <= set(runs), c
            assert close(c["onednn_bytes_per_second"], statistics.median(dnnl)), c
            assert close(c["x_onednn"],
                         statistics.median(o / d for o, d in zip(ours, dnnl))), c
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
