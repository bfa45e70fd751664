#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench_command.py report | run BUILD_DIR | torch: the benchmark command writes its
results beside the build, shows each case's spread, warns when the spreads say the
machine was busy, and changes tracked files only when asked to.

report: scripts/bench_report.py on made-up runs: a quiet one gives no warning; one
   whose 2-thread case varied by 127% warns on stderr and above its table, which shows
   the cv column; --merge joins the JSON of two processes (AVX3 and AVX2), whose cells
   stand side by side with the ISA oneDNN ran at; a JSON without ISAs, offsets or
   rounds (of an older binary) is refused; --update rewrites the given document's
   results section only and keeps JSON and plot in the given directory; a document
   without markers is refused before anything is written.
run BUILD_DIR: scripts/bench.sh on one small shape (no build, no PyTorch, 3 rounds)
   runs one process per oneDNN ISA, leaves every tracked file as it was and writes the
   merged JSON, with each ISA at both offsets and every case's 3 rounds, and its table
   to --out; with --update-results on a document without markers it stops before
   measuring.
torch: bench/torch_compare.py --quick writes its table, with the cv columns, to --out
   and to --update's torch section only."""
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = "# Performance\n\nprose\n\n<!-- {0}:begin old -->\nold\n<!-- {0}:end -->\n\nmore\n"


def tracked_files():
    """The repository's tracked files; without git, its files outside build trees."""
    try:
        git = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], capture_output=True)
    except OSError:  # no git on the machine (a tarball, a fresh chroot)
        git = None
    if git is not None and git.returncode == 0:
        return [os.path.join(ROOT, p) for p in git.stdout.decode().split("\0") if p]
    files = []
    for d, dirs, names in os.walk(ROOT):
        if "CMakeCache.txt" in names:
            dirs[:] = []
        else:  # not hidden folders (.git, .pytest_cache) nor bytecode caches
            dirs[:] = [x for x in dirs if not x.startswith(".") and x != "__pycache__"]
            files += [os.path.join(d, n) for n in names]
    return files


def checksums(paths):
    def digest(p):
        with open(p, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    return {p: digest(p) if os.path.exists(p) else None for p in paths}


def run(args, expect=0, **kw):
    r = subprocess.run(args, capture_output=True, text=True, **kw)
    assert r.returncode == expect, (args, r.returncode, r.stdout, r.stderr)
    return r


def case(isa, threads, cv, onednn_isa="avx512_core"):
    return {"name": f"layernorm/{isa}/1024x1024/offset:0/threads:{threads}",
            "kernel": "layernorm", "shape": "1024x1024", "isa": isa, "offset": 0,
            "threads": threads, "group": f"layernorm 1024 cols, {threads} thread",
            "main": True, "bytes": 8 << 20, "bytes_per_second": 2e10,
            "copy_bytes_per_second": 3e10, "onednn_bytes_per_second": 1e10,
            "x_copy": 2 / 3, "x_onednn": 2.0, "cv": cv, "copy_cv": 0.01,
            "onednn_cv": 0.02, "onednn_isa": onednn_isa,
            "onednn_impl": "simple_layer_normalization:any"}


def made_up_run(path, cv_2_threads, isa="AVX3", onednn_isa="avx512_core"):
    with open(path, "w") as f:
        json.dump({"rounds": 5, "isas": [isa], "onednn_isa": onednn_isa, "cases": [
            case(isa, 1, 0.02, onednn_isa), case(isa, 2, cv_2_threads, onednn_isa)],
            "baselines": [{"name": "copy_memcpy/floats:1048576/offset:0/threads:1",
                           "kernel": "copy_memcpy", "process": isa,
                           "bytes_per_second": 3e10, "cv": 0.01}]}, f)


def check_merge(tmp, report):
    parts = [os.path.join(tmp, name) for name in ("part3.json", "part2.json")]
    made_up_run(parts[0], 0.03)
    made_up_run(parts[1], 0.04, "AVX2", "avx2")
    merged = os.path.join(tmp, "merged.json")
    r = run(report + [merged, "--merge"] + parts)
    with open(merged) as f:
        data = json.load(f)
    assert data["isas"] == ["AVX3", "AVX2"] and len(data["cases"]) == 4, data
    assert [b["process"] for b in data["baselines"]] == ["AVX3", "AVX2"], data
    assert "| kernel | shape | threads | offset | AVX3 (oneDNN avx512_core) | " \
        "AVX2 (oneDNN avx2) |" in r.stdout, r.stdout
    assert "| layernorm | 1024x1024 | 2 | 0 | 2.00 / 0.67 (3%) | 2.00 / 0.67 (4%) |" \
        in r.stdout, r.stdout
    assert "| layernorm | 1024x1024 | AVX2 | 0 | 2 | 20.0 | 4.0 | 0.67 | 2.00 | avx2 |" \
        in r.stdout, r.stdout
    for key in ("isas", "rounds"):  # an older binary's
        with open(merged, "w") as f:
            json.dump({k: v for k, v in data.items() if k != key}, f)
        r = run(report + [merged], expect=1)
        assert "has no ISAs, offsets or rounds" in r.stderr, (key, r.stderr)


def check_report(tmp):
    report = [sys.executable, os.path.join(ROOT, "scripts", "bench_report.py")]
    quiet, busy = (os.path.join(tmp, name) for name in ("quiet.json", "busy.json"))
    made_up_run(quiet, 0.03)
    made_up_run(busy, 1.27)
    r = run(report + [quiet])
    assert "WARNING" not in r.stdout + r.stderr, r
    r = run(report + [busy])
    warning = "WARNING: the machine was busy: 1 of 3 measurements varied by more than 15%"
    assert warning in r.stderr and "threads:2, 127%" in r.stderr, r.stderr
    assert r.stdout.startswith(f"**{warning}"), r.stdout
    assert "| GB/s | cv % |" in r.stdout and "| 20.0 | 127.0 |" in r.stdout, r.stdout
    with open(os.path.join(tmp, "busy.md")) as f:
        assert f.read().startswith(f"**{warning}")
    check_merge(tmp, report)

    bare = os.path.join(tmp, "bare.md")
    with open(bare, "w") as f:
        f.write("no markers\n")
    before = sorted(os.listdir(tmp))
    r = run(report + [busy, "--update", bare, "--results", tmp + "/kept"], expect=1)
    assert f"--update {bare}: no '<!-- results:begin" in r.stderr, r.stderr
    assert sorted(os.listdir(tmp)) == before, "wrote files before refusing"

    if importlib.util.find_spec("matplotlib") is None:
        print("skipped --update: it needs the plot, and matplotlib is not installed")
        sys.exit(77)
    doc = os.path.join(tmp, "doc", "performance.md")
    os.mkdir(os.path.dirname(doc))
    with open(doc, "w") as f:
        f.write(DOC.format("results"))
    tracked = tracked_files()
    sums = checksums(tracked)
    run(report + [busy, "--update", doc, "--results", os.path.join(tmp, "kept")])
    assert checksums(tracked) == sums, "a tracked file changed"
    assert sorted(os.listdir(os.path.join(tmp, "kept"))) == ["busy.json", "busy.png"]
    with open(doc) as f:
        text = f.read()
    head, rest = text.split("<!-- results:begin", 1)
    section, tail = rest.split("<!-- results:end -->", 1)
    assert head + tail == DOC.format("results").replace(
        "<!-- results:begin old -->\nold\n<!-- results:end -->", ""), text
    assert f"**{warning}" in section and \
        "| layernorm | 1024x1024 | 2 | 0 | 2.00 / 0.67 (127%) |" in section, section
    assert "](../kept/busy.png)" in section, section


def check_run(tmp, build):
    bench = ["bash", os.path.join(ROOT, "scripts", "bench.sh"), "--no-build",
             "--no-torch"]
    env = dict(os.environ, BUILD_DIR=os.path.abspath(build))
    bare = os.path.join(tmp, "bare.md")
    with open(bare, "w") as f:
        f.write("no markers\n")
    r = run(bench + [f"--out={tmp}/refused", f"--update-results={bare}"], expect=1,
            env=env)
    assert "markers" in r.stderr and not os.path.exists(f"{tmp}/refused"), r.stderr

    tracked = tracked_files()
    sums = checksums(tracked)
    out = os.path.join(tmp, "out")
    r = run(bench + [f"--out={out}", "--benchmark_min_time=0.01",
                     "--nk_rounds=3",
                     "--benchmark_filter=/64x1024/offset:(0|16)/threads:1/"], env=env)
    assert checksums(tracked) == sums, "a tracked file changed"
    assert f"bench.sh: results in {out}" in r.stdout, r.stdout
    assert "| cv % |" in r.stdout, r.stdout
    with open(os.path.join(out, "benchmark.json")) as f:
        data = json.load(f)
    processes = [",".join(p["isas"]) for p in data["processes"]]
    binary = os.path.join(build, "bench", "bench_normkernels")
    assert processes == run([binary, "--nk_processes"]).stdout.split(), processes
    best = processes[0].split(",")[0]  # this CPU's best ISA
    assert f"| layernorm | 64x1024 | {best} | 16 | 1 |" in r.stdout, r.stdout
    got = sorted((c["isa"], c["offset"]) for c in data["cases"])
    assert got == sorted((p, o) for p in processes for o in (0, 16)), got
    assert data["rounds"] == 3, data
    assert all(len(c["round_bytes_per_second"]) == 3 for c in data["cases"]), data
    assert all(c["cv"] > 0 and c["copy_cv"] > 0 for c in data["cases"]), data
    assert os.path.exists(os.path.join(out, "benchmark.md"))


def check_torch(tmp):
    compare = [sys.executable, os.path.join(ROOT, "bench", "torch_compare.py"),
               "--quick", "--threads", "1", "--out", tmp]
    bare = os.path.join(tmp, "bare.md")
    with open(bare, "w") as f:
        f.write("no markers\n")
    r = subprocess.run(compare + ["--update", bare], capture_output=True, text=True)
    if r.returncode == 77:
        print(r.stdout)
        sys.exit(77)
    assert r.returncode == 1 and f"--update {bare}: no '<!-- torch:begin" in r.stderr, r
    assert "| op |" not in r.stdout, "measured before refusing"

    doc = os.path.join(tmp, "performance.md")
    with open(doc, "w") as f:
        f.write(DOC.format("torch"))
    run(compare + ["--update", doc])
    with open(os.path.join(tmp, "torch_compare.md")) as f:
        table = f.read()
    assert "| PyTorch us | cv % | normkernels us | cv % | speed-up |" in table, table
    with open(doc) as f:
        text = f.read()
    assert text.startswith("# Performance\n\nprose\n\n<!-- torch:begin") and \
        text.endswith("<!-- torch:end -->\n\nmore\n"), text
    assert table.strip() in text, text


def main():
    mode = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        if mode == "report":
            check_report(tmp)
        elif mode == "run":
            check_run(tmp, sys.argv[2])
        else:
            check_torch(tmp)
    print(f"bench_command {mode}: passed")


if __name__ == "__main__":
    main()
