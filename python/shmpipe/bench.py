"""Compares shmpipe.Pipe with multiprocessing.Pipe, multiprocessing.Queue and
faster_fifo.Queue in one run: round trips and one-way throughput for 8 B,
1 KiB and 1 MiB messages, with both processes on different cores and on
the same core. Reports medians, and ratios against shmpipe from the same
run; ``--plot DIR`` draws a chart (needs matplotlib).

    python -m shmpipe.bench [--quick] [--plot DIR] [--json FILE] [--filter WORDS]

Benchmarks are programs, not tests: slow figures never fail anything.
"""

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time

import shmpipe

SIZES = [("8B", 8), ("1KiB", 1024), ("1MiB", 1 << 20)]
KINDS = ["roundtrip", "throughput"]
CONTESTANTS = ["shmpipe.Pipe", "multiprocessing.Pipe", "multiprocessing.Queue", "faster_fifo.Queue"]
BASE = "shmpipe.Pipe"
REFERENCE = "multiprocessing.Pipe"


# -- channels: each gives the parent and the child a send and a recv --------

class _PipeChannel:
    def __init__(self, make):
        self.parent, self.child = make()

    def ends(self, side):
        c = self.parent if side == "parent" else self.child
        return c.send_bytes, c.recv_bytes

    def close_parent_side(self):
        pass


class _QueueChannel:
    def __init__(self, make):
        self.down, self.up = make(), make()

    def ends(self, side):
        if side == "parent":
            return self.down.put, self.up.get
        return self.up.put, self.down.get


def _faster_fifo():
    import faster_fifo

    # Room for a few 1 MiB messages (the default is 1 MB).
    return faster_fifo.Queue(max_size_bytes=8 << 20)


def make_channel(name):
    if name == "shmpipe.Pipe":
        return _PipeChannel(lambda: shmpipe.Pipe(capacity=1 << 22))
    if name == "multiprocessing.Pipe":
        return _PipeChannel(mp.Pipe)
    if name == "multiprocessing.Queue":
        return _QueueChannel(mp.Queue)
    if name == "faster_fifo.Queue":
        return _QueueChannel(_faster_fifo)
    raise ValueError(name)


def available(name):
    if name == "faster_fifo.Queue":
        try:
            import faster_fifo  # noqa: F401
        except ImportError:
            return False
    return True


# -- the child: obeys ("roundtrip"|"throughput", n, size) until None --------

def _child(channel, ctl, cpu):
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    send, recv = channel.ends("child")
    while True:
        cmd = ctl.recv()
        if cmd is None:
            return
        kind, n, size = cmd
        if kind == "roundtrip":
            for _ in range(n):
                send(recv())
        else:
            msg = b"\xa5" * size
            for _ in range(n):
                send(msg)


def _run(kind, n, size, send, recv, ctl):
    """One timed batch of n operations; seconds."""
    msg = b"\x5a" * size
    ctl.send((kind, n, size))
    if kind == "roundtrip":
        start = time.perf_counter()
        for _ in range(n):
            send(msg)
            recv()
        return time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(n):
        recv()
    return time.perf_counter() - start


def measure(name, kind, size, cpus, reps, target):
    """Median seconds per operation over `reps` batches, and all samples."""
    channel = make_channel(name)
    ctl_parent, ctl_child = mp.Pipe()
    ctx = mp.get_context("fork")
    child = ctx.Process(target=_child, args=(channel, ctl_child, cpus[1]), daemon=True)
    child.start()
    try:
        if cpus[0] is not None:
            os.sched_setaffinity(0, {cpus[0]})
        send, recv = channel.ends("parent")
        # Calibrate: grow the batch until it lasts a tenth of the target.
        n = 4
        while True:
            t = _run(kind, n, size, send, recv, ctl_parent)
            if t >= target / 10 or n >= 1 << 22:
                break
            n *= 4
        n = max(1, int(n * target / max(t, 1e-9)))
        samples = [_run(kind, n, size, send, recv, ctl_parent) / n for _ in range(reps)]
        ctl_parent.send(None)
        child.join(60)
        return statistics.median(samples), samples, n
    finally:
        if child.is_alive():
            child.kill()
            child.join()
        os.sched_setaffinity(0, ALL_CPUS)


ALL_CPUS = os.sched_getaffinity(0)


def placements():
    cpus = sorted(ALL_CPUS)
    out = []
    if len(cpus) >= 2:
        out.append(("cross-core", (cpus[0], cpus[1])))
    out.append(("same-core", (cpus[0], cpus[0])))
    return out


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def fmt_value(kind, size, sec):
    if kind == "roundtrip":
        us = sec * 1e6
        return f"{us:.2f} us" if us < 100 else f"{us:.0f} us"
    return f"{size / sec / 1e6:.1f} MB/s" if size >= 1024 else f"{1 / sec / 1e6:.2f} M msg/s"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m shmpipe.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="shorter batches, fewer repetitions")
    ap.add_argument("--reps", type=int, default=None, help="batches per figure (median taken)")
    ap.add_argument("--plot", metavar="DIR", help="write python-bench.png there (matplotlib)")
    ap.add_argument("--json", metavar="FILE", help="write every sample as JSON")
    ap.add_argument("--filter", default="", help="comma-separated words a case must all contain")
    args = ap.parse_args(argv)
    reps = args.reps or (3 if args.quick else 7)
    target = 0.05 if args.quick else 0.2
    words = [w for w in args.filter.split(",") if w]

    contestants = [c for c in CONTESTANTS if available(c)]
    missing = [c for c in CONTESTANTS if c not in contestants]
    print(f"# python -m shmpipe.bench: {cpu_model()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, Linux {platform.release()}")
    print(f"# medians of {reps} batches of ~{target * 1000:.0f} ms; ratios from this run")
    if missing:
        print(f"# not installed, skipped: {', '.join(missing)} (pip install faster-fifo)")
    results = []
    for place, cpus in placements():
        for kind in KINDS:
            for label, size in SIZES:
                for name in contestants:
                    case = f"{place} {kind}-{label} {name}"
                    if not all(w in case for w in words):
                        continue
                    med, samples, n = measure(name, kind, size, cpus, reps, target)
                    results.append(dict(placement=place, kind=kind, size=label, bytes=size,
                                        contestant=name, median_s=med, samples_s=samples, batch=n))
                    print(f"  {case}: {fmt_value(kind, size, med)}", file=sys.stderr, flush=True)
    report(results, contestants)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(dict(cpu=cpu_model(), python=platform.python_version(), results=results), f, indent=1)
    if args.plot:
        plot(results, contestants, args.plot)
    return 0


def _lookup(results):
    return {(r["placement"], r["kind"], r["size"], r["contestant"]): r for r in results}


def report(results, contestants):
    table = _lookup(results)
    for place, _ in placements():
        rows = [(k, label, size) for k in KINDS for label, size in SIZES
                if (place, k, label, BASE) in table]
        if not rows:
            continue
        print(f"\n## {place} (roundtrip: time per round trip; throughput: one way)\n")
        print("| test | " + " | ".join(contestants) + " |")
        print("| --- " * (len(contestants) + 1) + "|")
        for kind, label, size in rows:
            base = table[(place, kind, label, BASE)]["median_s"]
            cells = []
            for name in contestants:
                r = table.get((place, kind, label, name))
                if r is None:
                    cells.append("-")
                    continue
                v = fmt_value(kind, size, r["median_s"])
                if name == BASE:
                    cells.append(f"**{v}**")
                else:
                    # How many times shmpipe is faster (>1: shmpipe wins).
                    cells.append(f"{v} ({r['median_s'] / base:.1f}x)")
            print(f"| {kind}-{label} | " + " | ".join(cells) + " |")
    print("\n(x: how many times longer than shmpipe.Pipe that contestant takes per operation)")
    goals(table)


def goals(table):
    checks = [
        ("cross-core", "roundtrip", "8B", 20.0, "8 B round trip cross-core >= 20x multiprocessing.Pipe"),
        ("same-core", "roundtrip", "8B", 1.0, "8 B round trip same-core no slower than multiprocessing.Pipe"),
        ("cross-core", "throughput", "1MiB", 3.0, "1 MiB throughput cross-core >= 3x multiprocessing.Pipe"),
        ("same-core", "throughput", "1MiB", 3.0, "1 MiB throughput same-core >= 3x multiprocessing.Pipe"),
    ]
    print("\nGoals:")
    for place, kind, label, want, text in checks:
        a = table.get((place, kind, label, BASE))
        b = table.get((place, kind, label, REFERENCE))
        if a is None or b is None:
            continue
        ratio = b["median_s"] / a["median_s"]
        print(f"  {'met ' if ratio >= want else 'MISSED'} {text}: {ratio:.1f}x")


def plot(results, contestants, outdir):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot: matplotlib is not installed (pip install matplotlib)", file=sys.stderr)
        return
    table = _lookup(results)
    places = [p for p, _ in placements()]
    fig, axes = plt.subplots(len(KINDS), len(places), figsize=(6 * len(places), 8), squeeze=False)
    for col, place in enumerate(places):
        for row, kind in enumerate(KINDS):
            ax = axes[row][col]
            width = 0.8 / len(contestants)
            for i, name in enumerate(contestants):
                xs, ys = [], []
                for j, (label, size) in enumerate(SIZES):
                    r = table.get((place, kind, label, name))
                    if r is None:
                        continue
                    xs.append(j + i * width)
                    med = r["median_s"]
                    ys.append(med * 1e6 if kind == "roundtrip" else size / med / 1e6)
                ax.bar(xs, ys, width, label=name)
            ax.set_xticks([j + 0.4 - width / 2 for j in range(len(SIZES))])
            ax.set_xticklabels([label for label, _ in SIZES])
            ax.set_yscale("log")
            ax.set_ylabel("us per round trip (lower is better)" if kind == "roundtrip"
                          else "MB/s one way (higher is better)")
            ax.set_title(f"{kind}, {place}")
            ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize="small")
    fig.suptitle(f"python -m shmpipe.bench: {cpu_model()}")
    fig.tight_layout()
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, "python-bench.png")
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


if __name__ == "__main__":
    sys.exit(main())
