#!/usr/bin/python3
"""The table and the plots of tools/fashion_mnist_demo.sh, from the runs' directories
(summary.json, curve.json, steps.rank*.jsonl written by train_fashion_mnist.py).

Per run: wall time until the test accuracy first reached --target (on the curve's
2 000 test images), final accuracy (all 10 000) after the same epochs, samples/s,
efficiency (samples/s over the no-straggler run's) and the speed-up in time to
target over gloo-ddp. With repeated runs (label.1, label.2, ...) the medians.
Then, for the antdt runs, where each rank's step time went (means over the
steps after the first 20, medians over repeats): plan, data, compute, exchange
(inside the DDP hook, waits included), update, and the exchange at the steps
where the rank was the last to reach it (its own share, without waits)."""

import argparse
import glob
import json
import os
import statistics
import sys


def load(d):
    with open(os.path.join(d, "summary.json")) as f:
        s = json.load(f)
    with open(os.path.join(d, "curve.json")) as f:
        s["curve"] = json.load(f)
    s["steps_log"] = {}
    for path in sorted(glob.glob(os.path.join(d, "steps.rank*.jsonl"))):
        rank = int(os.path.basename(path).split(".")[1][4:])
        with open(path) as f:
            s["steps_log"].setdefault(rank, []).extend(json.loads(line) for line in f if line.strip())
    s["dir"] = d
    return s


def time_to(curve, target):
    for p in curve:
        if p["accuracy"] >= target:
            return p["t"]
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--target", type=float, default=0.80)
    p.add_argument("--out", required=True)
    p.add_argument("dirs", nargs="+")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    runs = [load(d) for d in args.dirs if os.path.exists(os.path.join(d, "summary.json"))]
    missing = [d for d in args.dirs if not os.path.exists(os.path.join(d, "summary.json"))]
    for d in missing:
        print(f"fashion_mnist_report: {d}: no summary.json (the run failed)", file=sys.stderr)
    groups = {}
    for r in runs:
        groups.setdefault(r["label"].split(".")[0], []).append(r)

    def med(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    rows = {}
    for name, rs in groups.items():
        rows[name] = {
            "n": len(rs),
            "tta": med([time_to(r["curve"], args.target) for r in rs]),
            "final": med([r["final_accuracy"] for r in rs]),
            "rate": med([r["samples"] / r["wall_s"] for r in rs]),
            "wall": med([r["wall_s"] for r in rs]),
            "restarts": med([sum(1 for log in r["steps_log"].values() for e in log if e.get("restart")) for r in rs]),
        }
    ceiling = rows.get("no-straggler", {}).get("rate")
    base = rows.get("gloo-ddp", {}).get("tta")
    print(f"\nFashion-MNIST, {runs[0]['ranks'] if runs else '?'} ranks, rank 2 throttled (except no-straggler); "
          f"time to {100 * args.target:.0f}% test accuracy" + (" (medians)" if any(v["n"] > 1 for v in rows.values()) else ""))
    header = f"{'run':<14}{'runs':>5}{'to target s':>13}{'final acc %':>13}{'wall s':>9}{'samples/s':>11}" \
             f"{'efficiency':>12}{'vs gloo':>9}{'restarts':>10}"
    print(header)
    print("-" * len(header))
    for name, v in rows.items():
        tta = f"{v['tta']:.1f}" if v["tta"] is not None else "never"
        eff = f"{v['rate'] / ceiling:.2f}" if ceiling else "-"
        speed = f"{base / v['tta']:.2f}x" if base and v["tta"] else "-"
        print(f"{name:<14}{v['n']:>5}{tta:>13}{100 * v['final']:>13.2f}{v['wall']:>9.1f}{v['rate']:>11.0f}"
              f"{eff:>12}{speed:>9}{v['restarts']:>10.0f}")
    phases(groups)
    with open(os.path.join(args.out, "table.json"), "w") as f:
        json.dump({"target": args.target, "rows": rows}, f, indent=1)
    plots = plot(runs, args)
    print(f"\nplots: {', '.join(plots)}\ntable: {os.path.join(args.out, 'table.json')}")
    return 1 if missing else 0


PHASES = ("plan_s", "fetch_s", "compute_s", "xfer_s", "post_s", "step_s")


def phase_means(run, skip=20):
    """Per rank: the mean of each phase (ms) and the median exchange when it arrived last."""
    by_step = {}
    for rank, log in run["steps_log"].items():
        for e in log:
            if all(k in e for k in PHASES) and e["step"] > skip:
                by_step.setdefault(e["step"], {})[rank] = e
    full = [s for s in by_step.values() if len(s) == len(run["steps_log"])]
    if not full:
        return None
    def arrival(e):  # when the rank reached the exchange (its clock: the step's end less its step time)
        return e["t"] - e["step_s"] + e["plan_s"] + e["fetch_s"] + e["compute_s"]
    last_to_arrive = [max(s, key=lambda r: arrival(s[r])) for s in full]
    out = {}
    for rank in run["steps_log"]:
        row = {k: 1000 * statistics.mean(s[rank][k] for s in full) for k in PHASES}
        last = [1000 * s[rank]["xfer_s"] for s, who in zip(full, last_to_arrive) if who == rank]
        row["xfer_last"] = statistics.median(last) if last else None
        row["last_share"] = len(last) / len(full)
        out[rank] = row
    return out


def phases(groups):
    printed = False
    for name, rs in groups.items():
        per_run = [m for m in (phase_means(r) for r in rs) if m]
        if not per_run:
            continue
        if not printed:
            print("\nwhere the step time goes (ms per step, per rank; exchange waits included; "
                  "'own' = exchange when last to arrive)")
            print(f"{'run':<14}{'rank':>5}{'step':>7}{'plan':>7}{'data':>7}{'compute':>9}{'exchange':>10}"
                  f"{'update':>8}{'own':>7}{'last':>7}")
            printed = True
        for rank in sorted(per_run[0]):
            def med(key):
                values = [m[rank][key] for m in per_run if rank in m and m[rank][key] is not None]
                return statistics.median(values) if values else float("nan")
            print(f"{name:<14}{rank:>5}{med('step_s'):>7.1f}{med('plan_s'):>7.1f}{med('fetch_s'):>7.1f}"
                  f"{med('compute_s'):>9.1f}{med('xfer_s'):>10.1f}{med('post_s'):>8.1f}{med('xfer_last'):>7.1f}"
                  f"{100 * med('last_share'):>6.0f}%")


def plot(runs, args):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("fashion_mnist_report: matplotlib is missing (apt-get install python3-matplotlib): no plots")
        return []
    paths = []
    fig, ax = plt.subplots(figsize=(8, 5))
    for r in runs:
        ax.plot([p["t"] for p in r["curve"]], [100 * p["accuracy"] for p in r["curve"]], label=r["label"])
    ax.axhline(100 * args.target, color="gray", linestyle=":", label=f"target {100 * args.target:.0f}%")
    ax.set(xlabel="wall time (s)", ylabel="test accuracy (%)", title="Fashion-MNIST, 4 ranks, rank 2 throttled")
    ax.set_ylim(50, 95)
    ax.legend()
    paths.append(save(fig, args.out, "accuracy_vs_time.png"))

    shown = [r for r in runs if r["label"].split(".")[0] in ("gloo-ddp", "antdt-dd", "antdt-nd")] or runs
    fig, axes = plt.subplots(len(shown), 1, figsize=(8, 3 * len(shown)), squeeze=False)
    for ax, r in zip(axes[:, 0], shown):
        for rank, log in sorted(r["steps_log"].items()):
            pts = [(e["step"], 1e3 * e.get("compute_s", e.get("step_s", 0))) for e in log if "step_s" in e]
            ax.plot([s for s, _ in pts], [v for _, v in pts], ".", markersize=2, label=f"rank {rank}")
        what = "compute" if r["mode"] == "antdt" else "step"
        ax.set(xlabel="step", ylabel=f"{what} time (ms)", title=r["label"], yscale="log")
        ax.legend(markerscale=5)
    fig.tight_layout()
    paths.append(save(fig, args.out, "step_time_per_rank.png"))

    dd = [r for r in runs if r["label"].split(".")[0] == "antdt-dd"]
    if dd:
        fig, ax = plt.subplots(figsize=(8, 4))
        for rank, log in sorted(dd[0]["steps_log"].items()):
            pts = [(e["t"], e["planned_batch"]) for e in log if "planned_batch" in e]
            ax.step([t for t, _ in pts], [b for _, b in pts], where="post", label=f"rank {rank}")
        ax.set(xlabel="wall time (s)", ylabel="local batch (samples)", title="antdt-dd: local batch per rank")
        ax.legend()
        paths.append(save(fig, args.out, "antdt_dd_local_batch.png"))
    return paths


def save(fig, out, name):
    path = os.path.join(out, name)
    fig.savefig(path, dpi=100)
    return path


if __name__ == "__main__":
    sys.exit(main())
