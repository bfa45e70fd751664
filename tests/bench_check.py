#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench_check.py BENCH_BINARY: the benchmark suite measures what it says.

1. --nk_verify: every case, run once on a NaN-filled output, writes exactly the
   elements its bytes count (a shape argument that did not reach the kernel would
   leave part of y unwritten, or count bytes the kernel never touched).
2. A short timed run: each case's bytes follow from its shape, and its ratios are its
   bytes/s over the copy baseline (and oneDNN) measured in that same run, as listed in
   the same JSON."""
import json
import os
import re
import subprocess
import sys
import tempfile

bench = sys.argv[1]
subprocess.run([bench, "--nk_verify"], check=True)

with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "bench.json")
    flt = ("^(layernorm|rmsnorm|add_layernorm)/AVX3/1024x1024/threads:1/|"
           "^batchnorm_(training|inference)/AVX3/8x512x7x7 NCHW/threads:1/|"
           "^copy_(memcpy|nt)/floats:(1048576|2097152|200704)/threads:1/|"
           "^onednn_(layernorm/1024x1024|batchnorm_.*/8x512x7x7 NCHW)/threads:1/")
    subprocess.run([bench, f"--nk_json={out}", f"--benchmark_filter={flt}",
                    "--benchmark_min_time=0.01"], check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        data = json.load(f)

baselines = {b["name"]: b["bytes_per_second"] for b in data["baselines"]}
cases = data["cases"]
assert len(cases) == 5, [c["name"] for c in cases]
tensors = {"layernorm": 2, "rmsnorm": 2, "add_layernorm": 4,
           "batchnorm_training": 2, "batchnorm_inference": 2}
for c in cases:
    dims = [int(d) for d in re.findall(r"\d+", c["shape"])]
    elements = 1
    for d in dims:
        elements *= d
    assert c["bytes"] == tensors[c["kernel"]] * elements * 4, c
    floats = c["bytes"] // 8
    copy = max(baselines[f"copy_memcpy/floats:{floats}/threads:1"],
               baselines[f"copy_nt/floats:{floats}/threads:1"])
    assert c["copy_bytes_per_second"] == copy, c
    assert abs(c["x_copy"] - c["bytes_per_second"] / copy) <= 1e-9 * c["x_copy"], c
    built_with_onednn = any(name.startswith("onednn_") for name in baselines)
    if built_with_onednn and c["kernel"] in ("layernorm", "batchnorm_training",
                                             "batchnorm_inference"):
        assert c["onednn_bytes_per_second"] > 0, c
        want = c["bytes_per_second"] / c["onednn_bytes_per_second"]
        assert abs(c["x_onednn"] - want) <= 1e-9 * want, c
print(f"{len(cases)} cases: bytes follow the shapes; ratios use this run's baselines")
