"""Imports straight from the Hugging Face Hub (`hf://datasets/OWNER/NAME[@REVISION]`), against a loopback
stand-in of the Hub (tests/hub_standin.py) that serves local datasets through the endpoints
huggingface_hub calls and counts every request and the bytes sent per file. No network.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

pytest.importorskip("huggingface_hub", reason="the Hub tests need huggingface_hub: pip install -e '.[test]' "
                                              "(or the '[hub]' extra)")

from pipelines.targets import resolve_targets  # noqa: E402
from tests.arrow_compare import rows  # noqa: E402
from tests.dataset_factory import DatasetSpec, write_dataset  # noqa: E402
from tests.helpers import lerobot_dataset, read_errors, read_manifest, run_import  # noqa: E402
from tests.hub_standin import HubStandIn  # noqa: E402
from transforms.base import hub, storage  # noqa: E402
from transforms.base.errors import LeRobotImportError  # noqa: E402

SO101 = lerobot_dataset("so101_av1")
EXCLUDE = ("expected_items/*",)
FRONT = "observation.images.front"
EF = "meta/episodes/chunk-000/file-{:03d}.parquet"


@pytest.fixture(autouse=True)
def _fast_backoff(monkeypatch):
    monkeypatch.setattr(hub, "BACKOFF_S", 0.01)


def _replace(value, old: str, new: str):
    """`value` (plain Python rows) with `old` replaced by `new` in every string."""
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, dict):
        return {k: _replace(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace(v, old, new) for v in value]
    return value


def _tables(out: Path, folder: str) -> dict[str, list[dict]]:
    return {str(p.relative_to(out)): rows(pq.read_table(p)) for p in sorted((out / folder).rglob("*.parquet"))}


# ---- URLs, without a server ---------------------------------------------------------------------


def test_hub_urls_parse_and_name_their_commit():
    sha = "0123456789abcdef0123456789abcdef01234567"
    ref = hub.parse(f"hf://datasets/lerobot/so101@{sha}/videos/a.mp4")
    assert (ref.repo_id, ref.revision, ref.path, ref.commit) == ("lerobot/so101", sha, "videos/a.mp4", sha)
    assert hub.parse("hf://datasets/lerobot/so101@refs%2Fpr%2F3").revision == "refs/pr/3"
    assert hub.parse("hf://datasets/lerobot/so101@refs%2Fpr%2F3").uri == "hf://datasets/lerobot/so101@refs%2Fpr%2F3"
    assert hub.parse("hf://datasets/lerobot/so101").revision is None
    assert hub.commit_of("hf://datasets/lerobot/so101@v3.0") is None  # a tag moves; only a sha pins
    assert hub.commit_of(f"hf://datasets/lerobot/so101@{sha}") == sha
    assert hub.repo_uri(f"hf://datasets/lerobot/so101@{sha}/x") == "hf://datasets/lerobot/so101"
    assert hub.dataset_name(f"hf://datasets/lerobot/so101@{sha}") == "so101"
    assert hub.dataset_name(f"hf://datasets/lerobot/many@{sha}/arms/left") == "left"
    for bad in ("hf://lerobot/so101", "hf://datasets/lerobot", "hf://datasets/lerobot/so101@",
                "hf://spaces/lerobot/so101", "hf://datasets/-x/so101"):
        with pytest.raises(LeRobotImportError) as info:
            hub.parse(bad)
        assert info.value.rule == "url" and "hf://datasets/OWNER/NAME[@REVISION]" in str(info.value)


def test_missing_huggingface_hub_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # `import huggingface_hub` now fails
    with pytest.raises(LeRobotImportError) as info:
        storage.filesystem("hf://datasets/lerobot/so101/meta/info.json")
    assert info.value.rule == "url"
    assert "huggingface_hub" in str(info.value) and "lerobot-beam-import[hub]" in str(info.value)


# ---- an import through the stand-in -------------------------------------------------------------


@pytest.fixture(scope="module")
def so101(tmp_path_factory):
    """so101_av1 imported locally and from the stand-in (kept serving for the reader)."""
    tmp = tmp_path_factory.mktemp("so101")
    local, remote = tmp / "local", tmp / "hub"
    assert run_import(SO101, local) == 0
    with HubStandIn() as standin, standin.configure():
        sha = standin.add_dataset("test/so101_av1", SO101, exclude=EXCLUDE)
        assert run_import("hf://datasets/test/so101_av1", remote) == 0
        yield standin, sha, local, remote


def test_hub_import_equals_the_local_import(so101):
    standin, sha, local, remote = so101
    hub_root, local_root = f"hf://datasets/test/so101_av1@{sha}", storage.normalize_root(str(SO101))
    for folder in ("episodes", "media_index"):
        a, b = _tables(local, folder), _tables(remote, folder)
        assert sorted(a) == sorted(b) and a
        for rel in a:
            got, want = _replace(b[rel], hub_root, local_root), a[rel]
            for g, w in zip(got, want):
                if "version" in w:  # the file's version as storage gives it: a git oid on the Hub, an mtime here
                    assert g.pop("version").startswith(f"{g['size']}:blob_id=") and w.pop("version")
            assert got == want, rel
    uris = [r["uri"] for table in _tables(remote, "media_index").values() for r in table]
    assert uris and all(u.startswith(hub_root + "/videos/") and u.endswith(".mp4") for u in uris)
    clip_uris = {v["clip"]["media"]["source"]["uri"] for r in _tables(remote, "episodes")[
        "episodes/chunk-000/file-000.parquet"] for v in r["videos"].values()}
    assert clip_uris == {f"{hub_root}/videos/{c}/chunk-000/file-000.mp4" for c in (FRONT, "observation.images.wrist")}
    manifest = read_manifest(remote)
    assert manifest["dataset"] == hub_root and manifest["status"] == "imported"
    assert manifest["source"]["commit"] == sha == standin.head("test/so101_av1")
    assert read_errors(remote) == read_errors(local) == []


def test_reader_opens_the_hub_import_and_seeks_a_frame(so101):
    pytest.importorskip("av", reason="decoding frames needs PyAV (the [video] extra)")
    from transforms.reader import ImportReader

    standin, sha, local, remote = so101
    standin.reset_counts()
    ep, ref = ImportReader(str(remote)).episode(2), ImportReader(str(local)).episode(2)
    np.testing.assert_array_equal(ep["observation.state"], ref["observation.state"])
    frame = ep.video(FRONT).frame_at(0.1)
    assert frame.shape == (48, 64, 3) and frame.dtype == np.uint8
    np.testing.assert_array_equal(frame, ref.video(FRONT).frame_at(0.1))
    reads = [r for r in standin.requests if r.kind == "resolve"]
    assert reads and all(r.revision == sha and r.file == f"videos/{FRONT}/chunk-000/file-000.mp4" for r in reads)
    assert all(r.range for r in reads)  # ranged reads at the commit, never the whole file


def test_mp4s_are_read_head_and_moov_only(tmp_path):
    """MP4s with moov after a 2 MiB filler box: the import reads the head and the moov, not the middle."""
    from tests.mp4_factory import Box, encode, make_dataset, parse_file, serialize_file

    mp4s = {}
    for key in ("observation.images.top", "observation.images.side"):
        boxes = parse_file(encode(tmp_path / f"{key}.mp4", frames=12, noise=True).read_bytes())
        boxes.insert(1, Box(b"free", payload=bytes(2 << 20)))  # between ftyp and mdat; moov stays last
        path = tmp_path / f"{key}.big.mp4"
        path.write_bytes(serialize_file(boxes))
        mp4s[key] = (path, "h264")
    root = make_dataset(tmp_path / "ds", mp4s, length=12)
    with HubStandIn() as standin, standin.configure():
        standin.add_dataset("test/big_moov", root)
        assert run_import("hf://datasets/test/big_moov", tmp_path / "out") == 0
        sent = standin.bytes_by_file()
    assert read_errors(tmp_path / "out") == []
    for key in mp4s:
        rel = f"videos/{key}/chunk-000/file-000.mp4"
        data = (root / rel).read_bytes()
        moov = next(b for b in parse_file(data) if b.type == b"moov")
        assert moov.src_offset > 2 << 20  # at the end, past the filler and mdat
        budget = min(64 * 1024, len(data)) + len(moov.serialize())
        assert 0 < sent[rel] <= 1.1 * budget, (rel, sent[rel], budget, len(data))
        assert len(data) > 10 * budget  # reading the file whole would break the bound


def test_data_file_is_read_by_the_slices_each_part_needs(tmp_path):
    """One 2 MB data file, four episodes (one row group each) in four episodes files: each part reads its
    own row group and the footer, never the whole file."""
    spec = DatasetSpec(lengths=(1500,) * 4, episodes_per_meta_file=1,
                       features={"observation.state": {"dtype": "float32", "shape": [80], "names": None}})
    root = write_dataset(tmp_path / "ds", spec)
    data_rel = "data/chunk-000/file-000.parquet"
    size = (root / data_rel).stat().st_size
    assert pq.ParquetFile(root / data_rel).num_row_groups == 4 and size > 1_500_000
    with HubStandIn() as standin, standin.configure():
        standin.add_dataset("test/one_data_file", root)
        assert run_import("hf://datasets/test/one_data_file", tmp_path / "out") == 0
        reads = [r for r in standin.requests if r.file == data_rel and r.bytes_sent]
    assert read_manifest(tmp_path / "out")["totals"]["episodes_written"] == 4
    assert len(reads) >= 4 and all(r.range for r in reads)
    largest = max(r.bytes_sent for r in reads)
    assert largest < 0.3 * size, (largest, size)  # one row group (a quarter) at most, never the file
    assert sum(r.bytes_sent for r in reads) < 1.1 * size + 4 * 64 * 1024


# ---- incremental imports ------------------------------------------------------------------------


def test_unchanged_commit_costs_one_revision_lookup(so101, tmp_path):
    standin, sha, _, remote = so101
    out = tmp_path / "again"
    shutil.copytree(remote, out)
    before = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file() and not p.name.startswith(".lease")}
    standin.reset_counts()
    assert run_import("hf://datasets/test/so101_av1", out) == 0
    assert [(r.kind, r.method, r.path) for r in standin.requests] == [
        ("info", "GET", "/api/datasets/test/so101_av1")]
    after = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file() and not p.name.startswith(".lease")}
    assert after == before


def test_new_commit_reimports_only_what_references_the_changed_file(tmp_path):
    spec = DatasetSpec(lengths=(5, 7, 6, 4), episodes_per_meta_file=1, episodes_per_data_file=2)
    root, out = write_dataset(tmp_path / "ds", spec), tmp_path / "out"
    with HubStandIn() as standin, standin.configure():
        first = standin.add_dataset("test/grows", root)
        assert run_import("hf://datasets/test/grows", out) == 0
        edited = shutil.copytree(root, tmp_path / "ds2")
        changed = "data/chunk-000/file-001.parquet"
        table = pq.read_table(edited / changed)
        pq.write_table(table, edited / changed, row_group_size=3)  # same rows, other bytes
        second = standin.commit("test/grows", edited)
        assert second != first
        standin.reset_counts()
        assert run_import("hf://datasets/test/grows", out) == 0
        content = set(standin.bytes_by_file())
    manifest = read_manifest(out)
    assert manifest["source"]["commit"] == second
    statuses = {rel: e["status"] for rel, e in manifest["episodes_files"].items()}
    assert statuses == {EF.format(0): "unchanged", EF.format(1): "unchanged", EF.format(2): "imported",
                        EF.format(3): "imported"}
    assert changed in content
    assert not content & {"data/chunk-000/file-000.parquet", EF.format(0), EF.format(1)}  # never read again


def test_a_branch_moving_during_a_run_does_not_change_what_it_reads(tmp_path):
    root = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(4,)))
    with HubStandIn() as standin, standin.configure():
        first = standin.add_dataset("test/moving", root)
        ((pinned, target),) = resolve_targets(["hf://datasets/test/moving"], None, str(tmp_path / "out"))
        assert pinned == f"hf://datasets/test/moving@{first}" and target.endswith("/out")
        moved = shutil.copytree(root, tmp_path / "ds2")
        (moved / "meta/info.json").write_text((moved / "meta/info.json").read_text().replace('"fps": 10', '"fps": 5'))
        standin.commit("test/moving", moved)
        old = storage.read_bytes(storage.join(pinned, "meta/info.json"), what="info file", file="meta/info.json")
        assert json.loads(old)["fps"] == 10


# ---- failures -----------------------------------------------------------------------------------


def test_rate_limit_server_error_and_timeout_are_retried_and_counted(tmp_path, caplog, capsys):
    root = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(4, 5)))
    with HubStandIn() as standin, standin.configure(download_timeout=0.5):
        standin.add_dataset("test/limited", root)
        standin.fail_next("/api/datasets/test/limited", 429, times=1, headers={"Retry-After": "0"})
        standin.fail_next("/datasets/test/limited/resolve/*/data/*", 503, times=1)
        standin.fail_next("/datasets/test/limited/resolve/*/meta/episodes/*", None, times=1, delay=1.5)
        before = hub.retry_count()
        with caplog.at_level(logging.WARNING, logger="transforms.base.hub"):
            assert run_import("hf://datasets/test/limited", tmp_path / "out") == 0
        statuses = [r.status for r in standin.requests]
    assert statuses.count(429) == 1 and statuses.count(503) == 1
    assert hub.retry_count() - before == 3
    lines = [r.getMessage() for r in caplog.records if r.name == "transforms.base.hub"]
    assert any("429" in line and "the revision lookup" in line and "test/limited" in line for line in lines)
    assert any("503" in line and "data/chunk-000/file-000.parquet" in line for line in lines)
    assert any("Timeout" in line and "meta/episodes/chunk-000/file-000.parquet" in line for line in lines)
    assert "hub_retries=2" in capsys.readouterr().out  # the retries inside the pipeline, as a Beam counter
    assert read_manifest(tmp_path / "out")["totals"]["episodes_written"] == 2


def _error_of(args: list[str], tmp_path: Path) -> str:
    with pytest.raises(SystemExit) as info:
        run_import(args, tmp_path / "out")
    return str(info.value)


def test_missing_private_and_unknown_revision_name_the_repo(tmp_path):
    root = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(3,)))
    with HubStandIn() as standin, standin.configure():
        standin.add_dataset("test/private", root, private=True, token="hf_granted_0123456789")
        standin.add_dataset("test/public", root)
        missing = _error_of(["hf://datasets/test/nothing_here"], tmp_path)
        private = _error_of(["hf://datasets/test/private"], tmp_path)  # 401 without a token
        revision = _error_of(["hf://datasets/test/public@v9"], tmp_path)
    for message, repo in ((missing, "test/nothing_here"), (private, "test/private")):
        assert message.startswith("error: [hub_access]") and f"the Hub dataset {repo} does not exist" in message
        assert "private" in message and "HF_TOKEN" in message
    assert revision.startswith("error: [hub_revision]") and "test/public has no revision 'v9'" in revision
    assert "give a branch, tag or commit" in revision
    assert not (tmp_path / "out").exists()


def test_in_a_bulk_run_an_unusable_hub_dataset_fails_alone(tmp_path):
    """One missing Hub dataset among several stops nothing: the others import, it fails in its own output."""
    root = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(3, 4), episodes_per_meta_file=1))
    out = tmp_path / "out"
    with HubStandIn() as standin, standin.configure():
        standin.add_dataset("team/arm_a", root)
        status = run_import([], out, "--datasets", "hf://datasets/team/arm_a,hf://datasets/team/gone")
    assert status == 1
    assert read_manifest(out / "arm_a")["totals"]["episodes_written"] == 2
    errors = read_errors(out / "gone")
    assert errors and {e["rule"] for e in errors} == {"hub_access"}
    assert all("the Hub dataset team/gone does not exist" in e["message"] for e in errors)
    assert all(e["dataset"] == "hf://datasets/team/gone" for e in errors)


def test_gated_dataset_without_access_fails_with_the_next_step(tmp_path):
    root = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(3,)))
    with HubStandIn() as standin, standin.configure(token="hf_not_granted_0123456789"):
        standin.add_token("hf_not_granted_0123456789")
        standin.add_dataset("test/gated", root, gated=True, token="hf_granted_9876543210")
        assert run_import("hf://datasets/test/gated", tmp_path / "out") == 1
        refused = [r.status for r in standin.requests if r.kind == "resolve"]
    assert refused and set(refused) == {403}
    (error,) = read_errors(tmp_path / "out")
    assert error["rule"] == "hub_access" and error["file"] in ("meta/info.json", EF.format(0))
    assert "the Hub dataset test/gated is gated" in error["message"]
    assert "accept its conditions at https://huggingface.co/datasets/test/gated" in error["message"]


def test_token_never_reaches_outputs_logs_or_errors(tmp_path, caplog, capfd):
    token = "hf_secret_token_5f3a9c"
    root = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(4, 5), episodes_per_meta_file=1))
    (root / "data/chunk-000/file-000.parquet").unlink()  # one episodes file fails: an errors.jsonl row
    out = tmp_path / "out"
    with HubStandIn() as standin, standin.configure(token=token):
        standin.add_dataset("test/private_ds", root, token=token, private=True)
        standin.fail_next("/api/datasets/test/private_ds/tree/*", 503, times=1, headers={"Retry-After": "0"})
        before = hub.retry_count()
        with caplog.at_level(logging.DEBUG):
            assert run_import("hf://datasets/test/private_ds", out) == 1
            assert run_import("hf://datasets/test/private_ds", out, "--force") == 1
        sent = standin.requests
        assert hub.retry_count() - before == 1  # the listing page huggingface_hub retried itself, counted
        with pytest.raises(SystemExit) as refused:  # a wrong token: the message must not quote it either
            with standin.configure(token="hf_wrong_token_77777777"):
                run_import("hf://datasets/test/private_ds", tmp_path / "out2")
    assert sent and all(r.authorized for r in sent if r.kind != "cdn")  # the token went where it was due
    errors = read_errors(out)
    assert errors and {e["rule"] for e in errors} >= {"file_missing"}
    texts = [p.read_bytes() for p in out.rglob("*") if p.is_file()]
    captured = capfd.readouterr()
    logs = [r.getMessage() for r in caplog.records] + [str(r.args) for r in caplog.records]
    assert any("503" in line for line in logs)  # the retry was logged (without the token)
    assert "hub_access" in str(refused.value) and "hf_wrong_token" not in str(refused.value)
    for text in texts:
        assert token.encode() not in text
    for text in [captured.out, captured.err, *logs]:
        assert token not in text


def test_owner_pattern_and_list_file_name_hub_datasets(tmp_path):
    root = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(3,)))
    with HubStandIn() as standin, standin.configure():
        a = standin.add_dataset("team/arm_a", root)
        b = standin.add_dataset("team/arm_b", root)
        standin.add_dataset("team/other", root)
        standin.add_dataset("elsewhere/arm_c", root)
        targets = resolve_targets([], "hf://datasets/team/arm_*", str(tmp_path / "out"))
        listed = tmp_path / "datasets.txt"
        listed.write_text(f"hf://datasets/team/arm_b@main   # a Hub dataset at a branch\n{root}\n")
        from_file = resolve_targets([], f"@{listed}", str(tmp_path / "out"))
        lookups = [r.path for r in standin.requests if r.kind == "info"]
    out = storage.normalize_root(str(tmp_path / "out"))
    assert targets == ((f"hf://datasets/team/arm_a@{a}", f"{out}/arm_a"), (f"hf://datasets/team/arm_b@{b}",
                                                                          f"{out}/arm_b"))
    assert from_file == ((f"hf://datasets/team/arm_b@{b}", f"{out}/arm_b"), (storage.normalize_root(str(root)),
                                                                            f"{out}/ds"))
    # one revision lookup per dataset, nothing listed
    assert lookups == ["/api/datasets/team/arm_a", "/api/datasets/team/arm_b",
                       "/api/datasets/team/arm_b/revision/main"]


def test_reader_reads_an_output_made_from_two_commits(tmp_path):
    """After a new commit, episodes files left unchanged still name their MP4s at the first commit; the
    reader reads both (any commit of the manifest's repository) and the frames are the dataset's."""
    pytest.importorskip("av", reason="decoding frames needs PyAV (the [video] extra)")
    from transforms.reader import ImportReader

    src, out, local = lerobot_dataset("h264_multi_file"), tmp_path / "out", tmp_path / "local"
    assert run_import(src, local) == 0
    with HubStandIn() as standin, standin.configure():
        first = standin.add_dataset("test/multi", src, exclude=EXCLUDE)
        assert run_import("hf://datasets/test/multi", out) == 0
        edited = shutil.copytree(src, tmp_path / "ds2", ignore=shutil.ignore_patterns("expected_items"))
        changed = "data/chunk-001/file-001.parquet"
        pq.write_table(pq.read_table(edited / changed), edited / changed, row_group_size=3)
        second = standin.commit("test/multi", edited)
        assert run_import("hf://datasets/test/multi", out) == 0
        manifest = read_manifest(out)
        assert manifest["dataset"] == f"hf://datasets/test/multi@{second}"
        assert {e["status"] for e in manifest["episodes_files"].values()} == {"imported", "unchanged"}
        commits = {u.split("@", 1)[1][:40] for t in _tables(out, "episodes").values() for r in t
                   for v in r["videos"].values() for u in [v["clip"]["media"]["source"]["uri"]]}
        assert commits == {first, second}
        reader, reference = ImportReader(str(out)), ImportReader(str(local))
        for index in reader.episode_indices():
            ep, ref = reader.episode(int(index)), reference.episode(int(index))
            for camera in ("observation.images.top", "observation.images.side"):
                np.testing.assert_array_equal(ep.video(camera).frame_at(0.0), ref.video(camera).frame_at(0.0))


def test_reader_confines_hub_uris_to_the_repository():
    from transforms.reader.confine import confined

    a, b = "0" * 40, "1" * 40
    root = f"hf://datasets/test/so101@{a}"
    assert confined(f"hf://datasets/test/so101@{a}/videos/x/file-000.mp4", [root])
    assert confined(f"hf://datasets/test/so101@{b}/videos/x/file-000.mp4", [root])  # another commit
    assert not confined(f"hf://datasets/test/other@{a}/videos/x/file-000.mp4", [root])
    assert not confined(f"hf://datasets/test/so101@{a}/videos/../../other/x.mp4", [root])
    assert not confined(f"hf://datasets/test/so101@{a}/videos/x.mp4", ["file:///tmp/out"])


def test_hub_listing_gives_each_file_its_git_object_id(so101):
    import hashlib

    from transforms.lerobot.sources import list_sources

    _, sha, _, _ = so101
    listing = list_sources(f"hf://datasets/test/so101_av1@{sha}")
    info = (SO101 / "meta/info.json").read_bytes()
    oid = hashlib.sha1(b"blob %d\0" % len(info) + info).hexdigest()
    assert listing.files["meta/info.json"].version == f"blob_id={oid}"
    assert listing.files["meta/info.json"].size == len(info)
    on_disk = {str(p.relative_to(SO101)) for d in ("meta", "data", "videos") for p in (SO101 / d).rglob("*")
               if p.is_file()}
    assert set(listing.files) == on_disk
    assert all(f.version.startswith("blob_id=") and len(f.version) == 48 for f in listing.files.values())


def test_hub_v21_dataset_imports_as_local(tmp_path):
    """A v2.1 dataset on the Hub (one data file and one MP4 per episode) imports as its local copy does,
    at the pinned commit; its clips name each episode's MP4 at that commit."""
    from tests.v21_repack import repack_v21
    root = repack_v21(SO101, tmp_path / "v21")
    assert run_import(root, tmp_path / "local") == 0
    with HubStandIn() as standin, standin.configure():
        sha = standin.add_dataset("test/so101_v21", root)
        assert run_import("hf://datasets/test/so101_v21", tmp_path / "hub") == 0
    local = pq.read_table(tmp_path / "local" / "episodes" / "chunk-000.parquet")
    remote = pq.read_table(tmp_path / "hub" / "episodes" / "chunk-000.parquet")
    assert remote.column("frames").equals(local.column("frames"))
    clip = remote.column("videos").combine_chunks().field(FRONT).field("clip")
    uris = clip.storage.field("media").storage.field("source").storage.field("uri").to_pylist()
    assert uris == [f"hf://datasets/test/so101_v21@{sha}/videos/chunk-000/{FRONT}/episode_{i:06d}.mp4"
                    for i in range(4)]
