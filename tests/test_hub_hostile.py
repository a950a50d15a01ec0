"""The Hub turned hostile: the loopback stand-in (tests/hub_standin.py) echoes the token in its errors,
links a listing's next page to another host or to pages without end, sends bytes slowly, ignores Range.
Each case runs a real import and checks the exact refusal, the bound it keeps (time, memory, requests),
and that the token appears in no output, message or log line."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

pytest.importorskip("huggingface_hub", reason="the Hub tests need huggingface_hub: pip install -e '.[test]' "
                                              "(or the '[hub]' extra)")

from tests.dataset_factory import DatasetSpec, write_dataset  # noqa: E402
from tests.helpers import SAMPLE, copy_dataset, read_errors, run_import  # noqa: E402
from tests.hub_standin import HubStandIn  # noqa: E402
from transforms.base import hub, run_limits  # noqa: E402

TOKEN = "hf_hostile_token_8c1d2e3f4a"


@pytest.fixture(autouse=True)
def _fast_backoff(monkeypatch):
    monkeypatch.setattr(hub, "BACKOFF_S", 0.01)


def _no_token_anywhere(out: Path, texts) -> None:
    for p in out.rglob("*"):
        if p.is_file():
            assert TOKEN.encode() not in p.read_bytes(), p
    for text in texts:
        assert TOKEN not in text


def _dataset(tmp_path: Path) -> Path:
    return write_dataset(tmp_path / "ds", DatasetSpec(lengths=(3, 4), episodes_per_meta_file=1))


def test_error_echoing_the_token_is_redacted_everywhere(tmp_path, caplog, capfd):
    out = tmp_path / "out"
    with HubStandIn() as standin, standin.configure(token=TOKEN):
        standin.add_dataset("test/echo", _dataset(tmp_path), token=TOKEN, private=True)
        # every read of a data file answers an error quoting the request's Authorization header
        standin.fail_next("/datasets/test/echo/resolve/*/data/*", 400, times=100,
                          headers={"X-Error-Message": "bad request; {authorization}"})
        with caplog.at_level(logging.DEBUG):
            assert run_import("hf://datasets/test/echo", out) == 1
    errors = read_errors(out)
    echoed = "Bad request:\nbad request; Authorization: ***"
    assert errors and all(e["message"].endswith(echoed) for e in errors), errors
    captured = capfd.readouterr()
    _no_token_anywhere(out, [captured.out, captured.err] + [r.getMessage() for r in caplog.records])


def test_listing_linking_another_host_is_not_followed(tmp_path, capfd):
    out = tmp_path / "out"
    with HubStandIn(tree_page_size=2) as standin, standin.configure(token=TOKEN):
        standin.add_dataset("test/foreign", _dataset(tmp_path), token=TOKEN, private=True)
        standin.hostile["tree_next"] = "foreign"
        assert run_import("hf://datasets/test/foreign", out) == 1
        cdn = standin.cdn_endpoint
        kinds = {r.kind for r in standin.requests}
    assert "cdn" not in kinds, "no request went to the other origin"
    (error,) = read_errors(out)
    assert error["rule"] == "io"
    assert f"/meta links its next page to another host ({cdn}); the listing is not followed there (the request " \
           "carries the token): check HF_ENDPOINT, and try again later" in error["message"], error["message"]
    _no_token_anywhere(out, capfd.readouterr())


@pytest.mark.parametrize("mode", ["endless", "repeat", "fresh"])
def test_endless_listing_stops(tmp_path, mode, capfd):
    with HubStandIn(tree_page_size=2) as standin, standin.configure():
        standin.add_dataset("test/endless", _dataset(tmp_path))
        standin.hostile["tree_next"] = mode
        start = time.monotonic()
        status = None
        try:
            status = run_import("hf://datasets/test/endless", tmp_path / "out", "--hub_list_max_pages", "40")
        except SystemExit as ex:
            message = str(ex)
        else:
            message = capfd.readouterr().out
        pages = standin.count("tree")
    assert time.monotonic() - start < 300  # a hang never ends; a loaded machine is slow
    if mode == "repeat":  # the second page repeats the first: stopped there, whatever the bounds
        assert pages <= 2 * 3, pages
        (error,) = read_errors(tmp_path / "out")
        assert error["rule"] == "io" and "/meta loops: its page 2 repeats page 1, and a listing never names an " \
            "entry twice; it was stopped there: try again later" in error["message"], error
    elif mode == "fresh":  # new entries on every page: the page bound ends it
        assert pages <= 41 * 3, pages
        (error,) = read_errors(tmp_path / "out")
        assert error["rule"] == "limit" and "/meta goes on past 40 pages and " in error["message"], error
        assert f"entries (at most 40 pages and {run_limits.HUB_LIST_MAX_ITEMS:,} entries are read): a repository " \
            "that large is not a dataset root (--hub_list_max_pages, --hub_list_max_items raise the bounds)" \
            in error["message"], error
    else:
        assert pages <= 41 * 3, pages  # each listing stops at its first empty page
        assert status == 0, message  # the pages past the end are empty: the listing stops there, whole


def test_ignored_range_is_refused_without_buffering(tmp_path):
    root = copy_dataset(SAMPLE, tmp_path / "so101")
    mp4s = sorted(root.glob("videos/*/*/*.mp4"))
    with open(mp4s[0], "ab") as f:  # a trailing `free` box of 48 MiB: a whole answer would be that large
        size = 48 << 20
        f.write(size.to_bytes(4, "big") + b"free")
        f.write(b"\0" * (size - 8))
    padded = str(mp4s[0].relative_to(root))
    with HubStandIn() as standin, standin.configure():
        standin.add_dataset("test/norange", root)
        standin.hostile["ignore_range"] = True
        assert run_import("hf://datasets/test/norange", tmp_path / "out") == 1
        sent = sum(r.bytes_sent for r in standin.requests if r.file == padded)
    errors = read_errors(tmp_path / "out")
    assert errors and any(f"the Hub answered 200 to a read of bytes 0..65536 of {padded} of the Hub dataset "
                          "test/norange, not the range asked for (it ignored the Range header); the answer was not "
                          "read" in e["message"] for e in errors), errors
    # the client closed the answer at its status line: the server got out what the socket buffers took
    assert sent < 16 << 20, f"{sent / 2 ** 20:.1f} MiB of the {size / 2 ** 20:.0f} MiB answer were taken"


def test_slow_bytes_meet_the_read_deadline(tmp_path, monkeypatch):
    monkeypatch.setattr(hub, "READ_DEADLINE_S", 1.0)
    with HubStandIn() as standin, standin.configure():
        standin.add_dataset("test/slow", _dataset(tmp_path))
        standin.hostile["slow_bytes"] = 0.05  # every body: 20 bytes a second, each within any read timeout
        start = time.monotonic()
        try:
            run_import("hf://datasets/test/slow", tmp_path / "out")
        except SystemExit as ex:
            message = str(ex)
        else:
            message = "\n".join(e["message"] for e in read_errors(tmp_path / "out"))
    assert time.monotonic() - start < 300  # a hang never ends; a loaded machine is slow
    assert "took more than 1 s (the Hub sent" in message, message
