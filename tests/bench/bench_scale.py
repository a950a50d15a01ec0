"""Benchmark: import throughput and memory at scale, 1 and 2 workers, against the reference.

    python tests/bench/bench_scale.py                      # 2,000 episodes x 150 frames x 2 cameras (300k frames)
    python tests/bench/bench_scale.py --episodes 200 --quick   # a quick, scaled-down run

Generates (tests/bench/synth_dataset.py) a dataset of EPISODES x FRAMES frames, 2 h264 cameras with real
MP4s of ~15,000 samples (faststart), 50 episodes per episodes file (40 files), 1,000 episodes per data
file, state/action float32[14],
and one twice as large. Then, in the same run, each in its own subprocess (peak RSS of every process of
its tree polled from /proc, VmHWM):
  * our import, 1 worker (FnApiRunner in-process: the process IS the worker), default layout;
  * our import, 2 workers (--direct_num_workers 2 --direct_running_mode multi_processing: SDK worker
    subprocesses; the parent runs the runner);
  * the pyarrow floor: read every data file and write it again (zstd);
  * the reference: tests/oracle.py's run() over every episodes file in ONE process;
  * our import (1 and 2 workers) on the doubled dataset, for the memory figures.
Reports frames/s (wall, pipeline start included; and marginal: the extra frames of the doubled dataset over
the extra wall time, which cancels the fixed start cost), data bytes read / data file bytes, MP4 bytes read /
moov bytes, and peak memory per worker; writes a PNG of throughput vs workers to tests/bench/results/.
Targets: per-worker throughput >= the reference's; 2 workers >= 1.7x one worker; data bytes read <= 1.1x
their size; MP4 bytes read <= 1.1x the moov bytes; per-worker peak memory within 20% when the dataset doubles.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
RESULTS = REPO / "tests" / "bench" / "results"


# ------------------------------------------------------------------------------------------------
# Running a command and watching the memory of its process tree
# ------------------------------------------------------------------------------------------------

def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def _hwm_kb(pid: int) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> Optional[float]:
    """utime + stime of a process, in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


class Measured:
    def __init__(self, wall: float, rc: int, stdout: str, stderr: str, peaks: dict[int, tuple[str, int]],
                 root_pid: int, cpu: dict[int, float], cpu_total: float) -> None:
        self.wall, self.rc, self.stdout, self.stderr = wall, rc, stdout, stderr
        self.peaks, self.root_pid, self.cpu, self.cpu_total = peaks, root_pid, cpu, cpu_total

    def _is_worker(self, pid: int) -> bool:
        cmd = self.peaks.get(pid, ("", 0))[0]
        return pid != self.root_pid and "sdk_worker" in cmd and not cmd.startswith("/bin/sh")

    def worker_cpu_s(self) -> list[float]:
        """CPU seconds of each Beam SDK worker subprocess (last seen before it exited)."""
        return sorted((s for pid, s in self.cpu.items() if self._is_worker(pid)), reverse=True)

    @property
    def root_peak_mb(self) -> float:
        return self.peaks.get(self.root_pid, ("", 0))[1] / 1024

    def worker_peaks_mb(self) -> list[float]:
        """Peak RSS of each Beam SDK worker subprocess (multi_processing), largest first."""
        return sorted((kb / 1024 for pid, (cmd, kb) in self.peaks.items() if self._is_worker(pid)), reverse=True)

    def metrics(self) -> dict[str, int]:
        m = re.search(r"^metrics: (.*)$", self.stdout, re.M)
        return {k: int(v) for k, v in (kv.split("=") for kv in m.group(1).split(", "))} if m else {}


def measure(cmd: list[str], *, poll: float = 0.05, cwd: Optional[Path] = None) -> Measured:
    """Run `cmd`, polling the peak RSS (VmHWM) of every process in its tree until it exits."""
    import resource

    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out_f, err_f = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=out_f, stderr=err_f, cwd=cwd, text=True)
    peaks: dict[int, tuple[str, int]] = {}
    cpu: dict[int, float] = {}
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            kids, todo = _children(), [proc.pid]
            while todo:
                pid = todo.pop()
                todo.extend(kids.get(pid, []))
                hwm = _hwm_kb(pid)
                if hwm is not None:
                    cmd_, old = peaks.get(pid, ("", 0))
                    peaks[pid] = (cmd_ or _cmdline(pid), max(old, hwm))
                    cpu[pid] = max(cpu.get(pid, 0.0), _cpu_s(pid) or 0.0)
            done.wait(poll)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    rc = proc.wait()
    wall = time.perf_counter() - t0
    done.set()
    watcher.join()
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_total = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)  # the whole tree, exact
    out_f.seek(0), err_f.seek(0)
    return Measured(wall, rc, out_f.read(), err_f.read(), peaks, proc.pid, cpu, cpu_total)


# ------------------------------------------------------------------------------------------------
# The measured jobs (also runnable as hidden subcommands, so each runs in its own process)
# ------------------------------------------------------------------------------------------------

def import_cmd(root: Path, out: Path, workers: int, *extra: str) -> list[str]:
    cmd = [sys.executable, "-m", "pipelines.import_lerobot", "--dataset", str(root), "--output", str(out),
           "--runner", "FnApiRunner", "-v", *extra]  # -v: the metrics line
    if workers > 1:
        cmd += ["--direct_num_workers", str(workers), "--direct_running_mode", "multi_processing"]
    return cmd


def floor_job(root: str, out: str) -> None:
    """pyarrow reads every data file and writes it again: the least an importer of the frames must do."""
    import pyarrow.parquet as pq

    t0 = time.perf_counter()
    os.makedirs(out, exist_ok=True)
    n = 0
    for i, path in enumerate(sorted(Path(root, "data").rglob("*.parquet"))):
        table = pq.read_table(path)
        n += table.num_rows
        pq.write_table(table, os.path.join(out, f"floor-{i}.parquet"), compression="zstd")
    print(f"floor: {n} frames {time.perf_counter() - t0:.3f} s")


def reference_job(root: str) -> None:
    """The reference (tests/oracle.py's run()) over every episodes file of the dataset, in this one process."""
    from tests import oracle

    t0 = time.perf_counter()
    n = 0
    for path in sorted(Path(root, "meta", "episodes").rglob("*.parquet")):
        table = oracle.run(root, str(path.relative_to(root)))
        n += sum(table.column("length").to_pylist())
    print(f"reference: {n} frames {time.perf_counter() - t0:.3f} s")


# ------------------------------------------------------------------------------------------------
# Dataset facts
# ------------------------------------------------------------------------------------------------

def moov_bytes(path: Path) -> int:
    """Size of the moov box, found by walking the top-level box headers."""
    with open(path, "rb") as f:
        size_total, pos = path.stat().st_size, 0
        while pos + 8 <= size_total:
            f.seek(pos)
            head = f.read(16)
            size, kind = struct.unpack_from(">I4s", head)
            if size == 1:
                size = struct.unpack_from(">Q", head, 8)[0]
            elif size == 0:
                size = size_total - pos
            if kind == b"moov":
                return size
            pos += size
    raise ValueError(f"{path}: no moov")


def dataset_facts(root: Path) -> dict:
    data = sorted((root / "data").rglob("*.parquet"))
    mp4s = sorted((root / "videos").rglob("*.mp4"))
    info = json.loads((root / "meta" / "info.json").read_text())
    return {"frames": info["total_frames"], "episodes": info["total_episodes"],
            "data_files": len(data), "data_bytes": sum(p.stat().st_size for p in data),
            "mp4_files": len(mp4s), "mp4_bytes": sum(p.stat().st_size for p in mp4s),
            "moov_bytes": sum(moov_bytes(p) for p in mp4s),
            "episodes_files": len(list((root / "meta" / "episodes").rglob("*.parquet")))}


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# ------------------------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=2000)
    ap.add_argument("--frames", type=int, default=150)
    ap.add_argument("--cameras", type=int, default=2)
    ap.add_argument("--codec", default="h264", choices=("h264", "hevc", "av1"))
    ap.add_argument("--episodes-per-meta-file", type=int, default=50)
    ap.add_argument("--samples-per-mp4", type=int, default=15000)
    ap.add_argument("--data-file-mb", type=float, default=100.0,
                    help="data file roll-over when --episodes-per-data-file is 0 (LeRobot's default 100)")
    ap.add_argument("--episodes-per-data-file", type=int, default=1000,
                    help="data files of 1,000 episodes (~27 MB): aligned with the episodes files, so no episodes "
                         "file spans more than the reference's 64 MiB of data files, at either size")
    ap.add_argument("--repeat", type=int, default=2, help="rounds of runs (the fastest of each kind is kept)")
    ap.add_argument("--quick", action="store_true", help="skip the doubled dataset and the reference")
    ap.add_argument("--skip-double", action="store_true")
    ap.add_argument("--skip-reference", action="store_true")
    ap.add_argument("--workdir", default=None, help="where datasets and outputs go (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the work dir")
    ap.add_argument("--plot", default=str(RESULTS / "scale_throughput.png"))
    ap.add_argument("--_floor", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--_reference", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._floor:
        return floor_job(*args._floor)
    if args._reference:
        return reference_job(args._reference)

    from tests.bench.synth_dataset import make_dataset

    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    params = dict(frames=args.frames, cameras=args.cameras, codec=args.codec,
                  episodes_per_meta_file=args.episodes_per_meta_file, samples_per_mp4=args.samples_per_mp4,
                  data_file_mb=args.data_file_mb, episodes_per_data_file=args.episodes_per_data_file or None,
                  overwrite=True, verbose=True)
    root = make_dataset(work / "ds", episodes=args.episodes, **params)
    double = None if (args.quick or args.skip_double) else make_dataset(work / "ds2", episodes=2 * args.episodes,
                                                                         **params)
    facts = dataset_facts(root)
    frames = facts["frames"]
    this = [sys.executable, str(Path(__file__).resolve())]

    def run_import(ds: Path, workers: int, tag: str) -> Measured:
        out = work / f"out-{tag}"
        shutil.rmtree(out, ignore_errors=True)
        m = measure(import_cmd(ds, out, workers), cwd=REPO)
        if m.rc != 0:
            raise SystemExit(f"import {tag} failed ({m.rc}):\n{m.stdout[-3000:]}\n{m.stderr[-3000:]}")
        shutil.rmtree(out, ignore_errors=True)
        return m

    def run_reference(ds: Path) -> Measured:
        m = measure(this + ["--_reference", str(ds)], cwd=REPO)
        if m.rc != 0:
            raise SystemExit(f"reference failed:\n{m.stderr[-3000:]}")
        return m

    def worker_peak(m: Measured, workers: int) -> float:
        return m.root_peak_mb if workers == 1 else max(m.worker_peaks_mb() or [0.0])

    def marginal(small: Optional[float], large: Optional[float]) -> Optional[float]:
        """Frames added by doubling / wall time added: the fixed start cost cancels out."""
        return frames / (large - small) if small and large and large > small else None

    # Every measurement once per round, rounds repeated (--repeat), the fastest run of each kept: a burst
    # of load from other processes then spoils one run of each kind, not all the runs of one kind.
    jobs = [("ours1", lambda: run_import(root, 1, "w1")), ("ours2", lambda: run_import(root, 2, "w2"))]
    if not (args.quick or args.skip_reference):
        jobs.append(("ref", lambda: run_reference(root)))
    if double is not None:
        jobs += [("double1", lambda: run_import(double, 1, "d1")), ("double2", lambda: run_import(double, 2, "d2"))]
        if not (args.quick or args.skip_reference):
            jobs.append(("ref_double", lambda: run_reference(double)))
    load_start = loadavg()
    print(f"load average before the measurements: {load_start}", flush=True)
    best: dict[str, Measured] = {}
    loads = []
    for _ in range(args.repeat):
        for name, job in jobs:
            loads.append(os.getloadavg()[0])
            m = job()
            best[name] = m if name not in best or m.wall < best[name].wall else best[name]
    floor = measure(this + ["--_floor", str(root), str(work / "floor")], cwd=REPO)
    shutil.rmtree(work / "floor", ignore_errors=True)
    floor_s = float(re.search(r"floor: \d+ frames ([\d.]+) s", floor.stdout).group(1))
    results = {k: v for k, v in best.items() if not k.startswith("ref")}
    refs = {k: v for k, v in best.items() if k.startswith("ref")}
    load_end = loadavg()

    # ---- figures
    o1, o2 = results["ours1"], results["ours2"]
    d1, d2 = results.get("double1"), results.get("double2")
    fps1, fps2 = frames / o1.wall, frames / o2.wall
    net1 = marginal(o1.wall, d1 and d1.wall)
    net2 = marginal(o2.wall, d2 and d2.wall)
    m1 = o1.metrics()
    ref_fps = ref_net = ref_in = None
    if "ref" in refs:
        ref = refs["ref"]
        ref_fps = frames / ref.wall
        ref_run_s = float(re.search(r"reference: \d+ frames ([\d.]+) s", ref.stdout).group(1))
        ref_in = frames / ref_run_s
        if "ref_double" in refs:
            ref_net = marginal(ref.wall, refs["ref_double"].wall)
    checks = []

    def check(name: str, ok: bool, text: str) -> None:
        checks.append((name, ok))
        print(f"  [{'PASS' if ok else 'MISS'}] {name}: {text}")

    def fmt(x: Optional[float]) -> str:
        return f"{x:10,.0f}" if x else "       n/a"

    print(f"\n== dataset: {facts['episodes']} episodes x {args.frames} frames = {frames:,} frames, "
          f"{args.cameras} {args.codec} camera(s); {facts['episodes_files']} episodes files, "
          f"{facts['data_files']} data file(s) {facts['data_bytes']:,} B, {facts['mp4_files']} MP4s "
          f"{facts['mp4_bytes']:,} B (moov {facts['moov_bytes']:,} B) -> {work}")
    print(f"load average (1, 5, 15 min): before the measurements {load_start}, after {load_end}; 1-min load at "
          f"the start of each run: min {min(loads):.2f}, max {max(loads):.2f} (our own runs count too); "
          f"{os.cpu_count()} CPUs; best of {args.repeat} run(s) each")
    print("== throughput, frames/s: wall = whole process (interpreter, imports, pipeline start included);")
    print("   marginal = frames added by doubling the dataset / wall time added (start costs cancel)")
    print(f"  ours, 1 worker : {o1.wall:7.2f} s  wall {fmt(fps1)}  marginal {fmt(net1)}   CPU {o1.cpu_total:.1f} s")
    print(f"  ours, 2 workers: {o2.wall:7.2f} s  wall {fmt(fps2)}  marginal {fmt(net2)}   CPU {o2.cpu_total:.1f} s = "
          f"runner {o2.cpu.get(o2.root_pid, 0):.1f} + workers {' + '.join(f'{x:.1f}' for x in o2.worker_cpu_s())}")
    print(f"  pyarrow floor  : {floor_s:7.2f} s  in-process {frames / floor_s:10,.0f}   "
          f"(read + write the data files, zstd; process wall {floor.wall:.2f} s)")
    if ref_fps is not None:
        print(f"  reference      : {ref.wall:7.2f} s  wall {fmt(ref_fps)}  marginal {fmt(ref_net)}   "
              f"CPU {ref.cpu_total:.1f} s; in-process {ref_in:,.0f} (oracle run() x {facts['episodes_files']} "
              f"episodes files in one process, {ref_run_s:.2f} s; peak {ref.root_peak_mb:.0f} MB)")
    if d1 is not None:
        print(f"  doubled dataset ({2 * frames:,} frames): 1 worker {d1.wall:.2f} s, 2 workers {d2.wall:.2f} s"
              + (f", reference {refs['ref_double'].wall:.2f} s" if "ref_double" in refs else ""))
    print("== CPU cost (whole process tree, user + system), less sensitive to other load than wall time")

    def cpu_line(label: str, small: Measured, large: Optional[Measured]) -> None:
        extra = (f"; the extra {frames:,} frames of the doubled dataset cost {large.cpu_total - small.cpu_total:.2f} "
                 f"CPU s = {frames / max(large.cpu_total - small.cpu_total, 1e-9):,.0f} frames per CPU s"
                 if large is not None else "")
        print(f"  {label}: {small.cpu_total:.2f} CPU s = {frames / small.cpu_total:,.0f} frames per CPU s{extra}")
    cpu_line("ours, 1 worker ", o1, d1)
    cpu_line("ours, 2 workers", o2, d2)
    if "ref" in refs:
        cpu_line("reference      ", refs["ref"], refs.get("ref_double"))
    print("== memory (peak RSS, VmHWM)")
    print(f"  1 worker : worker (= the process) {o1.root_peak_mb:.0f} MB")
    print(f"  2 workers: workers {', '.join(f'{x:.0f}' for x in o2.worker_peaks_mb())} MB; "
          f"runner process {o2.root_peak_mb:.0f} MB")
    if d1 is not None:
        print(f"  doubled dataset, 1 worker : {d1.root_peak_mb:.0f} MB")
        print(f"  doubled dataset, 2 workers: workers {', '.join(f'{x:.0f}' for x in d2.worker_peaks_mb())} MB; "
              f"runner {d2.root_peak_mb:.0f} MB")
    print("== bytes read (our import)")
    print(f"  1 worker : {', '.join(f'{k}={v}' for k, v in sorted(m1.items()))}")
    print(f"  2 workers: {', '.join(f'{k}={v}' for k, v in sorted(o2.metrics().items()))}")
    print("== targets")
    if ref_fps is not None:
        check("per-worker throughput >= reference (wall)", fps1 >= ref_fps,
              f"1 worker {fps1:,.0f} vs reference {ref_fps:,.0f} frames/s ({fps1 / ref_fps:.2f}x); "
              f"2 workers, per worker {fps2 / 2:,.0f} ({fps2 / 2 / ref_fps:.2f}x)")
        if net1 and ref_net:
            check("per-worker throughput >= reference (marginal)", net1 >= ref_net,
                  f"1 worker {net1:,.0f} vs reference {ref_net:,.0f} frames/s ({net1 / ref_net:.2f}x)")
    check("2 workers >= 1.7x one worker (wall)", fps2 >= 1.7 * fps1, f"{fps2 / fps1:.2f}x")
    if net1 and net2:
        check("2 workers >= 1.7x one worker (marginal)", net2 >= 1.7 * net1, f"{net2 / net1:.2f}x")
    rd = m1.get("data_bytes_read", 0) / facts["data_bytes"]
    check("data bytes read <= 1.1x data file bytes", rd <= 1.1,
          f"{m1.get('data_bytes_read', 0):,} / {facts['data_bytes']:,} = {rd:.3f}x; 2 workers: "
          f"{o2.metrics().get('data_bytes_read', 0) / facts['data_bytes']:.3f}x")
    rm = m1.get("mp4_bytes_read", 0) / facts["moov_bytes"]
    check("MP4 bytes read <= 1.1x moov bytes", rm <= 1.1,
          f"{m1.get('mp4_bytes_read', 0):,} / {facts['moov_bytes']:,} = {rm:.3f}x "
          f"in {m1.get('mp4_read_requests', 0)} requests for {facts['mp4_files']} files")
    if d1 is not None:
        for tag, workers in (("1 worker", 1), ("2 workers", 2)):
            a, b = worker_peak(results[f"ours{workers}"], workers), worker_peak(results[f"double{workers}"], workers)
            check(f"peak memory per worker flat when the dataset doubles ({tag})", b <= 1.2 * a,
                  f"{a:.0f} MB -> {b:.0f} MB ({b / a:.2f}x)")

    # ---- plot
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install matplotlib)")
    else:
        plot = Path(args.plot)
        plot.parent.mkdir(parents=True, exist_ok=True)
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        ax.plot([1, 2], [fps1, fps2], "o-", label="ours (wall, start included)")
        if net1 and net2:
            ax.plot([1, 2], [net1, net2], "s--", label="ours (marginal: start cost cancelled)")
        ax.plot([1, 2], [fps1, 2 * fps1], ":", color="grey", label="linear from 1 worker")
        ax.axhline(frames / floor_s, color="green", ls="-.", label="pyarrow floor (in-process)")
        if ref_fps is not None:
            ax.axhline(ref_fps, color="red", ls="--", label="reference (1 process, wall)")
        if ref_net:
            ax.axhline(ref_net, color="salmon", ls=":", label="reference (marginal)")
        ax.set_xticks([1, 2])
        ax.set_xlabel("workers (FnApiRunner, multi_processing for 2)")
        ax.set_ylabel("frames / s")
        ax.set_title(f"{frames:,} frames x {args.cameras} cameras; load {load_start} / {load_end}", fontsize=9)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(plot, dpi=110)
        print(f"plot: {plot}")
    if not args.keep and not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    missed = [name for name, ok in checks if not ok]
    print("missed targets: " + (", ".join(missed) if missed else "none"))


if __name__ == "__main__":
    main()
