"""Bucket-to-bucket imports (gs://, s3://, memory://) write what a local import writes.

Each backend gets the sample dataset uploaded, is imported from its bucket into another bucket on
FnApiRunner in-process (default layout and --inline-index), and the downloaded output is compared
with the local import of the same dataset: Parquet files by schema, row groups and values (the
URI strings rewritten from the bucket root to the local root), the manifest equal but for the
fields that name the place or the run (`dataset`, timing, `run_id`, the source digest of storage
versions) and the Parquet byte counts (checked against the stored objects instead), everything
else byte for byte.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import fsspec
import pyarrow.parquet as pq
import pytest

import storage_emulators
from arrow_compare import rows
from tests.helpers import SAMPLE, run_import

LAYOUTS = {"default": (), "inline": ("--inline-index",)}
#: The sample's dataset files (its folder also holds LeRobot's recorded items, which no import reads).
SAMPLE_PATHS = sorted(str(p.relative_to(SAMPLE)) for p in SAMPLE.rglob("*")
                      if p.is_file() and p.relative_to(SAMPLE).parts[0] in ("meta", "data", "videos"))
SAMPLE_FILES = len(SAMPLE_PATHS)
EPISODES_FILE = "meta/episodes/chunk-000/file-000.parquet"
#: Manifest fields that differ between two imports of the same files from different places.
RUN_SPECIFIC = (("dataset",), ("started_at",), ("finished_at",), ("run_id",), ("source", "sha256"),
                ("totals", "bytes"), ("episodes_files", EPISODES_FILE, "bytes"),
                ("episodes_files", EPISODES_FILE, "run_id"))
#: media_index/ shards, one per folder of MP4s
SHARDS = {f"media_index/videos/observation.images.{cam}/chunk-000.parquet" for cam in ("front", "wrist")}


@dataclass
class Store:
    protocol: str
    fs: fsspec.AbstractFileSystem
    dataset: str  # the uploaded sample's root URI, as passed to --dataset
    root: str  # the same root as the output names it (memory:// paths are absolute: memory:///…)
    out_bucket: str


BACKENDS: dict[str, tuple[str, Callable[[], contextlib.AbstractContextManager], tuple[str, ...]]] = {
    "gs": ("gs", storage_emulators.gcs_emulator, ("gcp_storage_emulator.server", "gcsfs")),
    "s3": ("s3", storage_emulators.s3_emulator, ("moto.server", "s3fs")),
    "memory": ("memory", contextlib.nullcontext, ()),
}


@pytest.fixture(scope="module", params=sorted(BACKENDS))
def store(request):
    """One emulator per backend for the module, holding the sample under lerobot-src/so101_av1."""
    protocol, emulator, modules = BACKENDS[request.param]
    reason = storage_emulators.missing(*modules)
    if reason:
        pytest.skip(reason)
    with emulator():
        fs = fsspec.filesystem(protocol)
        src, out = "lerobot-src", "lerobot-out"
        if protocol != "memory":
            fs.mkdir(src)
            fs.mkdir(out)
        for rel in SAMPLE_PATHS:
            fs.put_file(str(SAMPLE / rel), f"{src}/so101_av1/{rel}")
        uploaded = sorted(p.split("/so101_av1/", 1)[1] for p in fs.find(f"{src}/so101_av1"))
        assert uploaded == SAMPLE_PATHS and SAMPLE_FILES == 7
        root = f"memory:///{src}/so101_av1" if protocol == "memory" else f"{protocol}://{src}/so101_av1"
        yield Store(protocol, fs, f"{protocol}://{src}/so101_av1", root, out)
        if protocol == "memory":
            for bucket in (src, out):
                if fs.exists(bucket):
                    fs.rm(bucket, recursive=True)


@pytest.fixture(scope="module")
def local_outputs(tmp_path_factory) -> dict[str, Path]:
    """The local import of the sample, per layout (the expected output)."""
    outs = {}
    for layout, extra in LAYOUTS.items():
        out = tmp_path_factory.mktemp(f"local-{layout}")
        assert run_import(SAMPLE, out, *extra) == 0
        outs[layout] = out
    return outs


def download(fs: fsspec.AbstractFileSystem, root: str) -> dict[str, bytes]:
    fs.invalidate_cache()
    root = root.rstrip("/")
    return {p.split(root + "/", 1)[1]: fs.cat_file(p) for p in sorted(fs.find(root))}


def rewrite_uris(value, old: str, new: str, seen: list):
    """`value` with every string under root `old` moved under root `new` (and counted in `seen`)."""
    if isinstance(value, str) and (value == old or value.startswith(old + "/")):
        seen.append(value)
        return new + value[len(old):]
    if isinstance(value, dict):
        return {k: rewrite_uris(v, old, new, seen) for k, v in value.items()}
    if isinstance(value, list):
        return [rewrite_uris(v, old, new, seen) for v in value]
    return value


def _videos(root: str) -> set[str]:
    """The sample's two MP4s under `root`."""
    return {f"{root}/videos/observation.images.{cam}/chunk-000/file-000.mp4" for cam in ("front", "wrist")}


def blank(doc: dict, fields) -> None:
    """Set each field (a key path) that `doc` has to None."""
    for path in fields:
        node = doc
        for key in path[:-1]:
            node = node.get(key, {})
        if path[-1] in node:
            node[path[-1]] = None


def parquet_view(data: bytes) -> tuple:
    f = pq.ParquetFile(io.BytesIO(data))
    layout = [f.metadata.row_group(i).num_rows for i in range(f.metadata.num_row_groups)]
    return f.schema_arrow, layout, f.read()


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_bucket_to_bucket_import_matches_local(store: Store, layout: str, local_outputs):
    out_uri = f"{store.protocol}://{store.out_bucket}/{layout}"
    assert run_import(store.dataset, out_uri, *LAYOUTS[layout]) == 0

    remote = download(store.fs, f"{store.out_bucket}/{layout}")
    local_dir = local_outputs[layout]
    # The local run's lease lock file is run bookkeeping (object stores need none): not an output.
    local = {str(p.relative_to(local_dir)): p.read_bytes() for p in sorted(local_dir.rglob("*"))
             if p.is_file() and not p.name.startswith(".lease.json")}
    # quality/: the data-quality table of the episodes file and the dataset's (empty: the sample is clean)
    expected_files = {"episodes/chunk-000/file-000.parquet", "errors.jsonl", "manifest.json",
                      "quality/chunk-000/file-000.parquet", "quality/dataset.parquet"}
    if layout == "default":
        expected_files |= SHARDS
    assert set(local) == expected_files
    assert set(remote) == expected_files  # and no temporary names left behind

    local_root = "file://" + str(SAMPLE)
    remote_root = store.root
    uris_seen: list[str] = []
    for rel in sorted(expected_files):
        if rel.endswith(".parquet"):
            r_schema, r_groups, r_table = parquet_view(remote[rel])
            l_schema, l_groups, l_table = parquet_view(local[rel])
            assert r_schema.equals(l_schema, check_metadata=True), rel
            assert r_groups == l_groups, rel
            if rel in SHARDS:  # a row's version is its MP4's storage token: generation / ETag vs mtime
                assert r_table.column("version")[0].as_py().startswith(f"{r_table.column('size')[0].as_py()}:")
                r_table, l_table = r_table.drop_columns(["version"]), l_table.drop_columns(["version"])
            assert rewrite_uris(rows(r_table), remote_root, local_root, uris_seen) == rows(l_table), rel
        elif rel == "manifest.json":
            r_doc, l_doc = json.loads(remote[rel]), json.loads(local[rel])
            assert r_doc["dataset"] == remote_root and l_doc["dataset"] == local_root
            assert r_doc["status"] == "imported"
            # The byte counts are the Parquet sizes, which differ with the URI strings inside.
            for doc, files in ((r_doc, remote), (l_doc, local)):
                entry = doc["episodes_files"][EPISODES_FILE]
                assert entry["bytes"] == sum(len(files[p]) for p in entry["parts"])
                assert doc["totals"]["bytes"] == entry["bytes"]
                for part in entry.get("part_files", []):  # each part's own size and digest, then blanked
                    assert part["bytes"] == len(files[part["path"]])
                    assert part["sha256"] == hashlib.sha256(files[part["path"]]).hexdigest()
                    part["bytes"] = part["sha256"] = None
                # Per-file source digests hash storage versions too (mtime / generation / ETag).
                for key in [k for k in entry if k.startswith("source_") and k not in ("source_data_files",
                                                                                      "source_video_files")]:
                    entry[key] = None
            # The source fingerprint hashes storage versions (mtime / generation / ETag); files and
            # bytes must agree.
            assert r_doc["source"]["files"] == l_doc["source"]["files"] == SAMPLE_FILES
            for doc, files in ((r_doc, remote), (l_doc, local)):
                for shard in doc["media_index_files"]:  # sizes and digests differ with the URIs inside
                    assert shard["sha256"] == hashlib.sha256(files[shard["path"]]).hexdigest()
                    shard["bytes"] = shard["sha256"] = None
                assert sorted(doc["video_versions"]) == sorted(v[len(remote_root) + 1:] for v in _videos(remote_root))
                doc["video_versions"] = None  # storage tokens (mtime / generation / ETag)
                blank(doc, RUN_SPECIFIC)
            assert r_doc == l_doc
        else:
            assert remote[rel] == local[rel], rel

    # Both cameras' MP4s are referenced by their bucket URIs (in the parts, and in media_index/).
    assert set(uris_seen) == _videos(remote_root)

