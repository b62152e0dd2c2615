#!/usr/bin/env python3
"""Plot perf-simple-query --json-result files: tps per second and allocs/op per second.

Usage: scripts/plot.py RESULT.json [RESULT.json ...] -o out.png

Each file becomes one line in both panels, labelled by its file name (or --label, once per
file). A sample whose allocs/op is null (unavailable, or a second without operations) is a
gap in the line, never a zero. Partial seconds (the tail of an --operations-per-shard run)
are drawn with a hollow marker. Needs matplotlib (pip install matplotlib); installs nothing.
"""

import argparse
import json
import os
import sys


def load(path):
    with open(path) as f:
        doc = json.load(f)
    if doc.get("tool") != "perf-simple-query" or "samples" not in doc:
        raise ValueError(f"{path}: not a perf-simple-query --json-result file")
    return doc


def describe(doc):
    p = doc["parameters"]
    shape = (f"{p['conns']}x{p['pipeline']}" if p["mode"] == "connect"
             else f"smp {p['smp']}, concurrency {p['concurrency']}")
    return f"{p['operation']}, {shape}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", help="--json-result files")
    parser.add_argument("-o", "--output", required=True, help="PNG to write")
    parser.add_argument("--label", action="append", help="legend label, once per file")
    parser.add_argument("--title", default="perf-simple-query")
    args = parser.parse_args()
    if args.label and len(args.label) != len(args.results):
        parser.error("give --label once per result file, or not at all")

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is missing: pip install matplotlib", file=sys.stderr)
        return 1

    try:
        docs = [load(path) for path in args.results]
    except (OSError, ValueError, KeyError) as e:
        print(e, file=sys.stderr)
        return 1

    fig, (ax_tps, ax_allocs) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    any_allocs = False
    for i, (path, doc) in enumerate(zip(args.results, docs)):
        label = args.label[i] if args.label else os.path.basename(path)
        label = f"{label} ({describe(doc)})"
        samples = doc["samples"]
        at = [s["at_seconds"] for s in samples]
        tps = [s["tps"] for s in samples]
        allocs = [s["allocs_per_op"] if s["allocs_per_op"] is not None else float("nan")
                  for s in samples]
        any_allocs |= any(s["allocs_per_op"] is not None for s in samples)
        line, = ax_tps.plot(at, tps, marker="o", label=label)
        ax_allocs.plot(at, allocs, marker="o", color=line.get_color(), label=label)
        partial = [j for j, s in enumerate(samples) if s.get("partial")]
        for ax, ys in ((ax_tps, tps), (ax_allocs, allocs)):
            ax.plot([at[j] for j in partial], [ys[j] for j in partial], linestyle="none",
                    marker="o", markerfacecolor="white", color=line.get_color())
        median = (doc["summary"].get("tps") or {}).get("median")
        if median is not None:
            ax_tps.axhline(median, color=line.get_color(), linestyle=":", linewidth=1)

    scope = {d["counters"]["scope"] for d in docs}
    ax_tps.set_ylabel("tps (dotted: median)")
    ax_tps.set_ylim(bottom=0)
    ax_tps.grid(True, alpha=0.3)
    ax_tps.legend(fontsize="small")
    ax_tps.set_title(args.title)
    ax_allocs.set_ylabel("allocs/op" + (" (client only)" if scope == {"client"} else ""))
    ax_allocs.set_xlabel("seconds since measuring started")
    ax_allocs.set_ylim(bottom=0)
    ax_allocs.grid(True, alpha=0.3)
    if not any_allocs:
        ax_allocs.text(0.5, 0.5, "allocs/op n/a in every sample", ha="center",
                       transform=ax_allocs.transAxes)
    fig.tight_layout()
    fig.savefig(args.output, dpi=100)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
