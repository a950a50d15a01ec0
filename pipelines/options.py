"""Command-line options of the import pipeline, as a Beam PipelineOptions subclass.

Being PipelineOptions, they travel with the pipeline (Dataflow shows them, Flex Templates map their
parameters onto them) and mix with Beam's own flags on one command line. Their help texts are what
`lerobot-import --help` prints: one line of meaning each, and the default. They are declared in
`pipelines.arguments`, which `--help` reads without importing Beam.
"""

from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import arguments


class ImportOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        arguments.add_import_arguments(parser)


class RunOptions(PipelineOptions):
    """Options of a run that waits for its job (the command line), not of the job itself: the Flex
    Template launcher returns before its job ends and takes no lease, so the template does not offer them."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        arguments.add_run_arguments(parser)
