"""Render an import's language annotations into per-frame training samples with a LeRobot recipe.

    lerobot-import render --recipe R.yaml --input OUT --output SAMPLES [--format parquet|jsonl]
        [--tasks DATASET_ROOT] [Beam pipeline options]

Reads the episodes of an import (either layout), renders every frame as LeRobot's
`RenderMessagesStep` would, and writes SAMPLES/samples-SSSSS-of-NNNNN.parquet (or .jsonl).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Optional, Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from transforms import storage
from transforms.language import recipes
from transforms.read_episodes import ReadImportedEpisodes
from transforms.render_samples import SAMPLE_SCHEMA, RenderTrainingSamples, load_tasks


def render_parser() -> argparse.ArgumentParser:
    """The command's own flags; everything else is a Beam pipeline option (the import's --output is a
    PipelineOptions flag already, so these are parsed apart, as Beam's wordcount does)."""
    parser = argparse.ArgumentParser(prog="lerobot-import render", description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", required=True, help="Recipe YAML (local path or fsspec URL).")
    parser.add_argument("--input", required=True, help="Output root of an import (local path or fsspec URL).")
    parser.add_argument("--output", required=True, help="Folder for the samples (local path or gs://).")
    parser.add_argument("--format", default="parquet", choices=("parquet", "jsonl"))
    parser.add_argument("--tasks", default=None,
                        help="Dataset root whose meta/tasks.parquet names the tasks (default: the dataset "
                             "recorded in the import's manifest.json).")
    return parser


def build_pipeline(opts: argparse.Namespace, options: PipelineOptions) -> beam.Pipeline:
    recipe_text = storage.read_bytes(storage.normalize_root(opts.recipe), what="recipe", file=opts.recipe).decode()
    try:
        recipes.TrainingRecipe.from_yaml(recipe_text)
    except recipes.RecipeError as ex:
        raise SystemExit(f"error: recipe {opts.recipe}: {ex}")
    source = storage.normalize_root(opts.input)
    dataset = opts.tasks
    if dataset is None:
        manifest = json.loads(storage.read_bytes(storage.join(source, "manifest.json"), what="manifest",
                                                 file="manifest.json"))
        dataset = manifest["dataset"]
    tasks = load_tasks(storage.normalize_root(dataset))
    prefix = opts.output.rstrip("/") + "/samples"
    p = beam.Pipeline(options=options)
    samples = (p
               | "ReadEpisodes" >> ReadImportedEpisodes(source)
               | "Render" >> RenderTrainingSamples(recipe_text, tasks))
    if opts.format == "parquet":
        _ = samples | "WriteParquet" >> beam.io.WriteToParquet(prefix, SAMPLE_SCHEMA, file_name_suffix=".parquet",
                                                                codec="zstd")
    else:
        _ = (samples
             | "ToJson" >> beam.Map(lambda s: json.dumps({**s, "messages": json.loads(s["messages"])},
                                                         ensure_ascii=False, sort_keys=True))
             | "WriteJsonl" >> beam.io.WriteToText(prefix, file_name_suffix=".jsonl"))
    return p


def run(argv: Optional[Sequence[str]] = None) -> int:
    opts, beam_args = render_parser().parse_known_args(list(sys.argv[1:] if argv is None else argv))
    build_pipeline(opts, PipelineOptions(beam_args)).run().wait_until_finish()
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    sys.exit(run())
