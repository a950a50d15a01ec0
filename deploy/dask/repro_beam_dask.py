"""Minimal pipelines showing Beam's own DaskRunner (apache_beam.runners.dask, apache-beam 2.77) losing work
without an error. Each pipeline writes what reaches its sinks to a list the workers cannot share, so every
sink here returns its elements through a file under a temporary folder; each case prints what Beam's
DirectRunner gives and what the DaskRunner gives.

    pip install 'apache-beam[dask]==2.77.*' distributed
    python deploy/dask/repro_beam_dask.py
    python deploy/dask/repro_beam_dask.py pipelines.dask_runner.DaskRunner   # this project's translation
"""

import os
import sys
import tempfile

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

DASK = sys.argv[1] if len(sys.argv) > 1 else "apache_beam.runners.dask.dask_runner.DaskRunner"
OUT = tempfile.mkdtemp(prefix="beam-dask-repro-")


def sink(name):
    def write(x):
        with open(os.path.join(OUT, name), "a") as f:
            f.write(f"{x!r}\n")
    return write


def seen(name):
    path = os.path.join(OUT, name)
    rows = open(path).read().splitlines() if os.path.exists(path) else []
    if os.path.exists(path):
        os.remove(path)
    return sorted(rows)


class EvenOdd(beam.DoFn):
    def process(self, x):
        yield beam.pvalue.TaggedOutput("odd", x) if x % 2 else x


class CountInFinishBundle(beam.DoFn):
    def start_bundle(self):
        self.n = 0

    def process(self, x):
        self.n += 1

    def finish_bundle(self):
        yield beam.transforms.window.GlobalWindows.windowed_value(self.n)


def tagged_outputs(p):  # 1. every consumer of a multi-output ParDo gets the union of its outputs
    r = p | beam.Create([1, 2, 3, 4]) | beam.ParDo(EvenOdd()).with_outputs("odd", main="even")
    r.even | "even" >> beam.Map(sink("even"))
    return "even"


def finish_bundle(p):  # 2. what finish_bundle yields is dropped
    p | beam.Create([1, 2, 3]) | beam.ParDo(CountInFinishBundle()) | beam.Map(sink("counted"))
    return "counted"


def two_leaves(p):  # 3. only the last leaf of the graph is computed
    xs = p | beam.Create([1, 2])
    xs | "first" >> beam.Map(sink("first"))
    xs | "second" >> beam.Map(lambda x: x)
    return "first"


def metrics(p):  # 4. metrics() raises NotImplementedError
    p | beam.Create([1]) | beam.Map(lambda x: beam.metrics.Metrics.counter("repro", "n").inc())
    return None


def run(case, options):
    p = beam.Pipeline(options=PipelineOptions(options))
    name = case(p)
    result = p.run()
    result.wait_until_finish()
    if name is None:
        try:
            return f"metrics: {result.metrics().query()['counters']}"
        except NotImplementedError as ex:
            return f"metrics: NotImplementedError({ex})"
    return f"{name}: {seen(name)}"


if __name__ == "__main__":
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1",
                      dashboard_address=None) as cluster:
        dask = ["--runner", DASK, "--dask_client_address", cluster.scheduler_address]
        for case in (tagged_outputs, finish_bundle, two_leaves, metrics):
            print(f"{case.__name__}:\n  DirectRunner: {run(case, ['--runner', 'DirectRunner'])}\n"
                  f"  DaskRunner:   {run(case, dask)}")
        try:
            PipelineOptions(["--runner", "DaskRunner"])
            beam.Pipeline(options=PipelineOptions(["--runner", "DaskRunner"]))
            print("short name DaskRunner: resolved")
        except ValueError as ex:
            print(f"short name DaskRunner: {str(ex).splitlines()[0]}")
    sys.exit(0)
