"""`lerobot-import render`: an import's language annotations -> per-frame training samples, rendered with a
LeRobot training recipe exactly as LeRobot's RenderMessagesStep renders them.

Reads the episodes of an import (either layout), renders every frame and writes
SAMPLES/samples-SSSSS-of-NNNNN.parquet (or .jsonl) and SAMPLES/errors.jsonl. A frame that cannot be
rendered (LeRobot raises for it, e.g. "Ambiguous resolver") is listed in errors.jsonl with its global
index, episode, frame, blend component and the cause; every other frame is still rendered, and the
command then exits 1, saying how many frames failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import sys
from typing import TYPE_CHECKING, Optional, Sequence

from pipelines import interrupts
from transforms.base import storage
from transforms.output import paths
from transforms.base.errors import LeRobotImportError
from transforms.output.lease import LeaseHeld

if TYPE_CHECKING:  # Beam and the render steps are imported to run, not for --help
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

EXAMPLES = """\
examples:
  lerobot-import render --recipe subtask_mem.yaml --input out/language --output samples
  lerobot-import render --recipe gs://bucket/recipes/subtask_mem.yaml --input gs://bucket/imports/language \\
      --output gs://bucket/samples/language --format jsonl \\
      --runner DataflowRunner --project PROJECT --region REGION --temp_location gs://bucket/tmp

Every other option is an Apache Beam pipeline option (--runner, --direct_num_workers, Dataflow's
--project/--region/--temp_location, ...): see Beam's documentation of PipelineOptions.
Exit status: 0 when every frame rendered, 1 when a frame could not be rendered (see SAMPLES/errors.jsonl)
or the recipe, the import or the tasks could not be read, 2 when the command line is wrong.
"""


def render_parser() -> argparse.ArgumentParser:
    """The command's own options; everything else is a Beam pipeline option (parsed apart, as Beam's
    wordcount does, because the import's --output is a PipelineOptions flag already)."""
    parser = argparse.ArgumentParser(prog="lerobot-import render", description=__doc__,
                                     epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", required=True, metavar="FILE",
                        help="The recipe: a LeRobot training-recipe YAML file, local path or URL (required). "
                             "At most 1 MiB; YAML anchors and aliases are refused.")
    parser.add_argument("--input", required=True, metavar="OUT",
                        help="The output root of an import (`lerobot-import --output OUT`), local path or URL "
                             "(required).")
    parser.add_argument("--output", required=True, metavar="SAMPLES",
                        help="Folder for the samples and errors.jsonl, local path or URL (required).")
    parser.add_argument("--format", default="parquet", choices=("parquet", "jsonl"),
                        help="Samples file format. Default: parquet (messages as JSON text); jsonl writes one "
                             "JSON object per sample.")
    parser.add_argument("--tasks", default=None, metavar="DATASET_ROOT",
                        help="Dataset root whose meta/tasks.parquet names each frame's task. Default: the "
                             "dataset recorded in the import's manifest.json.")
    return parser


def _read_recipe(path: str) -> str:
    """The recipe file's text, checked (a bad recipe stops the command before anything runs)."""
    from transforms.language.recipe import parse_recipe, read_recipe_file
    text = read_recipe_file(path)
    parse_recipe(text, name=path)
    return text


def _dataset_root(source: str, tasks: Optional[str]) -> str:
    """The dataset whose tasks.parquet names the tasks: --tasks, else the one the import's manifest names."""
    if tasks is not None:
        return storage.normalize_root(tasks)
    from transforms.output import safety
    found = safety.read_manifest(source)  # bounded, a regular file, its depth and paths checked
    if found.problem is not None:
        raise found.problem
    if found.doc is None:
        raise LeRobotImportError("file_missing", f"{source} holds no manifest.json: --input names the output of an "
                                 "import (`lerobot-import --output OUT`)", file="manifest.json")
    dataset = (found.doc or {}).get("dataset")
    if not isinstance(dataset, str) or not dataset:
        raise LeRobotImportError("io", f"{source}/manifest.json names no dataset: give its root with --tasks",
                                 file="manifest.json")
    return storage.normalize_root(dataset)


def placement_problem(source: str, output: str, dataset: Optional[str]) -> Optional[str]:
    """Why writing samples to `output` could destroy an import or a dataset, or None.

    The samples and their errors.jsonl may not go into the import being read, its dataset, or any other
    import or dataset (a folder with a manifest.json or a meta/info.json, itself or above it): an
    import's own errors.jsonl would be overwritten, its folders filled with files it would report as
    unlisted."""
    out = storage.resolved(output)
    for what, root in (("the import being read", source), ("its dataset", dataset)):
        if root and storage.within(out, storage.resolved(root)):
            return (f"--output {output} is inside {what} ({root}): rendering writes samples and errors.jsonl, "
                    "which would overwrite or mix with its files. Give a folder of its own")
    for folder in _self_and_parents(out):
        for marker, what in ((paths.MANIFEST, "an import"), ("meta/info.json", "a dataset")):
            if storage.exists(storage.join(folder, marker)):
                return (f"--output {output} is inside {what} ({folder} holds {marker}): rendering would overwrite "
                        "or mix with its files. Give a folder of its own")
    return None


def _self_and_parents(uri: str) -> list[str]:
    """`uri` and, for a local path, every folder above it (a bucket path: itself only, no listing cost)."""
    if not uri.startswith("file://"):
        return [uri]
    path, found = uri[len("file://"):], []
    while True:
        found.append("file://" + path)
        parent = os.path.dirname(path)
        if parent == path:
            return found
        path = parent


def build_pipeline(opts: argparse.Namespace, options: PipelineOptions, recipe_text: str,
                   tasks: dict[int, str], *, into: Optional[str] = None) -> beam.Pipeline:
    """The render pipeline: read the import's episodes, render them, write samples and errors.jsonl.

    Args:
        opts: the command's options (`render_parser`).
        options: Beam's pipeline options.
        recipe_text: the recipe's YAML text.
        tasks: task_index -> task.
        into: the folder the files are written to (default: --output; the command writes a staging
            folder inside it, `staging_folder`, and moves the files in once the pipeline succeeded).

    Returns:
        The pipeline, not yet run.
    """
    import apache_beam as beam

    from transforms.read_episodes import ReadImportedEpisodes
    from transforms.render_samples import (FAILURES, SAMPLE_SCHEMA, SAMPLES, RenderTrainingSamples,
                                           WriteRenderFailures)

    source = storage.normalize_root(opts.input)
    into = into or opts.output
    prefix = into.rstrip("/") + "/samples"
    p = beam.Pipeline(options=options)
    rendered = (p
                | "ReadEpisodes" >> ReadImportedEpisodes(source)
                | "Render" >> RenderTrainingSamples(recipe_text, tasks, recipe_name=opts.recipe))
    samples = rendered[SAMPLES]
    if opts.format == "parquet":
        _ = samples | "WriteParquet" >> beam.io.WriteToParquet(prefix, SAMPLE_SCHEMA, file_name_suffix=".parquet",
                                                                codec="zstd")
    else:
        _ = (samples
             | "ToJson" >> beam.Map(lambda s: json.dumps({**s, "messages": json.loads(s["messages"])},
                                                         ensure_ascii=False, sort_keys=True))
             | "WriteJsonl" >> beam.io.WriteToText(prefix, file_name_suffix=".jsonl"))
    _ = rendered[FAILURES] | "WriteErrors" >> WriteRenderFailures(into)
    return p


# ---- what a render writes, and how it is put in place ------------------------------------------
#
# Beam writes the samples and errors.jsonl into a hidden staging folder of the output, and the command
# moves them into place once the pipeline has succeeded, under the output's lease: a render that fails
# or is interrupted leaves the last render's files as they were (and a staging folder the next render
# removes), two renders into one output never interleave, and a render that writes fewer sample files
# than the last one leaves none of the last one's behind.

#: The staging folders of renders: hidden, with the temporary mark (`OUT/.render.tmp-<run id>`).
STAGING_PREFIX = ".render" + storage.TMP_MARK
_RENDERED = re.compile(r"samples-\d{5}-of-\d{5}\.(parquet|jsonl)|errors\.jsonl")


def staging_folder(output: str, run_id: str) -> str:
    """The folder a render of run `run_id` writes its files to before they are moved into `output` (as
    `output` is written: a local path stays one, which Beam's file sinks take)."""
    return storage.join(output, STAGING_PREFIX + run_id)


def rendered_files(folder: str) -> list[str]:
    """The names of the files a render writes (samples-NNNNN-of-NNNNN.*, errors.jsonl) found in `folder`:
    the only files of an output a render replaces or removes (a user's own files there stay)."""
    return [name for name in storage.list_dir(folder) if _RENDERED.fullmatch(name)]


def remove_staging(output: str) -> None:
    """Remove every staging folder of `output` (the caller holds its lease: no other render is writing)."""
    root = storage.normalize_root(output)
    for name in storage.list_dir(root, dirs=True):
        if name.startswith(STAGING_PREFIX):
            fs, path = storage.filesystem(storage.join(root, name))
            storage.with_retries(lambda: fs.rm(path, recursive=True))


def commit_render(output: str, staging: str) -> None:
    """Move a finished render's files from `staging` into `output`, then remove the last render's files
    that this one did not write again, and the staging folder. errors.jsonl moves last: once it is new,
    every sample file is too."""
    root = storage.normalize_root(output)
    new = rendered_files(staging)
    old = set(rendered_files(root)) - set(new)
    for name in sorted(new, key=lambda n: n == "errors.jsonl"):
        storage.commit(storage.join(staging, name), storage.join(root, name))
    for name in sorted(old):
        storage.remove(storage.join(root, name))
    remove_staging(output)


def _count_lines(uri: str) -> int:
    fs, path = storage.filesystem(uri)
    with fs.open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def _counter(result, name: str) -> Optional[int]:
    """A counter of the finished run, when the runner reports metrics."""
    from apache_beam.metrics.metric import MetricsFilter

    from transforms.render_samples import NAMESPACE
    try:
        found = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE).with_name(name))["counters"]
    except (NotImplementedError, AttributeError, KeyError):
        return None
    if not found:
        return None
    return sum(int(c.committed if c.committed is not None else c.attempted) for c in found)


def _render_under_lease(opts: argparse.Namespace, options: PipelineOptions, recipe_text: str,
                        tasks: dict[int, str]):
    """Run the render into a staging folder under the output's lease, then put its files in place.

    Raises:
        LeaseHeld: another render (or an import) holds the output's lease.
        LeRobotImportError: the lease is no lease (rule `lease`), the output is not writable.
    """
    import uuid

    from transforms.output import lease

    run_id = uuid.uuid4().hex
    with contextlib.ExitStack() as stack:
        if lease.supported(opts.output):
            with interrupts.deferred():  # a lease taken is a lease the stack releases
                stack.enter_context(lease.holding(opts.output, run_id=run_id, job="lerobot-import render"))
        remove_staging(opts.output)  # what an interrupted render left: no one else writes here now
        staging = staging_folder(opts.output, run_id)
        try:
            result = build_pipeline(opts, options, recipe_text, tasks, into=staging).run()
            result.wait_until_finish()
            with interrupts.deferred():  # once the files start moving, all of them move
                commit_render(opts.output, staging)
        except BaseException:
            with contextlib.suppress(OSError):
                remove_staging(opts.output)
            raise
    return result


def run(argv: Optional[Sequence[str]] = None) -> int:
    """Run `lerobot-import render`.

    Args:
        argv: the command line after `render` (default: sys.argv[1:]).

    Returns:
        The exit status: 0 when every frame rendered, 1 when a frame failed or an input cannot be read.
    """
    opts, beam_args = render_parser().parse_known_args(list(sys.argv[1:] if argv is None else argv))
    from apache_beam.options.pipeline_options import PipelineOptions

    from transforms.language.errors import RecipeError
    from transforms.render_samples import errors_path, load_tasks
    try:
        recipe_text = _read_recipe(opts.recipe)
        dataset = _dataset_root(storage.normalize_root(opts.input), opts.tasks)
        problem = placement_problem(opts.input, opts.output, dataset)
        if problem is not None:
            print(f"error: {problem}", file=sys.stderr)
            return 1
        tasks = load_tasks(dataset)
    except (RecipeError, LeRobotImportError) as ex:
        print(f"error: {ex}", file=sys.stderr)
        return 1
    from pipelines.runners import runner_problem
    beam_options = PipelineOptions(beam_args)
    problem = runner_problem(beam_options)
    if problem:  # before the lease: Beam would say it only once the pipeline is submitted, or wait instead
        print(f"error: {problem}", file=sys.stderr)
        return 1
    try:
        result = _render_under_lease(opts, beam_options, recipe_text, tasks)
    except LeaseHeld as ex:
        print(f"error: the output {ex.output} is leased by {ex.holder.describe()}: another render (or an import) is "
              "writing it; render again once it has finished (a lease of a run that died expires, and is then taken "
              "over)", file=sys.stderr)
        return 1
    except LeRobotImportError as ex:
        print(f"error: {ex}", file=sys.stderr)
        return 1
    failed = _count_lines(errors_path(opts.output))
    samples = _counter(result, "samples")
    frames = _counter(result, "frames")
    counts = f"{samples} samples from {frames} frames" if samples is not None and frames is not None else "samples"
    if failed:
        print(f"rendered {counts} -> {opts.output}; {failed} frame{'s' if failed != 1 else ''} could not be "
              f"rendered: see {errors_path(opts.output)}", file=sys.stderr)
        return 1
    print(f"rendered {counts} -> {opts.output}; every frame rendered")
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    sys.exit(run())
