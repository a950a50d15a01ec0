"""Parallel workers and reruns give the same files (DirectRunner multi_processing; a rerun into the same
output is idempotent)."""

from __future__ import annotations

from tests.helpers import corpus_path, output_files, run_import
from tests.dataset_factory import DatasetSpec, write_dataset


def test_two_workers_multi_processing_equal_one_worker(tmp_path):
    root = corpus_path("lerobot", "h264_multi_file")
    one, two = tmp_path / "one", tmp_path / "two"
    assert run_import(root, one) == 0
    assert run_import(root, two, "--direct_num_workers", "2", "--direct_running_mode", "multi_processing") == 0
    a, b = output_files(one), output_files(two)
    assert sorted(a) == sorted(b) and len([k for k in a if k.startswith("episodes/")]) == 5
    assert a == b


def test_running_twice_into_the_same_output_gives_identical_files(tmp_path):
    root = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(4, 6, 5, 3), episodes_per_meta_file=2))
    out = tmp_path / "out"
    assert run_import(root, out) == 0
    first = output_files(out)
    assert run_import(root, out) == 0
    assert output_files(out) == first
    # And a run in parts replaces the single-part output without leaving it behind.
    assert run_import(root, out, "--data-span-limit", "1") == 0
    names = sorted(k for k in output_files(out) if k.startswith("episodes/"))
    assert names == ["episodes/chunk-000/file-000.part-0000.parquet", "episodes/chunk-000/file-000.part-0001.parquet",
                     "episodes/chunk-000/file-001.part-0000.parquet", "episodes/chunk-000/file-001.part-0001.parquet"]
