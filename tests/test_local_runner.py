"""pipelines.local_runner: the local run's tunes of Beam's fixed costs change nothing a pipeline computes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import userstate

from pipelines import local_runner

REPO = Path(__file__).resolve().parents[1]


def _modules_after_beam(argv: list[str]) -> dict:
    script = textwrap.dedent(f"""
        import json, sys
        from pipelines import local_runner
        kept = local_runner.keep_beam_local({argv!r})
        import apache_beam
        from apache_beam.io.filesystems import FileSystems
        print(json.dumps({{"kept": kept, "gcsio": "apache_beam.io.gcp.gcsio" in sys.modules and
                          sys.modules["apache_beam.io.gcp.gcsio"] is not None,
                          "storage": "google.cloud.storage" in sys.modules,
                          "bigquery": sys.modules.get("apache_beam.io.gcp.bigquery") is not None,
                          "pymongo": sys.modules.get("pymongo") is not None,
                          "local": type(FileSystems.get_filesystem("/tmp")).__name__}}))
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    import json
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_local_import_says_nothing_of_the_mongodb_client_it_kept_out(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pipelines.import_lerobot", "-v", "--dataset",
                          str(REPO / "tests" / "data" / "so101_av1"), "--output", str(tmp_path / "out")],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "imported - 4/4 episodes" in out.stdout + out.stderr
    assert "bson" not in out.stdout + out.stderr


def test_a_local_command_does_not_load_beams_gcp_modules():
    found = _modules_after_beam(["--dataset", "d", "--output", "o"])
    assert found == {"kept": True, "gcsio": False, "storage": False, "bigquery": False, "pymongo": False,
                     "local": "LocalFileSystem"}


@pytest.mark.parametrize("runner", ["DataflowRunner", "dataflow"])
def test_a_dataflow_command_line_keeps_beams_gcp_modules(runner):
    found = _modules_after_beam(["--runner", runner, "--dataset", "d"])
    assert found["kept"] is False
    assert found["gcsio"] and found["bigquery"]  # Dataflow's own libraries, as Beam loads them
    assert found["pymongo"]  # and what else Beam loads when it is installed
    assert found["local"] == "LocalFileSystem"


@pytest.mark.parametrize("argv", [["render", "--import", "o", "--output", "gs://b/samples"],
                                  ["-q", "render", "--import", "o", "--output", "s"]])
def test_render_keeps_beams_gcp_modules(argv):
    """render writes through Beam's IOs: a gs:// output needs Beam's GCS FileSystem even on a local runner."""
    found = _modules_after_beam(argv)
    assert found["kept"] is False and found["gcsio"] and found["bigquery"]


def test_names_local_runner():
    assert local_runner.names_local_runner([])
    assert local_runner.names_local_runner(["--runner=DirectRunner"])
    assert local_runner.names_local_runner(["--runner", "direct"])
    assert local_runner.names_local_runner(["--runner", "FnApiRunner"])
    assert not local_runner.names_local_runner(["--runner=DataflowRunner"])
    assert not local_runner.names_local_runner(["--runner", "PrismRunner"])


class _Stateful(beam.DoFn):
    COUNT = userstate.ReadModifyWriteStateSpec("count", VarIntCoder())

    def process(self, element, count=beam.DoFn.StateParam(COUNT)):
        n = (count.read() or 0) + 1
        count.write(n)
        yield element[0], n


class _Plain(beam.DoFn):
    def process(self, element):
        yield element


class _HoldsABoundMethod(beam.DoFn):
    def __init__(self, stateful: _Stateful) -> None:
        self.inner = stateful.process  # a bound method of another DoFn, with a state parameter

    def process(self, element):
        yield element


def test_dofn_specs_are_kept_per_class_and_equal_beams():
    local_runner.tune_local_runner()
    tuned = userstate.get_dofn_specs
    assert getattr(tuned, "_lerobot_tuned", False)
    original = tuned.__wrapped__
    for dofn in (_Stateful(), _Plain(), _HoldsABoundMethod(_Stateful())):
        assert tuned(dofn) == original(dofn)
        assert tuned(dofn) == original(dofn)  # from the cache the second time
    assert [s.name for s in tuned(_Stateful())[0]] == ["count"]
    assert tuned(_Plain()) == (set(), set())
    assert [s.name for s in tuned(_HoldsABoundMethod(_Stateful()))[0]] == ["count"]  # asked, not cached by class
    specs = tuned(_Stateful())[0]
    specs.clear()  # a caller's set is its own
    assert [s.name for s in tuned(_Stateful())[0]] == ["count"]


def test_the_state_sampler_samples_every_20_ms():
    from apache_beam.runners.worker import statesampler
    from apache_beam.utils.counters import CounterFactory

    local_runner.tune_local_runner()
    sampler = statesampler.StateSampler("stage", CounterFactory())
    assert sampler.sampling_period_ms == local_runner.SAMPLING_PERIOD_MS == 20
    assert isinstance(sampler, statesampler.StateSampler.__mro__[1])  # still Beam's sampler


def test_a_stateful_pipeline_runs_the_same_once_tuned():
    local_runner.tune_local_runner()
    with BeamTestPipeline() as p:
        out = (p | beam.Create([("a", 1), ("a", 2), ("b", 3), ("a", 4)]) | beam.ParDo(_Stateful())
               | beam.combiners.Top.Of(3))
        assert_that(out, equal_to([[("b", 1), ("a", 3), ("a", 2)]]))


def test_option_views_are_kept_per_options_and_class_and_share_the_values():
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions, TypeOptions

    local_runner.tune_local_runner()
    options = PipelineOptions(["--runner", "DirectRunner", "--pipeline_type_check"])
    view = options.view_as(TypeOptions)
    assert options.view_as(TypeOptions) is view
    assert view.pipeline_type_check is True
    options.view_as(StandardOptions).streaming = True  # a value set through any view is every view's
    assert options.view_as(StandardOptions).streaming is True and options.get_all_options()["streaming"] is True
    other = PipelineOptions(["--runner", "DirectRunner", "--no_pipeline_type_check"])
    assert other.view_as(TypeOptions) is not view and other.view_as(TypeOptions).pipeline_type_check is False
    assert options.view_as(TypeOptions).pipeline_type_check is True
    options._flags = ["--runner", "DirectRunner"]  # Beam's re-parse replaces the flags: views are built anew
    assert options.view_as(TypeOptions) is not view


def test_dofn_specs_of_beams_exception_handling_wrapper_are_kept_and_equal_beams():
    from apache_beam.transforms.core import _ExceptionHandlingWrapperDoFn

    local_runner.tune_local_runner()
    tuned = userstate.get_dofn_specs
    wrappers = [_ExceptionHandlingWrapperDoFn(fn, "bad", (Exception,), False, None, False)
                for fn in (_Plain(), _Plain())]
    assert all(type(w.__dict__["process"]).__name__ == "method" for w in wrappers)  # a bound method of its own
    for w in wrappers:
        assert tuned(w) == tuned.__wrapped__(w) == (set(), set())
    unsafe = _ExceptionHandlingWrapperDoFn(_Stateful(), "bad", (Exception,), False, None, True)
    assert tuned(unsafe) == tuned.__wrapped__(unsafe)  # a function made per instance: asked, not kept
