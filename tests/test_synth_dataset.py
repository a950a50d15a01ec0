"""The synthetic dataset generator (tests/bench/synth_dataset.py) writes datasets that the reference accepts
and that we import to the reference's values; tiny sizes, one case per codec."""

from __future__ import annotations

import json
import struct

import av
import pyarrow.parquet as pq
import pytest

from tests.arrow_compare import rows, schema_signature
from tests.bench.synth_dataset import make_dataset
from tests.helpers import run_import, run_oracle

CASES = {
    # h264 with B-frames, faststart, lengths that are not a multiple of the base clip (tail clips),
    # every kind of file rolling over independently, 2 files per chunk directory.
    "h264": dict(codec="h264", episodes=9, frames=[37, 30, 45, 12, 30, 31, 60, 8, 30], episodes_per_meta_file=4,
                 episodes_per_data_file=3, samples_per_mp4=100, chunks_size=2),
    "hevc_moov_at_end": dict(codec="hevc", episodes=4, frames=20, clip_frames=10, gop=5, faststart=False,
                             episodes_per_mp4=3, state_dim=6, action_dim=0),
    "av1": dict(codec="av1", episodes=3, frames=15, cameras=1, clip_frames=15, fps=10, stats=False),
}


def top_level_boxes(path) -> list[bytes]:
    data, pos, out = path.read_bytes(), 0, []
    while pos + 8 <= len(data):
        size, kind = struct.unpack_from(">I4s", data, pos)
        size = struct.unpack_from(">Q", data, pos + 8)[0] if size == 1 else size or len(data) - pos
        out.append(kind)
        pos += size
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_reference_accepts_and_import_matches(case, tmp_path, oracle_dir):
    params = CASES[case]
    root = make_dataset(tmp_path / "ds", **params)
    info = json.loads((root / "meta" / "info.json").read_text())
    lengths = params["frames"] if isinstance(params["frames"], list) else [params["frames"]] * params["episodes"]
    assert info["total_frames"] == sum(lengths)

    # The files follow LeRobot's layout: consecutive global index, running timestamps, keyframes at
    # every episode start, moov where asked.
    episodes_files = sorted((root / "meta" / "episodes").rglob("*.parquet"))
    episodes = [r for p in episodes_files for r in pq.read_table(p).to_pylist()]
    assert [e["episode_index"] for e in episodes] == list(range(params["episodes"]))
    data = [pq.read_table(p) for p in sorted((root / "data").rglob("*.parquet"))]
    assert [i for t in data for i in t.column("index").to_pylist()] == list(range(sum(lengths)))
    keys = [k for k, f in info["features"].items() if f["dtype"] == "video"]
    for key in keys:
        for path in sorted((root / "videos" / key).rglob("*.mp4")):
            boxes = top_level_boxes(path)
            assert boxes.index(b"moov") < boxes.index(b"mdat") if params.get("faststart", True) else \
                boxes[-1] == b"moov"
            ep_here = [e for e in episodes if f"chunk-{e[f'videos/{key}/chunk_index']:03d}/"
                       f"file-{e[f'videos/{key}/file_index']:03d}.mp4" == "/".join(path.parts[-2:])]
            assert ep_here and ep_here[0][f"videos/{key}/from_timestamp"] == 0.0
            with av.open(str(path)) as c:
                keyframes = [i for i, p in enumerate(c.demux(c.streams.video[0])) if p.size and p.is_keyframe]
            fps = info["fps"]
            for e in ep_here:
                assert round(e[f"videos/{key}/from_timestamp"] * fps) in keyframes
                assert round(e[f"videos/{key}/to_timestamp"] * fps) - round(e[f"videos/{key}/from_timestamp"] * fps) \
                    == e["length"]

    # The reference accepts it, and our inline-index import gives its exact values.
    out = tmp_path / "out"
    assert run_import(root, out, "--one-part", "--inline-index") == 0, (out / "errors.jsonl").read_text()
    rel = "meta/episodes/chunk-000/file-000.parquet"
    reference = run_oracle(root, rel, oracle_dir)
    ours = pq.read_table(out / "episodes" / "chunk-000" / "file-000.parquet")
    assert schema_signature(ours.schema) == schema_signature(reference.schema)
    assert rows(ours) == rows(reference)
