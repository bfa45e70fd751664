#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench_report.py JSON [--update DOC] [--results DIR]: the report of a benchmark run
(bench_normkernels --nk_json=JSON). Prints the table of every case with the spread of
its repetitions, writes it and the plot beside JSON (.md, .png), and warns, on stderr
and in the table's header, when the spreads say the machine was busy. --update copies
JSON and the plot into DIR (default: the repository's results/) and rewrites DOC's
results section (between its results markers) from them."""
import argparse
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import reporting  # noqa: E402


def load(path):
    with open(path) as f:
        return json.load(f)


def size_mib(case):
    return case["bytes"] / 2 / 2**20  # x (or y): half the counted bytes


def has_matplotlib():
    return importlib.util.find_spec("matplotlib") is not None


def plot(data, png):
    """Plots the size sweeps of data into png; False if it has none."""
    groups = sorted({c["group"] for c in data["cases"] if c["group"]})
    if not groups:
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(groups), figsize=(6.5 * len(groups), 4.8),
                             squeeze=False)
    for ax, group in zip(axes[0], groups):
        cases = [c for c in data["cases"] if c["group"] == group]
        isas = []
        for c in cases:
            if c["isa"] not in isas:
                isas.append(c["isa"])
        for isa in isas:
            pts = sorted((size_mib(c), c["bytes_per_second"] / 1e9) for c in cases
                         if c["isa"] == isa)
            ax.plot(*zip(*pts), marker="o", label=isa)
        best = [c for c in cases if c["isa"] == isas[0]]
        copy = sorted((size_mib(c), c["copy_bytes_per_second"] / 1e9) for c in best)
        ax.plot(*zip(*copy), "k--", marker="x", linewidth=2,
                label="copy (memcpy / NT store)")
        dnnl = sorted((size_mib(c), c["onednn_bytes_per_second"] / 1e9) for c in best
                      if c["onednn_bytes_per_second"] > 0)
        if dnnl:
            ax.plot(*zip(*dnnl), "s:", color="tab:red", linewidth=2, label="oneDNN")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tensor size x (MiB)")
        ax.set_ylabel("GB/s (x read + y written)")
        ax.set_title(group)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return True


def cpu_name():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        m = re.search(r"Model name:\s*(.+)", out)
        return m.group(1).strip() if m else platform.processor()
    except OSError:
        return platform.processor()


def table(rows, with_isa):
    isa = " ISA |" if with_isa else ""
    out = [f"| kernel | shape |{isa} threads | GB/s | cv % | x copy | x oneDNN |",
           "| --- | --- |" + (" --- |" if with_isa else "") + " ---: |" * 5]
    for c in rows:
        dnnl = f"{c['x_onednn']:.2f}" if c["x_onednn"] > 0 else "-"
        isa = f" {c['isa']} |" if with_isa else ""
        out.append(f"| {c['kernel']} | {c['shape']} |{isa} {c['threads']} | "
                   f"{c['bytes_per_second'] / 1e9:.1f} | {c['cv'] * 100:.1f} | "
                   f"{c['x_copy']:.2f} | {dnnl} |")
    return out


def selected(data, isa):
    """LayerNorm at 64 / 1024 / 8192 columns of 4 and 64 MiB; BatchNorm's shapes."""
    def ln(c):
        m = re.fullmatch(r"\d+x(\d+)", c["shape"])
        return (c["kernel"] == "layernorm" and m and int(m.group(1)) in (64, 1024, 8192)
                and size_mib(c) in (4, 64))
    bn = ("batchnorm_training", "batchnorm_inference")
    bn_shapes = ("32x64x56x56", "256x256x14x14", "8x512x7x7", "8x2048x7x7",
                 "1x64x112x112")
    rows = [c for c in data["cases"] if c["isa"] == isa and
            (ln(c) or (c["kernel"] in bn and c["shape"].split()[0] in bn_shapes))]
    order = ["layernorm"] + list(bn)
    return sorted(rows, key=lambda c: (order.index(c["kernel"]), c["shape"].split()[-1],
                                       c["bytes"], c["shape"], c["threads"]))


def busy_warning(data):
    """The warning if any case, copy or oneDNN baseline varied too much."""
    return reporting.busy_warning({c["name"]: c["cv"]
                                   for c in data["cases"] + data["baselines"]})


def header(data, what):
    """The table's first line: where, how, and `what` was measured."""
    return (f"Measured on {cpu_name()} ({platform.system()}) by `bash scripts/bench.sh`:"
            f" {what}medians of {data['repetitions']} repetitions (cv: their coefficient "
            "of variation, standard deviation over mean), each ratio against the copy "
            "baseline and oneDNN of the same run; bytes count x and y once.")


def section(data, json_path, png, doc, warning):
    """The doc's results section: the main cases on the best ISA, and the plot."""
    isas = [c["isa"] for c in data["cases"]]
    isa = "AVX3" if "AVX3" in isas else (isas[0] if isas else "?")
    here = os.path.dirname(os.path.abspath(doc))
    return "\n".join(reporting.with_warning([
        header(data, f"ISA {isa}, ") + " All ISAs and kernels: "
        f"`{os.path.relpath(json_path, ROOT)}`.", "",
        *table(selected(data, isa), with_isa=False), "",
        f"![bytes/s against size per ISA, copy and oneDNN]({os.path.relpath(png, here)})",
    ], warning))


def report(data, stem, warning):
    """Prints the table, writes it to stem.md and the plot to stem.png; True if there
    is a plot."""
    lines = [header(data, ""), "", *table(data["cases"], with_isa=True)]
    text = "\n".join(reporting.with_warning(lines, warning))
    print(text)
    with open(stem + ".md", "w") as f:
        f.write(text + "\n")
    print(f"wrote {stem}.md")
    png = stem + ".png"
    if os.path.exists(png):
        os.remove(png)  # of an earlier run
    if not has_matplotlib():
        print("bench_report: no plot: python3-matplotlib is not installed",
              file=sys.stderr)
        return False
    if not plot(data, png):
        print("bench_report: no plot: no size sweep in this run", file=sys.stderr)
        return False
    print(f"wrote {png}")
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="bench_normkernels --nk_json output")
    parser.add_argument("--update", metavar="DOC",
                        help="rewrite this document's results section")
    parser.add_argument("--results", metavar="DIR", default=os.path.join(ROOT, "results"),
                        help="where --update keeps the JSON and the plot")
    args = parser.parse_args()
    if args.update:  # fail before writing anything
        reporting.check_section(args.update, "results")
        if not has_matplotlib():
            sys.exit("bench_report: --update needs the plot: python3-matplotlib is not "
                     "installed")
    data = load(args.json)
    if "repetitions" not in data:
        sys.exit(f"bench_report: {args.json} has no spreads (an older bench_normkernels "
                 "wrote it): run scripts/bench.sh again")
    stem = os.path.splitext(args.json)[0]
    warning = busy_warning(data)
    if not report(data, stem, warning) and args.update:
        sys.exit("bench_report: --update needs the plot: this run has no size sweep")
    if args.update:
        os.makedirs(args.results, exist_ok=True)
        kept = [shutil.copy(stem + ext, args.results) for ext in (".json", ".png")]
        print(f"wrote {', '.join(kept)}")
        reporting.rewrite_section(args.update, "results",
                                  section(data, *kept, args.update, warning))
    reporting.warn("bench_report", warning)


if __name__ == "__main__":
    main()
