"""The loopback Hub stand-in, exercised through the real `huggingface_hub` client.

These tests pin down two things the Hub import relies on: that `tests/hub_standin.py` answers in
the shapes huggingface_hub parses (so an import tested against it behaves as against the Hub),
and what huggingface_hub itself does on top (which requests each filesystem call makes, what it
caches, what it retries, which exception each Hub error becomes).
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

pytest.importorskip("huggingface_hub", reason="huggingface_hub not installed; pip install '.[hub]' to run")

from huggingface_hub import HfApi, HfFileSystem, snapshot_download  # noqa: E402
from huggingface_hub import constants as hf_constants  # noqa: E402
from huggingface_hub.errors import (  # noqa: E402
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.file_download import get_hf_file_metadata  # noqa: E402

from tests.helpers import lerobot_dataset  # noqa: E402
from tests.hub_standin import HubStandIn  # noqa: E402

SRC = lerobot_dataset("so101_av1")
REPO = "lerobot/so101"
FRONT = "videos/observation.images.front/chunk-000/file-000.mp4"
DATA = "data/chunk-000/file-000.parquet"
INFO = "meta/info.json"


def _local_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@pytest.fixture(scope="module")
def hub():
    with HubStandIn() as standin, standin.configure():
        standin.first_sha = standin.add_dataset(REPO, SRC, revisions={"main": None, "v3.0": None})
        standin.add_dataset("lerobot/private", SRC, private=True, token="hf_secret")
        standin.add_dataset("lerobot/gated", SRC, gated=True, token="hf_granted")
        standin.add_dataset("other/public", SRC / "meta")
        standin.add_token("hf_other")
        yield standin


@pytest.fixture
def fs(hub):
    hub.reset_counts()
    return HfFileSystem(skip_instance_cache=True)


def test_configure_points_huggingface_hub_at_the_stand_in_and_restores_it(hub):
    assert hf_constants.ENDPOINT == hub.endpoint
    assert HfFileSystem(skip_instance_cache=True).endpoint == hub.endpoint
    with HubStandIn() as other:
        with other.configure(token="hf_x"):
            assert hf_constants.ENDPOINT == other.endpoint
            assert HfApi().token is None and HfApi()._build_hf_headers()["authorization"] == "Bearer hf_x"
        assert hf_constants.ENDPOINT == hub.endpoint
        assert "authorization" not in HfApi()._build_hf_headers()


def test_resolve_path_keeps_the_revision_and_repo_info_gives_the_commit(hub, fs):
    resolved = fs.resolve_path(f"hf://datasets/{REPO}@v3.0/{INFO}")
    assert (resolved.repo_id, resolved.revision, resolved.path_in_repo) == (REPO, "v3.0", INFO)
    info = HfApi().dataset_info(REPO, revision="v3.0")
    assert info.sha == hub.first_sha == hub.head(REPO, "v3.0")
    assert len(info.sha) == 40 and set(info.sha) <= set("0123456789abcdef")
    assert sorted(s.rfilename for s in info.siblings) == sorted([*_local_files(SRC), ".gitattributes"])
    # one repo-info request each: resolve_path (then cached by the instance), then dataset_info
    fs.resolve_path(f"hf://datasets/{REPO}@v3.0/{DATA}")
    assert [(r.kind, r.path, r.revision) for r in hub.requests] == [
        ("info", f"/api/datasets/{REPO}/revision/v3.0", "v3.0")] * 2
    refs = HfApi().list_repo_refs(REPO, repo_type="dataset")
    assert [(b.name, b.target_commit) for b in refs.branches] == [("main", hub.first_sha)]
    assert [(t.name, t.target_commit) for t in refs.tags] == [("v3.0", hub.first_sha)]


def test_ls_details_expose_size_git_oid_and_lfs_hash(hub, fs):
    local = _local_files(SRC)
    entries = fs.ls(f"datasets/{REPO}@v3.0/videos/observation.images.front/chunk-000")
    assert len(entries) == 1
    mp4 = entries[0]
    assert mp4["name"] == f"datasets/{REPO}@v3.0/{FRONT}"
    assert mp4["type"] == "file" and mp4["size"] == len(local[FRONT])
    assert mp4["lfs"]["sha256"] == hashlib.sha256(local[FRONT]).hexdigest()
    assert mp4["lfs"]["size"] == len(local[FRONT])
    assert mp4["xet_hash"] is None and mp4["last_commit"] is None
    meta = {e["name"].rsplit("/", 1)[1]: e for e in fs.ls(f"datasets/{REPO}@v3.0/meta")}
    assert meta["info.json"]["blob_id"] == _git_blob_oid(local[INFO]) and meta["info.json"]["lfs"] is None
    assert meta["episodes"]["type"] == "directory"
    assert [(r.kind, r.path, r.query) for r in hub.requests if r.kind == "tree"] == [
        ("tree", f"/api/datasets/{REPO}/tree/v3.0/videos/observation.images.front/chunk-000",
         "recursive=false&expand=false"),
        ("tree", f"/api/datasets/{REPO}/tree/v3.0/meta", "recursive=false&expand=false")]
    expanded = fs.ls(f"datasets/{REPO}/meta", expand_info=True)
    assert {e["last_commit"].oid for e in expanded} == {hub.first_sha}


def test_find_lists_every_file_in_one_recursive_request(hub, fs):
    found = fs.find(f"datasets/{REPO}@main", detail=True)
    prefix = f"datasets/{REPO}@main/"
    local = _local_files(SRC)
    assert sorted(found) == sorted(prefix + p for p in [*local, ".gitattributes"])
    assert {name[len(prefix):]: d["size"] for name, d in found.items() if name != prefix + ".gitattributes"} \
        == {p: len(data) for p, data in local.items()}
    trees = [r for r in hub.requests if r.kind == "tree"]
    assert [(r.path, r.query) for r in trees] == [(f"/api/datasets/{REPO}/tree/main", "recursive=true&expand=false")]
    # info of a listed file is served from the dircache: no new request
    hub.reset_counts()
    assert fs.info(prefix + INFO)["size"] == len(local[INFO])
    assert hub.requests == []


def test_tree_pagination_follows_the_link_header():
    local = _local_files(SRC)
    folders = {"/".join(p.split("/")[:i]) for p in local for i in range(1, p.count("/") + 1)}
    entries = len(local) + 1 + len(folders)  # files, .gitattributes, folders
    with HubStandIn(tree_page_size=4) as small, small.configure():
        small.add_dataset(REPO, SRC)
        # max_workers=1: one sequential listing (more workers may split a long listing per folder)
        found = HfFileSystem(max_workers=1).find(f"datasets/{REPO}")
        cursors = [r.query for r in small.requests if r.kind == "tree"]
    assert sorted(found) == sorted(f"datasets/{REPO}/{p}" for p in [*local, ".gitattributes"])
    assert entries > 8
    assert cursors == ["recursive=true&expand=false"] + [
        f"recursive=true&expand=false&cursor={n}" for n in range(4, entries, 4)]


def test_paths_info_answers_info_with_refresh(hub, fs):
    out = fs.info(f"datasets/{REPO}/{DATA}", refresh=True, expand_info=True)
    assert out["size"] == (SRC / DATA).stat().st_size
    assert out["last_commit"].oid == hub.first_sha
    posts = [r for r in hub.requests if r.kind == "paths-info"]
    assert [(r.method, r.path) for r in posts] == [("POST", f"/api/datasets/{REPO}/paths-info/main")]
    infos = HfApi().get_paths_info(REPO, [DATA, "meta", "no/such/file"], repo_type="dataset")
    assert [(type(i).__name__, i.path) for i in infos] == [("RepoFile", DATA), ("RepoFolder", "meta")]


def test_cat_file_sends_only_the_range_asked_with_cache_type_none(hub, fs):
    local = (SRC / FRONT).read_bytes()
    got = fs.cat_file(f"datasets/{REPO}/{FRONT}", start=100, end=1100, cache_type="none")
    assert got == local[100:1100]
    content = [r for r in hub.requests if r.file == FRONT]
    # the Hub answers a 302 to the CDN for LFS files; the Range header follows the redirect
    assert [(r.kind, r.status, r.range) for r in content] == [
        ("resolve", 302, "bytes=100-1099"), ("cdn", 206, "bytes=100-1099")]
    assert hub.bytes_by_file() == {FRONT: 1000}


def test_cat_file_default_readahead_fetches_to_the_block_end(hub, fs):
    local = (SRC / FRONT).read_bytes()
    assert fs.cat_file(f"datasets/{REPO}/{FRONT}", start=100, end=200) == local[100:200]
    # fsspec.s default "readahead" cache asks for end + 5 MiB, clipped to the file size
    assert [r.range for r in hub.requests if r.kind == "cdn"] == [f"bytes=100-{len(local) - 1}"]
    assert hub.bytes_by_file() == {FRONT: len(local) - 100}


def test_open_seek_read_fetches_block_ranges(hub, fs):
    local = (SRC / DATA).read_bytes()
    with fs.open(f"datasets/{REPO}/{DATA}", "rb", block_size=256, cache_type="none") as f:
        f.seek(len(local) - 8)
        footer = f.read(8)
        f.seek(1000)
        middle = f.read(300)
    assert footer == local[-8:] and footer[-4:] == b"PAR1"
    assert middle == local[1000:1300]
    assert [r.range for r in hub.requests if r.kind == "cdn"] == [
        f"bytes={len(local) - 8}-{len(local) - 1}", "bytes=1000-1299"]
    assert hub.bytes_by_file() == {DATA: 308}


def test_small_files_are_served_in_place_with_hub_headers(hub):
    url = hub.resolve_url(REPO, INFO, "main")
    meta = get_hf_file_metadata(url)
    local = (SRC / INFO).read_bytes()
    assert (meta.commit_hash, meta.etag, meta.size, meta.location) == (
        hub.first_sha, _git_blob_oid(local), len(local), url)
    video = get_hf_file_metadata(hub.resolve_url(REPO, FRONT, hub.first_sha))
    assert video.commit_hash == hub.first_sha
    assert video.etag == hashlib.sha256((SRC / FRONT).read_bytes()).hexdigest()
    assert video.size == (SRC / FRONT).stat().st_size
    assert video.location.startswith(hub.cdn_endpoint + "/blobs/") and video.xet_file_data is None


def test_lfs_files_can_be_served_without_redirect():
    with HubStandIn(lfs_redirect=False) as direct, direct.configure():
        direct.add_dataset(REPO, SRC)
        got = HfFileSystem().cat_file(f"datasets/{REPO}/{FRONT}", start=0, end=64, cache_type="none")
        assert got == (SRC / FRONT).read_bytes()[:64]
        assert [(r.kind, r.status, r.range) for r in direct.requests if r.file == FRONT] == [
            ("resolve", 206, "bytes=0-63")]


def test_get_file_uses_plain_http_never_xet(hub, fs, tmp_path):
    fs.get_file(f"datasets/{REPO}/{FRONT}", str(tmp_path / "a.mp4"))
    assert (tmp_path / "a.mp4").read_bytes() == (SRC / FRONT).read_bytes()
    assert not any("xet" in r.path.lower() for r in hub.requests)
    assert [(r.kind, r.range) for r in hub.requests if r.file == FRONT] == [("resolve", None), ("cdn", None)]


def test_new_commit_moves_the_branch_and_the_old_sha_keeps_its_bytes(hub, tmp_path):
    repo = "lerobot/moving"
    folder = shutil.copytree(SRC, tmp_path / "v1")
    old_sha = hub.add_dataset(repo, folder)
    fs = HfFileSystem(skip_instance_cache=True)
    old_info = fs.cat_file(f"datasets/{repo}/{INFO}")
    (folder / INFO).write_bytes(old_info + b"\n")
    new_sha = hub.commit(repo, folder, branch="main")
    assert new_sha != old_sha and hub.head(repo, "main") == new_sha
    assert HfApi().dataset_info(repo).sha == new_sha
    # the instance's cached listing still has the old size until the cache is invalidated
    assert fs.info(f"datasets/{repo}/{INFO}")["size"] == len(old_info)
    fs.invalidate_cache()
    assert fs.cat_file(f"datasets/{repo}/{INFO}") == (folder / INFO).read_bytes()
    assert fs.cat_file(f"datasets/{repo}@{old_sha}/{INFO}") == old_info
    expanded = {e["name"].rsplit("/", 1)[1]: e["last_commit"].oid
                for e in fs.ls(f"datasets/{repo}@{new_sha}/meta", expand_info=True)}
    assert expanded["info.json"] == new_sha and expanded["stats.json"] == old_sha
    assert [c.commit_id for c in HfApi().list_repo_commits(repo, repo_type="dataset")] == [new_sha, old_sha]


def test_pull_request_revision_url_encoded_or_not(hub, fs):
    hub.add_dataset("lerobot/pr", SRC, revisions={"main": None, "refs/pr/1": SRC / "meta"})
    expected = sorted([*_local_files(SRC / "meta"), ".gitattributes"])
    encoded = fs.find("datasets/lerobot/pr@refs%2Fpr%2F1")
    plain = fs.find("datasets/lerobot/pr@refs/pr/1")
    assert [p.removeprefix("datasets/lerobot/pr@refs%2Fpr%2F1/") for p in encoded] == expected
    assert [p.removeprefix("datasets/lerobot/pr@refs/pr/1/") for p in plain] == expected
    assert {r.revision for r in hub.requests} == {"refs/pr/1"}
    assert {r.path for r in hub.requests if r.kind == "tree"} == {"/api/datasets/lerobot/pr/tree/refs/pr/1"}


def test_429_then_success_is_retried_by_range_reads(hub, fs):
    hub.fail_next(f"/datasets/{REPO}/resolve/*", 429, headers={"Retry-After": "0"})
    got = fs.cat_file(f"datasets/{REPO}/{FRONT}", start=0, end=10, cache_type="none")
    assert got == (SRC / FRONT).read_bytes()[:10]
    assert [(r.kind, r.status) for r in hub.requests if r.file == FRONT] == [
        ("resolve", 429), ("resolve", 302), ("cdn", 206)]


def test_503_then_success_is_retried_by_tree_listing(hub, fs):
    hub.fail_next(f"/api/datasets/{REPO}/tree/*", 503)
    assert len(fs.ls(f"datasets/{REPO}/meta")) == 4
    assert [r.status for r in hub.requests if r.kind == "tree"] == [503, 200]


def test_dropped_connection_is_retried(hub, fs):
    hub.fail_next(f"/datasets/{REPO}/resolve/*", "drop")
    assert fs.cat_file(f"datasets/{REPO}/{INFO}", start=0, end=5, cache_type="none") == (SRC / INFO).read_bytes()[:5]
    assert [r.status for r in hub.requests if r.file == INFO] == [0, 206]


def test_429_on_repo_info_is_not_retried(hub, fs):
    hub.fail_next(f"/api/datasets/{REPO}/revision/*", 429)
    with pytest.raises(HfHubHTTPError) as caught:
        fs.resolve_path(f"datasets/{REPO}@main/{INFO}")
    assert caught.value.response.status_code == 429
    assert [r.status for r in hub.requests] == [429]
    assert fs.resolve_path(f"datasets/{REPO}@main/{INFO}").revision == "main"  # not cached as missing


def test_missing_repo_revision_and_file_map_to_hub_errors(hub, fs):
    with pytest.raises(RepositoryNotFoundError) as caught:
        HfApi().dataset_info("lerobot/absent")
    assert caught.value.response.status_code == 401  # as the Hub: 401 without a token
    with pytest.raises(RevisionNotFoundError):
        HfApi().dataset_info(REPO, revision="v9.9")
    with pytest.raises(EntryNotFoundError) as caught:
        get_hf_file_metadata(hub.resolve_url(REPO, "meta/absent.json", "main"))
    assert caught.value.response.headers["X-Repo-Commit"] == hub.first_sha
    with pytest.raises(FileNotFoundError, match="repository not found") as caught:
        fs.info("datasets/lerobot/absent/meta/info.json")
    assert isinstance(caught.value.__cause__, RepositoryNotFoundError)
    with pytest.raises(FileNotFoundError, match="revision not found") as caught:
        fs.info(f"datasets/{REPO}@v9.9/{INFO}")
    assert isinstance(caught.value.__cause__, RevisionNotFoundError)
    with pytest.raises(FileNotFoundError):
        fs.info(f"datasets/{REPO}/meta/absent.json")


def test_private_repo_needs_its_token(hub):
    with pytest.raises(RepositoryNotFoundError) as caught:
        HfApi().dataset_info("lerobot/private")
    assert caught.value.response.status_code == 401
    with pytest.raises(RepositoryNotFoundError) as caught:
        HfApi(token="hf_other").dataset_info("lerobot/private")
    assert caught.value.response.status_code == 404
    with pytest.raises(HfHubHTTPError) as caught:
        HfApi(token="hf_unknown").dataset_info("lerobot/private")
    assert caught.value.response.status_code == 401 and not isinstance(caught.value, RepositoryNotFoundError)
    hub.reset_counts()
    fs = HfFileSystem(token="hf_secret", skip_instance_cache=True)
    assert fs.cat_file(f"datasets/lerobot/private/{INFO}") == (SRC / INFO).read_bytes()
    assert {r.status for r in hub.requests} == {200} and all(r.authorized for r in hub.requests)
    hub.reset_counts()
    assert fs.cat_file(f"datasets/lerobot/private/{FRONT}", start=0, end=16, cache_type="none") == \
        (SRC / FRONT).read_bytes()[:16]
    # the token goes to the Hub, not to the CDN the Hub redirects big files to (the two server threads record
    # their requests as they finish, so the CDN's can come first)
    assert sorted((r.kind, r.authorized) for r in hub.requests if r.file == FRONT) == [("cdn", False),
                                                                                      ("resolve", True)]
    public = [d.id for d in HfApi().list_datasets(author="lerobot")]
    assert "lerobot/so101" in public and "lerobot/private" not in public
    assert [d.id for d in HfApi().list_datasets(author="other")] == ["other/public"]
    assert "lerobot/private" in [d.id for d in HfApi(token="hf_secret").list_datasets(author="lerobot")]


def test_gated_repo_lists_but_needs_access_for_content(hub):
    assert HfApi().dataset_info("lerobot/gated").gated == "auto"
    fs = HfFileSystem(skip_instance_cache=True)
    assert fs.info(f"datasets/lerobot/gated/{INFO}")["size"] == (SRC / INFO).stat().st_size
    with pytest.raises(GatedRepoError) as caught:
        fs.cat_file(f"datasets/lerobot/gated/{INFO}")
    assert caught.value.response.status_code == 401
    with pytest.raises(GatedRepoError) as caught:
        HfFileSystem(token="hf_other", skip_instance_cache=True).cat_file(f"datasets/lerobot/gated/{INFO}")
    assert caught.value.response.status_code == 403
    granted = HfFileSystem(token="hf_granted", skip_instance_cache=True)
    assert granted.cat_file(f"datasets/lerobot/gated/{INFO}") == (SRC / INFO).read_bytes()


def test_snapshot_download_fetches_every_file_whole(hub, tmp_path):
    hub.reset_counts()
    folder = Path(snapshot_download("other/public", repo_type="dataset", cache_dir=tmp_path))
    local = _local_files(SRC / "meta")
    assert {p: data for p, data in _local_files(folder).items() if p != ".gitattributes"} == local
    assert {p: n for p, n in hub.bytes_by_file("other/public").items() if p != ".gitattributes"} == {
        p: len(data) for p, data in local.items()}
    kinds = [r.kind for r in hub.requests]
    assert kinds[:2] == ["info", "tree"] and kinds.count("info") == 1


def test_exists_answers_false_on_a_transient_error(hub, fs):
    # HfHubHTTPError is an OSError, which `exists` swallows: a 503 on the repo lookup reads as "missing"
    hub.fail_next(f"/api/datasets/{REPO}", 503)
    assert fs.exists(f"datasets/{REPO}/{INFO}") is False
    assert fs.exists(f"datasets/{REPO}/{INFO}") is True
    assert [(r.kind, r.status) for r in hub.requests][:2] == [("info", 503), ("info", 200)]


def test_an_owner_wildcard_is_not_a_repo_path_but_list_datasets_lists_the_owner(hub, fs):
    with pytest.raises(ValueError, match="Repo id must use alphanumeric"):
        fs.glob("hf://datasets/lerobot/*")
    listed = {d.id: d.sha for d in HfApi().list_datasets(author="lerobot")}
    assert listed[REPO] == hub.head(REPO, "main") and "other/public" not in listed
    assert [(r.kind, r.query) for r in hub.requests] == [("list", "author=lerobot")]


def test_resolve_answers_ranges_like_an_http_server(hub):
    from huggingface_hub.utils import get_session

    url = hub.resolve_url(REPO, INFO, hub.first_sha)
    local = (SRC / INFO).read_bytes()
    tail = get_session().get(url, headers={"Range": "bytes=-8"})
    assert (tail.status_code, tail.content) == (206, local[-8:])
    assert tail.headers["Content-Range"] == f"bytes {len(local) - 8}-{len(local) - 1}/{len(local)}"
    past = get_session().get(url, headers={"Range": f"bytes={len(local)}-"})
    assert (past.status_code, past.headers["Content-Range"]) == (416, f"bytes */{len(local)}")
    head = get_session().head(url)
    assert head.headers["Content-Length"] == str(len(local)) and head.headers["X-Repo-Commit"] == hub.first_sha
    assert head.headers["Accept-Ranges"] == "bytes" and head.content == b""
