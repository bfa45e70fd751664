#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench_report.py JSON [--merge PART...] [--update DOC] [--results DIR]: the report of
a benchmark run (bench_normkernels --nk_json=JSON). --merge first writes JSON as the
union of PARTs, the JSON of one bench_normkernels process each (one per oneDNN ISA).
Prints the table of the main cells (x oneDNN at the same ISA and x copy, per ISA and
offset) and of every case with its spread over the rounds, writes them and the
plot beside JSON (.md, .png), and warns, on stderr and in the table's header, when the
spreads say the machine was busy. --update copies JSON and the plot into DIR
(default: the repository's results/) and rewrites DOC's results section (between its
results markers) from them."""
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
        data = json.load(f)
    if "isas" not in data or "rounds" not in data:
        sys.exit(f"bench_report: {path} has no ISAs, offsets or rounds (an older "
                 "bench_normkernels wrote it): run scripts/bench.sh again")
    return data


def merge(parts, path):
    """Writes to path the run made of the processes whose JSON are parts."""
    runs = [load(p) for p in parts]
    data = {"rounds": max(r["rounds"] for r in runs),
            "isas": [isa for r in runs for isa in r["isas"]],
            "processes": [{"isas": r["isas"], "onednn_isa": r["onednn_isa"]}
                          for r in runs],
            "cases": [c for r in runs for c in r["cases"]],
            "baselines": [b for r in runs for b in r["baselines"]]}
    names = [c["name"] for c in data["cases"]]
    if len(set(names)) != len(names):
        sys.exit(f"bench_report: --merge {' '.join(parts)}: a case in two processes")
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
    print(f"wrote {path} (merged {len(parts)} processes)")


def size_mib(case):
    return case["bytes"] / 2 / 2**20  # x (or y): half the counted bytes


def has_matplotlib():
    return importlib.util.find_spec("matplotlib") is not None


def isa_order(data):
    return {isa: i for i, isa in enumerate(data["isas"])}


def plot(data, png):
    """Plots the size sweeps of data into png, one row of GB/s, x copy and x oneDNN
    per sweep (a colour per ISA, solid on a line, dashed 16 bytes past one); False if
    it has none."""
    groups = sorted({c["group"] for c in data["cases"] if c["group"]})
    if not groups:
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(groups), 3, figsize=(19, 4.8 * len(groups)),
                             squeeze=False)
    style = {0: "-", 16: "--"}
    for row, group in zip(axes, groups):
        cases = [c for c in data["cases"] if c["group"] == group]
        isas = sorted({c["isa"] for c in cases}, key=isa_order(data).get)
        for isa, colour in zip(isas, plt.rcParams["axes.prop_cycle"].by_key()["color"]):
            for offset in sorted({c["offset"] for c in cases}):
                line = sorted((c for c in cases
                               if c["isa"] == isa and c["offset"] == offset),
                              key=size_mib)
                label = f"{isa}, +{offset} B"
                for ax, key in zip(row, ("bytes_per_second", "x_copy", "x_onednn")):
                    pts = [(size_mib(c),
                            c[key] / (1e9 if key == "bytes_per_second" else 1))
                           for c in line if c[key] > 0]
                    if pts:
                        ax.plot(*zip(*pts), style.get(offset, ":"), color=colour,
                                marker="o", markersize=4, label=label)
        for offset in sorted({c["offset"] for c in cases}):
            copy = sorted((size_mib(c), c["copy_bytes_per_second"] / 1e9) for c in cases
                          if c["isa"] == isas[0] and c["offset"] == offset)
            row[0].plot(*zip(*copy), style.get(offset, ":"), color="k", marker="x",
                        linewidth=2, label=f"copy, +{offset} B ({isas[0]}'s process)")
        titles = ("GB/s (x read + y written)", "x copy (same bytes, threads, offset)",
                  "x oneDNN (at the same ISA and offset)")
        for ax, title in zip(row, titles):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("tensor size x (MiB)")
            ax.set_title(f"{group}: {title}", fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
        row[2].axhline(1.0, color="grey", linewidth=1)
        row[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return True


def cpu_name():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        m = re.search(r"Model name:\s*(.+)", out)
        return m.group(1).strip() if m else platform.processor()
    except OSError:
        return platform.processor()


def table(data):
    """Every case, the ISAs of a shape side by side."""
    order = isa_order(data)
    rows = sorted(data["cases"], key=lambda c: (c["kernel"], c["bytes"], c["shape"],
                                                c["threads"], c["offset"],
                                                order.get(c["isa"], len(order))))
    out = ["| kernel | shape | ISA | offset | threads | GB/s | cv % | x copy | x oneDNN "
           "| oneDNN at |", "| --- | --- | --- |" + " ---: |" * 6 + " --- |"]
    for c in rows:
        dnnl = f"{c['x_onednn']:.2f}" if c["x_onednn"] > 0 else "-"
        out.append(f"| {c['kernel']} | {c['shape']} | {c['isa']} | {c['offset']} | "
                   f"{c['threads']} | {c['bytes_per_second'] / 1e9:.1f} | "
                   f"{c['cv'] * 100:.1f} | {c['x_copy']:.2f} | {dnnl} | "
                   f"{c['onednn_isa'] or '-'} |")
    return out


def cells(data):
    """The main cells, one row per case, threads and offset, a column per ISA: x
    oneDNN at that ISA / x copy (the largest spread of the three measurements)."""
    main = [c for c in data["cases"] if c["main"]]
    order = isa_order(data)
    isas = sorted({c["isa"] for c in main}, key=order.get)
    kinds = ["layernorm", "batchnorm_training", "batchnorm_inference"]
    rows = {}
    for c in main:
        key = (kinds.index(c["kernel"]) if c["kernel"] in kinds else len(kinds),
               c["kernel"], c["bytes"], c["shape"], c["threads"], c["offset"])
        spread = max(c["cv"], c["copy_cv"], c["onednn_cv"])
        dnnl = f"{c['x_onednn']:.2f}" if c["x_onednn"] > 0 else "-"
        rows.setdefault(key, {})[c["isa"]] = \
            f"{dnnl} / {c['x_copy']:.2f} ({spread:.0%})"
    at = {c["isa"]: c["onednn_isa"] for c in main if c["onednn_isa"]}
    heads = [f"{isa} (oneDNN {at[isa]})" if isa in at else isa for isa in isas]
    out = ["| kernel | shape | threads | offset | " + " | ".join(heads) + " |",
           "| --- | --- | ---: | ---: |" + " ---: |" * len(isas)]
    for key, by_isa in sorted(rows.items()):
        out.append(f"| {key[1]} | {key[3]} | {key[4]} | {key[5]} | " +
                   " | ".join(by_isa.get(isa, "") for isa in isas) + " |")
    return out


def busy_warning(data):
    """The warning if any case, copy or oneDNN baseline varied too much."""
    cvs = {c["name"]: c["cv"] for c in data["cases"]}
    cvs.update({f"{b['name']} ({b['process']})": b["cv"] for b in data["baselines"]})
    return reporting.busy_warning(cvs)


def header(data):
    """The tables' first lines: where and how they were measured."""
    return [f"Measured on {cpu_name()} ({platform.system()}) by `bash scripts/bench.sh`: "
            f"{data['rounds']} rounds, in each of which a case ran and right after it "
            "its copy baseline and oneDNN, in the same process; each figure the median "
            "of the rounds' (cv: their coefficient of variation, standard deviation "
            "over mean), each ratio the median of the rounds' ratios; oneDNN capped at "
            "the ISA shown, "
            "every array of a call at the offset shown (bytes past a 64-byte boundary); "
            "bytes count x and y once.", "",
            "Each cell: x oneDNN / x copy (the largest cv of the case, its copy and "
            "oneDNN)."]


def section(data, json_path, png, doc, warning):
    """The doc's results section: the main cells, and the plot."""
    here = os.path.dirname(os.path.abspath(doc))
    return "\n".join(reporting.with_warning([
        *header(data), f"Every case: `{os.path.relpath(json_path, ROOT)}`.", "",
        *cells(data), "",
        f"![GB/s, x copy and x oneDNN against size per ISA and offset]"
        f"({os.path.relpath(png, here)})",
    ], warning))


def report(data, stem, warning):
    """Prints the tables, writes them to stem.md and the plot to stem.png; True if
    there is a plot."""
    lines = [*header(data), "", *cells(data), "", "Every case:", "", *table(data)]
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
    parser.add_argument("--merge", metavar="PART", nargs="+",
                        help="first write JSON as the union of these processes' JSON")
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
    if args.merge:
        merge(args.merge, args.json)
    data = load(args.json)
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
