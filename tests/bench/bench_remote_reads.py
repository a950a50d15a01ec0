"""Training reads from object storage against local reads, and the first batch of a large import (a script).

    python tests/bench/bench_remote_reads.py WORK [--delay 0.02] [--items 400] [--rounds 3] \\
        [--read-ahead 0 --read-ahead 16]
    python tests/bench/bench_remote_reads.py WORK --first-batch IMPORT [--rounds 3]

Remote rate: makes (once, under WORK) a synthetic LeRobot v3 dataset (`synth_dataset.py`: 60 episodes x 300 frames,
2 AV1 cameras 320x240, g=2, 30 episodes per MP4) and its import, uploads the dataset to a bucket of the GCS
emulator (gcp-storage-emulator, served by a threaded HTTP server that sleeps `--delay` seconds before answering
every request, as a store's round trip), and times `DataLoader(ImportedFrames(...), num_workers=2,
shuffle=True, batch_size=8)` over `--items` items after its first batch, items/s (wall): `local` reads the
dataset from disk, `gs` the same import with `dataset_root=gs://...` (every MP4 byte and meta/ file from the
bucket), once per `--read-ahead` setting (ImportedFrames' `read_ahead=`, 0 = off). Each side runs in its own
interpreter; `delayed` reads the same files from disk through an fsspec filesystem that only adds the
delay (the emulator spends CPU on each request, on the same cores as the reader). The sides alternate,
reversed every other round. Prints each round, the medians, each side's ratio to local, and `uptime` before and
after.

First batch: the seconds from `ImportedFrames(IMPORT)` to the first batch of the two-worker shuffled loader
(construction, loader creation, worker start, the first batch), each round in a fresh interpreter, each
worker's RSS after the first batch, and the CPU seconds the main process spent until then and each worker had
spent by then (a worker has its first batch done and its second begun; CPU moves less with the machine's load
than the wall time does).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[2]
SHAPE = dict(episodes=60, frames=300, cameras=2, width=320, height=240, episodes_per_mp4=30)
BUCKET = "bench-remote"


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _delayed_filesystem():
    """`delayed://PATH`: the local file PATH, each request (a read of a range, a stat, a listing, an open) answered
    BENCH_DELAY seconds late, with nothing else between the reader and the bytes (the emulator's own CPU cost per
    request, on the same two cores, is left out)."""
    import fsspec
    from fsspec.implementations.local import LocalFileSystem
    from fsspec.spec import AbstractFileSystem

    delay = float(os.environ.get("BENCH_DELAY", "0.02"))

    class DelayedFileSystem(AbstractFileSystem):
        protocol = ("delayed",)
        root_marker = "/"

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.local = LocalFileSystem()

        @classmethod
        def _strip_protocol(cls, path):
            if isinstance(path, str) and path.startswith("delayed://"):
                path = path[len("delayed://"):]
            return LocalFileSystem._strip_protocol(path)

        def unstrip_protocol(self, name):
            return "delayed://" + name

        def cat_file(self, path, start=None, end=None, **kwargs):
            time.sleep(delay)
            return self.local.cat_file(self._strip_protocol(path), start=start, end=end)

        def info(self, path, **kwargs):
            time.sleep(delay)
            return self.local.info(self._strip_protocol(path))

        def ls(self, path, detail=True, **kwargs):
            time.sleep(delay)
            return self.local.ls(self._strip_protocol(path), detail=detail)

        def _open(self, path, mode="rb", **kwargs):
            time.sleep(delay)
            return self.local._open(self._strip_protocol(path), mode=mode)

    fsspec.register_implementation("delayed", DelayedFileSystem, clobber=True)


def child(spec: dict) -> dict:
    """One timed run, in this interpreter: items/s of the shuffled two-worker loader, or the first batch."""
    import torch

    _delayed_filesystem()

    torch.set_num_threads(1)
    from transforms.reader import ImportedFrames

    kw = {}
    if spec.get("dataset_root"):
        kw["dataset_root"] = spec["dataset_root"]
    if spec.get("read_ahead") is not None:
        kw["read_ahead"] = spec["read_ahead"]
    torch.manual_seed(spec.get("seed", 0))
    t0, c0 = time.perf_counter(), time.process_time()
    ds = ImportedFrames(spec["import"], **kw)
    loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=2, shuffle=True)
    it = iter(loader)
    next(it)
    first, main_cpu = time.perf_counter() - t0, time.process_time() - c0
    rss = [_rss_mb(p) for p in _children(os.getpid())]
    if spec.get("first_batch"):  # CPU: what the machine's load does not change as much as it does the wall time
        return {"first_batch_s": first, "worker_rss_mb": rss, "main_rss_mb": _rss_mb(os.getpid()),
                "main_cpu_s": main_cpu, "worker_cpu_s": [_cpu_s(p) for p in _children(os.getpid())]}
    n, t1 = 0, time.perf_counter()
    while n < spec["items"]:
        try:
            batch = next(it)
        except StopIteration:
            it = iter(loader)
            continue
        n += len(batch["index"])
    wall = time.perf_counter() - t1
    rss = [_rss_mb(p) for p in _children(os.getpid())] or rss
    return {"items_per_s": n / wall, "first_batch_s": first, "worker_rss_mb": rss}


def _run_child(spec: dict, env: dict) -> dict:
    proc = subprocess.run([sys.executable, str(HERE), "--child", json.dumps(spec)], capture_output=True, text=True,
                          env=env, cwd=str(REPO))
    if proc.returncode != 0:
        raise SystemExit(f"side {spec.get('name')} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def slow_gcs(delay: float):
    """The GCS emulator answering each request `delay` s late, several requests at a time (a store serves
    requests concurrently; the emulator's own server takes one at a time)."""
    sys.path.insert(0, str(REPO / "tests"))
    from http import server as http_server

    from gcp_storage_emulator import server as gcs_server

    import storage_emulators

    def run(self):
        self._httpd = http_server.ThreadingHTTPServer((self._host, self._port),
                                                      gcs_server.partial(gcs_server.RequestHandler, self._storage))
        self._httpd.daemon_threads = True
        self.is_running.set()
        self._httpd.serve_forever()

    gcs_server.APIThread.run = run
    for verb in ("do_GET", "do_HEAD", "do_POST", "do_PUT", "do_PATCH", "do_DELETE"):
        original = getattr(gcs_server.RequestHandler, verb, None)
        if original is None:
            continue

        def late(handler, _original=original):
            time.sleep(delay)
            return _original(handler)

        setattr(gcs_server.RequestHandler, verb, late)
    with storage_emulators.gcs_emulator() as url:
        yield url


def remote_main(args) -> int:
    sys.path.insert(0, str(REPO))
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    ds_root, out = work / "ds", work / "out"
    if not (out / "manifest.json").exists():
        from tests.bench.synth_dataset import make_dataset
        from tests.helpers import run_import
        make_dataset(ds_root, codec="av1", gop=2, clip_frames=30, overwrite=True, **SHAPE)
        if run_import(ds_root, out, verbosity=0) != 0:
            raise SystemExit(f"the import of {ds_root} failed: see {out}/errors.jsonl")
    print(f"data: {SHAPE}, AV1 g=2; DataLoader(num_workers=2, shuffle=True, batch_size=8), {args.items} items "
          f"after the first batch; {args.delay * 1000:g} ms added to every request of the bucket")
    print("load before:", _uptime())
    with slow_gcs(args.delay) as url:
        import fsspec
        fs = fsspec.filesystem("gs")
        fs.mkdir(BUCKET)
        t0 = time.perf_counter()
        for path in ds_root.rglob("*"):
            if path.is_file() and path.relative_to(ds_root).parts[0] in ("meta", "videos"):
                fs.put_file(str(path), f"{BUCKET}/ds/{path.relative_to(ds_root)}")
        print(f"uploaded the dataset's meta/ and videos/ in {time.perf_counter() - t0:.1f} s")
        env = {**os.environ, "STORAGE_EMULATOR_HOST": url, "PYTHONPATH": str(REPO),
               "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false", "NO_GCE_CHECK": "true", "OMP_NUM_THREADS": "1"}
        conf = {"gcs": {"token": "anon", "project": "test"}}
        env["FSSPEC_CONFIG_DIR"] = str(work / "fsspec-conf")
        Path(env["FSSPEC_CONFIG_DIR"]).mkdir(exist_ok=True)
        (Path(env["FSSPEC_CONFIG_DIR"]) / "conf.json").write_text(json.dumps(conf))
        env["BENCH_DELAY"] = str(args.delay)
        sides = [{"name": "local", "import": str(out), "dataset_root": str(ds_root), "read_ahead": None}]
        stores = {"gs": f"gs://{BUCKET}/ds", "delayed": f"delayed://{ds_root}"}
        for store in args.store or ["gs", "delayed"]:
            for ra in args.read_ahead or [None]:
                sides.append({"name": f"{store} read_ahead={ra if ra is not None else 'default'}", "import": str(out),
                              "dataset_root": stores[store], "read_ahead": ra})
        results: dict[str, list] = {s["name"]: [] for s in sides}
        for r in range(args.rounds):
            order = sides if r % 2 == 0 else sides[::-1]
            for spec in order:
                got = _run_child({**spec, "items": args.items, "seed": r}, env)
                results[spec["name"]].append(got)
                rss = ", ".join(f"{x:.0f}" for x in got["worker_rss_mb"])
                print(f"round {r + 1} {spec['name']:>24}: {got['items_per_s']:7.1f} items/s, first batch "
                      f"{got['first_batch_s']:.2f} s, worker RSS {rss} MB", flush=True)
    print("load after:", _uptime())
    local = statistics.median(g["items_per_s"] for g in results["local"])
    for name, runs in results.items():
        med = statistics.median(g["items_per_s"] for g in runs)
        print(f"median {name:>24}: {med:7.1f} items/s = {med / local:.2f}x local")
    return 0


def first_batch_main(args) -> int:
    print("load before:", _uptime())
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    runs = []
    for r in range(args.rounds):
        got = _run_child({"name": "first batch", "import": args.first_batch, "first_batch": True, "seed": r}, env)
        runs.append(got)
        print(f"round {r + 1}: first batch {got['first_batch_s']:.2f} s, worker RSS "
              f"{', '.join(f'{x:.0f}' for x in got['worker_rss_mb'])} MB, main RSS {got['main_rss_mb']:.0f} MB; "
              f"CPU s: main {got['main_cpu_s']:.2f}, workers {', '.join(f'{x:.2f}' for x in got['worker_cpu_s'])} "
              f"({_uptime().split('load average: ')[-1]})", flush=True)
    print("load after:", _uptime())
    print(f"median first batch: {statistics.median(g['first_batch_s'] for g in runs):.2f} s, CPU s: main "
          f"{statistics.median(g['main_cpu_s'] for g in runs):.2f}, a worker "
          f"{statistics.median(x for g in runs for x in g['worker_cpu_s']):.2f}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("work", nargs="?", help="where the dataset and its import are made (once)")
    ap.add_argument("--delay", type=float, default=0.02, help="seconds added to every request of the bucket")
    ap.add_argument("--items", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--read-ahead", type=int, action="append", help="ImportedFrames(read_ahead=N) of a gs side")
    ap.add_argument("--store", action="append", choices=["gs", "delayed"],
                    help="gs: the emulator's bucket; delayed: the local files behind a delay alone (default: both)")
    ap.add_argument("--first-batch", default=None, help="time the first batch of this import instead")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
        sys.path.insert(0, str(REPO))
        print(json.dumps(child(json.loads(args.child))))
        return 0
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    os.environ.setdefault("NO_GCE_CHECK", "true")
    if args.first_batch:
        return first_batch_main(args)
    if not args.work:
        ap.error("WORK is needed")
    return remote_main(args)


if __name__ == "__main__":
    sys.exit(main())
