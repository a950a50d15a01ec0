"""`lerobot-import check DATASET`: the quality checks alone (nothing written), on local, gs://, s3:// and hf://
datasets, reading only what the checks need; `--json`; exit 1 on errors."""

from __future__ import annotations

import json

import fsspec
import numpy as np
import pyarrow as pa
import pytest

import storage_emulators
from pipelines import check
from tests.dataset_factory import DatasetSpec, write_dataset
from tests.helpers import SAMPLE

BIG = 64 * 1024  # bytes of each frame's image: what a check must not read


def _faulty(root, *, image: bool = False):
    """Episode 1's state holds an infinity at frame 3; with `image`, a large encoded image per frame."""
    features = {"observation.state": {"dtype": "float32", "shape": [3], "names": ["x", "y", "z"]},
                "action": {"dtype": "float32", "shape": [3], "names": ["x", "y", "z"]}}
    if image:
        features["observation.images.top"] = {"dtype": "image", "shape": [8, 8, 3], "names": None}
    rng = np.random.default_rng(3)

    def mutate(table, _):
        state = table.column("observation.state").combine_chunks()
        values = state.flatten().to_numpy().reshape(len(state), -1).copy()
        values[5 + 3, 0] = np.inf
        i = table.schema.get_field_index("observation.state")
        table = table.set_column(i, table.schema.field(i), pa.FixedSizeListArray.from_arrays(
            pa.array(values.reshape(-1).astype(np.float32)), 3))
        if image:
            i = table.schema.get_field_index("observation.images.top")
            blobs = [{"bytes": rng.bytes(BIG), "path": f"{k}.png"} for k in range(table.num_rows)]
            table = table.set_column(i, table.schema.field(i), pa.array(blobs, table.schema.field(i).type))
        return table
    return write_dataset(root, DatasetSpec(lengths=(5, 7, 6), features=features), mutate_data=mutate)


def _run(capsys, *argv) -> tuple[int, str]:
    status = check.run(list(argv))
    return status, capsys.readouterr().out


def test_a_clean_dataset_exits_0_and_writes_nothing(tmp_path, capsys):
    before = sorted(p for p in SAMPLE.rglob("*"))
    status, out = _run(capsys, str(SAMPLE))
    assert status == 0
    assert out.splitlines() == [f"file://{SAMPLE}: clean - 4 episodes, 46 frames, 1 episodes files: 0 quality "
                                f"findings, 0 errors ({out.split('(')[1].split(' ')[0]} data bytes read)"]
    assert sorted(p for p in SAMPLE.rglob("*")) == before


def test_findings_are_printed_and_strict_exits_1(tmp_path, capsys):
    root = _faulty(tmp_path / "ds")
    status, out = _run(capsys, str(root))
    assert status == 0
    assert out.splitlines()[1:] == [
        "  non_finite (warning, 1 episodes): a numeric feature holds NaN or infinite values",
        "    meta/episodes/chunk-000/file-000.parquet: episode 1: `observation.state` holds 1 non-finite values "
        "(0 NaN, 1 infinite) in 1 of 7 frames, first at frame 3 (dimensions: x)"]
    status, out = _run(capsys, str(root), "--strict", "non_finite,frozen_feature")
    assert status == 1 and "1 quality findings, 1 errors" in out and "non_finite (error, 1 episodes)" in out


def test_json_report(tmp_path, capsys):
    root = _faulty(tmp_path / "ds")
    status, out = _run(capsys, str(root), "--json", "--strict", "all")
    assert status == 1
    report, = json.loads(out)
    assert (report["episodes"], report["frames"], report["errors"]) == (3, 18, 1)
    assert report["quality"]["checks"]["non_finite"]["episodes"] == 1
    f, = report["findings"]
    assert {k: f[k] for k in ("episodes_file", "episode_index", "check", "severity", "feature", "count",
                              "first_frame", "file")} == {
        "episodes_file": "meta/episodes/chunk-000/file-000.parquet", "episode_index": 1, "check": "non_finite",
        "severity": "error", "feature": "observation.state", "count": 1, "first_frame": 3,
        "file": "data/chunk-000/file-000.parquet"}


def test_what_cannot_be_checked_exits_1(tmp_path, capsys):
    status, out = _run(capsys, str(tmp_path / "nothing"))
    assert status == 1 and "cannot be checked: [dataset_root]" in out
    with pytest.raises(SystemExit):
        check.run([str(SAMPLE), "--strict", "nan"])
    assert "--strict names unknown check(s) nan" in capsys.readouterr().err


@pytest.mark.parametrize("protocol,emulator,modules", [
    ("gs", storage_emulators.gcs_emulator, ("gcp_storage_emulator.server", "gcsfs")),
    ("s3", storage_emulators.s3_emulator, ("moto.server", "s3fs"))])
def test_bucket_datasets(tmp_path, capsys, protocol, emulator, modules):
    reason = storage_emulators.missing(*modules)
    if reason:
        pytest.skip(reason)
    root = _faulty(tmp_path / "ds")
    local = check.check_one(str(root), strict=frozenset(), skip_videos=False)[0]
    with emulator():
        fs = fsspec.filesystem(protocol)
        fs.mkdir("quality-src")
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            fs.put_file(str(path), f"quality-src/ds/{path.relative_to(root)}")
        status, out = _run(capsys, f"{protocol}://quality-src/ds", "--json")
    assert status == 0
    report, = json.loads(out)
    assert report["dataset"] == f"{protocol}://quality-src/ds"
    assert [(f["episode_index"], f["check"], f["feature"], f["detail"]) for f in report["findings"]] == [
        (f.episode_index, f.check, f.feature, f.detail) for f in local.findings]


def test_hub_dataset_reads_only_what_the_checks_need(tmp_path, capsys):
    """Through the Hub stand-in: the finding is there, the image column of the data file is never fetched, and
    each MP4 (its moov after a 2 MiB filler) is read by its head and moov alone."""
    pytest.importorskip("huggingface_hub", reason="the Hub tests need huggingface_hub: pip install -e '.[test]'")
    from tests.hub_standin import HubStandIn
    from tests.mp4_factory import Box, encode, make_dataset, parse_file, serialize_file
    root = _faulty(tmp_path / "ds", image=True)
    data = root / "data/chunk-000/file-000.parquet"
    assert data.stat().st_size > 18 * BIG
    mp4s = {}
    for key in ("observation.images.top", "observation.images.side"):
        boxes = parse_file(encode(tmp_path / f"{key}.mp4", frames=12, noise=True).read_bytes())
        boxes.insert(1, Box(b"free", payload=bytes(2 << 20)))
        path = tmp_path / f"{key}.big.mp4"
        path.write_bytes(serialize_file(boxes))
        mp4s[key] = (path, "h264")
    cameras = make_dataset(tmp_path / "cameras", mp4s, length=12)
    with HubStandIn() as standin, standin.configure():
        standin.add_dataset("test/faulty", root)
        standin.add_dataset("test/cameras", cameras)
        status, out = _run(capsys, "hf://datasets/test/faulty", "hf://datasets/test/cameras", "--json")
        sent = standin.bytes_by_file("test/faulty")
        sent_cameras = standin.bytes_by_file("test/cameras")
    assert status == 0
    faulty, clean = json.loads(out)
    assert faulty["dataset"].startswith("hf://datasets/test/faulty@")  # pinned at one commit
    assert [(f["episode_index"], f["check"], f["feature"]) for f in faulty["findings"]] == [
        (1, "non_finite", "observation.state")]
    assert 0 < sent["data/chunk-000/file-000.parquet"] < 2 * BIG  # the numeric columns and the footer
    assert clean["findings"] == [] and clean["errors"] == 0 and clean["frames"] == 12
    for key in mp4s:
        rel = f"videos/{key}/chunk-000/file-000.mp4"
        whole = (cameras / rel).read_bytes()
        moov = next(b for b in parse_file(whole) if b.type == b"moov")
        assert 0 < sent_cameras[rel] <= 1.1 * (64 * 1024 + len(moov.serialize())) < len(whole) / 10
