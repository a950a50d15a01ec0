"""Bulk imports: several datasets in one run, one failing, incremental skips and --force."""

from __future__ import annotations

import json
import os

from tests.helpers import read_errors, read_manifest, run_import
from tests.dataset_factory import DatasetSpec, edit_info, write_dataset


def _three_datasets(base):
    for i, name in enumerate(("alpha", "beta", "gamma")):
        write_dataset(base / name, DatasetSpec(lengths=(3 + i, 4), seed=i))
    edit_info(base / "beta", lambda info: info.update(codebase_version="v2.1"))  # beta fails
    return base


def test_bulk_glob_one_failing_then_incremental_then_force(tmp_path, capsys):
    base = _three_datasets(tmp_path / "datasets")
    out = tmp_path / "out"
    assert run_import([], out, "--datasets", str(base / "*")) == 1
    printed = capsys.readouterr().out
    for name, status in (("alpha", "imported"), ("beta", "failed"), ("gamma", "imported")):
        assert read_manifest(out / name)["status"] == status
        assert f"{base / name}: {status}" in printed
    assert (out / "alpha" / "episodes" / "chunk-000" / "file-000.parquet").exists()
    assert [(e["rule"], e["episode_index"]) for e in read_errors(out / "beta")] == [
        ("codebase_version", None), ("file_failed", 0), ("file_failed", 1)]
    first_runs = {n: read_manifest(out / n)["run_id"] for n in ("alpha", "beta", "gamma")}

    # Second run: unchanged datasets are skipped, the failed one is tried again.
    assert run_import([], out, "--datasets", str(base / "*")) == 1
    printed = capsys.readouterr().out
    assert f"{base / 'alpha'}: skipped" in printed and f"{base / 'gamma'}: skipped" in printed
    assert read_manifest(out / "alpha")["run_id"] == first_runs["alpha"]
    assert read_manifest(out / "beta")["run_id"] != first_runs["beta"]

    # A changed file makes its dataset import again; fixing beta makes it import.
    data = base / "gamma" / "data" / "chunk-000" / "file-000.parquet"
    os.utime(data, ns=(data.stat().st_atime_ns, data.stat().st_mtime_ns + 10**9))
    edit_info(base / "beta", lambda info: info.update(codebase_version="v3.0"))
    assert run_import([], out, "--datasets", str(base / "*")) == 0
    printed = capsys.readouterr().out
    assert f"{base / 'alpha'}: skipped" in printed
    assert f"{base / 'beta'}: imported" in printed and f"{base / 'gamma'}: imported" in printed

    # Options that change the output, or --force, redo an up-to-date dataset.
    assert run_import([], out, "--datasets", str(base / "alpha"), "--inline-index") == 0
    assert read_manifest(out / "alpha")["options"]["inline_index"] is True
    before = read_manifest(out / "alpha")["run_id"]
    assert run_import([], out, "--datasets", str(base / "alpha"), "--inline-index", "--force") == 0
    assert read_manifest(out / "alpha")["run_id"] != before


def test_datasets_from_a_list_file_and_commas(tmp_path, capsys):
    base = _three_datasets(tmp_path / "datasets")
    listing = tmp_path / "datasets.txt"
    listing.write_text(f"# nightly\n{base / 'alpha'}\n\n{base / 'gamma'}  # second\n")
    out = tmp_path / "out"
    assert run_import([], out, "--datasets", f"@{listing}") == 0
    assert sorted(p.name for p in out.iterdir()) == ["alpha", "bulk_report.json", "gamma"]
    out2 = tmp_path / "out2"
    assert run_import([], out2, "--datasets", f"{base / 'alpha'},{base / 'beta'}") == 1
    assert json.loads((out2 / "alpha" / "manifest.json").read_text())["status"] == "imported"
