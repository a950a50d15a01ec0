"""lerobot-beam-import: an Apache Beam pipeline that imports LeRobot v3 datasets as typed episodes.

This file is also what Dataflow workers install (--setup_file ./setup.py).
"""

from setuptools import find_packages, setup

setup(
    name="lerobot-beam-import",
    version="0.1.0",
    description="Import LeRobot v3 datasets as typed, queryable episodes with Apache Beam",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["pipelines", "pipelines.*", "transforms", "transforms.*"]),
    install_requires=[
        # Beam without its Google Cloud client libraries: a local import never uses them, and importing them
        # (BigQuery's, Pub/Sub's, ...) costs every run half a second. Dataflow needs them: the `dataflow` extra.
        "apache-beam>=2.76,<2.78",
        # Inside apache-beam 2.76/2.77's own bounds.
        "pyarrow>=14.0.1,<26",
        "numpy>=1.22,<2.5",
        "fsspec>=2024.2",
        "gcsfs>=2024.2",
        "pyyaml>=6",
    ],
    extras_require={
        # --runner DataflowRunner: Beam's Google Cloud client libraries (the Flex Template image installs this)
        "dataflow": ["apache-beam[gcp]>=2.76,<2.78"],
        "video": ["av>=14"],
        # --runner DaskRunner on a dask.distributed cluster (pipelines.dask_runner knows Beam 2.77's internals);
        # every worker of the cluster needs it too, with the project itself
        "dask": ["apache-beam[dask]>=2.77,<2.78", "distributed>=2024.8"],
        # hf://datasets/OWNER/NAME[@REVISION] dataset roots, read in place from the Hugging Face Hub
        "hub": ["huggingface_hub>=0.30"],
        # transforms.reader.ImportedFrames: training from an import with PyTorch (the CPU build is enough)
        "torch": ["torch>=2.2"],
        "test": [
            "pytest>=8",
            # the Dataflow dry runs of the deploy tests
            "apache-beam[gcp]>=2.76,<2.78",
            # the README's test command spreads the test modules over the machine's cores
            "pytest-xdist>=3",
            "hypothesis>=6",
            "av>=14",
            "spiral-sdk==0.16.56",
            # the lint step of .ci/run (its settings are on that command line)
            "ruff==0.17.6",
            # storage emulators for the gs:// and s3:// round trips (loopback, in-process)
            "gcp-storage-emulator>=2026.7.19",
            "moto[server]>=5,<6",
            "s3fs>=2024.2",
            # the Hub stand-in tests drive huggingface_hub's own client
            "huggingface_hub>=0.30",
            # the README's query examples (transforms.reader.query) run against both engines
            "duckdb>=1.3",
            # tests/test_dask_cluster.py: the import on a LocalCluster of worker processes
            "apache-beam[dask]>=2.77,<2.78",
            "distributed>=2024.8",
            "polars>=1.30",
            # PyTorch is not here: `torch` from PyPI brings the CUDA build (gigabytes). The README's test
            # command installs torch==2.13.0 from PyTorch's CPU index beside this extra.
        ],
    },
    entry_points={"console_scripts": ["lerobot-import=pipelines.cli:main"]},
)
