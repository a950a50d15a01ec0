"""The output lease: created only if absent, renewed and released only by its holder, an expired lease
taken over by exactly one run; on local storage (separate processes), gs:// and s3:// emulators and
memory://."""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
import time
from http import HTTPStatus

import fsspec
import pytest

import storage_emulators
from transforms.output import lease
from transforms.base import storage
from transforms.output.lease import LEASE_NAME, LeaseHeld, LeaseKeeper, LeaseLost, LeaseRecord


def _clock(start: float = 1_000_000.0):
    now = [start]
    return now, (lambda: now[0])


# ------------------------------------------------------------------------------------------------
# Local storage
# ------------------------------------------------------------------------------------------------

def test_second_run_is_refused_with_the_holder_and_expiry(tmp_path):
    out = tmp_path / "out"
    now, clock = _clock(1_700_000_000.0)
    first = lease.acquire(str(out), run_id="run-a", ttl_seconds=600, job="nightly-42", clock=clock)
    assert first.took_over is None and (out / LEASE_NAME).exists()
    now[0] += 130
    with pytest.raises(LeaseHeld) as info:
        lease.acquire(str(out), run_id="run-b", clock=clock)
    message = str(info.value)
    assert "is leased by run run-a (host " in message and "job nightly-42" in message
    assert "since 2023-11-14T22:13:20+00:00" in message
    assert "expiring at 2023-11-14T22:23:20+00:00 (in 7 min 50 s)" in message
    assert "--wait-for-lease SECONDS" in message
    assert info.value.holder.run_id == "run-a"
    assert lease.read_lease(str(out)) == first.record


def _race(out: str, run_id: str, start, results) -> None:
    start.wait()
    try:
        got = lease.acquire(out, run_id=run_id, ttl_seconds=600)
        results.put((run_id, "won", got.took_over.run_id if got.took_over else None))
    except LeaseHeld as ex:
        results.put((run_id, "held", ex.holder.run_id))


def _run_racers(out: str, n: int) -> list[tuple]:
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(out, f"run-{i}", start, results)) for i in range(n)]
    for p in procs:
        p.start()
    time.sleep(0.5)  # every process imported and waiting
    start.set()
    outcomes = sorted(results.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return outcomes


def test_processes_started_together_exactly_one_wins(tmp_path):
    out = str(tmp_path / "out")
    outcomes = _run_racers(out, 4)
    winners = [o for o in outcomes if o[1] == "won"]
    assert len(winners) == 1, outcomes
    winner = winners[0][0]
    assert all(o[2] == winner for o in outcomes if o[1] == "held"), outcomes
    assert lease.read_lease(out).run_id == winner


def test_processes_racing_for_an_expired_lease_exactly_one_takes_it_over(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    dead = LeaseRecord("crashed-run", "old-host", 4242, "", 100.0, 100.0, 400.0)
    (out / LEASE_NAME).write_bytes(dead.to_bytes())
    outcomes = _run_racers(str(out), 4)
    winners = [o for o in outcomes if o[1] == "won"]
    assert len(winners) == 1, outcomes
    assert winners[0][2] == "crashed-run"  # reported as a take-over of the crashed run's lease
    assert all(o[2] == winners[0][0] for o in outcomes if o[1] == "held"), outcomes


def test_expired_lease_is_taken_over_and_its_old_holder_loses_it(tmp_path):
    out = str(tmp_path / "out")
    now, clock = _clock()
    old = lease.acquire(out, run_id="run-a", ttl_seconds=60, clock=clock)
    now[0] += 61
    new = lease.acquire(out, run_id="run-b", ttl_seconds=60, clock=clock)
    assert new.took_over == old.record
    assert new.takeover_message().startswith(f"took over the expired lease on {new.output} of run run-a (host ")
    assert "(expired 1 s ago); that run is presumed dead" in new.takeover_message()
    with pytest.raises(LeaseLost, match="of run run-a expired and was taken over by run run-b"):
        lease.renew(old, clock=clock)
    assert lease.release(old) is False
    assert lease.read_lease(out).run_id == "run-b"
    assert lease.release(new) is True
    assert not (tmp_path / "out" / LEASE_NAME).exists()


def test_renew_extends_only_our_lease(tmp_path):
    out = str(tmp_path / "out")
    now, clock = _clock()
    held = lease.acquire(out, run_id="run-a", ttl_seconds=60, clock=clock)
    now[0] += 50
    renewed = lease.renew(held, clock=clock)
    assert renewed.record.expires_at == now[0] + 60 and renewed.record.started_at == held.record.started_at
    now[0] += 50  # past the first expiry, within the renewed one
    with pytest.raises(LeaseHeld):
        lease.acquire(out, run_id="run-b", clock=clock)


def test_an_unreadable_lease_is_taken_over(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / LEASE_NAME).write_bytes(b'{"run_id": "half-writ')
    got = lease.acquire(str(out), run_id="run-b")
    assert got.took_over.run_id == "unknown (unreadable lease)"
    assert lease.read_lease(str(out)).run_id == "run-b"


def test_wait_for_lease_polls_until_it_is_released(tmp_path):
    out = str(tmp_path / "out")
    holder = lease.acquire(out, run_id="run-a", ttl_seconds=600)
    threading.Timer(0.3, lease.release, args=(holder,)).start()
    got = lease.acquire(out, run_id="run-b", wait_seconds=10, poll_seconds=0.05)
    assert got.record.run_id == "run-b" and got.took_over is None
    with pytest.raises(LeaseHeld, match=r"\(waited 0 s\)"):
        lease.acquire(out, run_id="run-c", wait_seconds=0.2, poll_seconds=0.05)


def test_wait_for_lease_takes_over_once_it_expires(tmp_path):
    out = str(tmp_path / "out")
    lease.acquire(out, run_id="run-a", ttl_seconds=0.3)
    got = lease.acquire(out, run_id="run-b", wait_seconds=10, poll_seconds=5)
    assert got.took_over.run_id == "run-a"


def test_keeper_renews_in_the_background_and_releases(tmp_path):
    out = str(tmp_path / "out")
    with LeaseKeeper(lease.acquire(out, run_id="run-a", ttl_seconds=1.5)) as keeper:
        assert keeper.interval == pytest.approx(0.5)
        time.sleep(2.0)  # longer than the TTL: only renewals keep it
        assert keeper.renewals >= 2
        assert lease.read_lease(out).expires_at > time.time()
        with pytest.raises(LeaseHeld):
            lease.acquire(out, run_id="run-b")
        keeper.check()
    assert lease.read_lease(out) is None


def test_keeper_reports_a_lost_lease_and_leaves_the_new_holders_alone(tmp_path):
    out = str(tmp_path / "out")
    keeper = LeaseKeeper(lease.acquire(out, run_id="run-a", ttl_seconds=0.3), interval_seconds=0.5)
    with keeper:
        time.sleep(0.35)  # expired before the first renewal (a stalled run)
        thief = lease.acquire(out, run_id="run-b", ttl_seconds=600)
        assert thief.took_over.run_id == "run-a"
        deadline = time.time() + 10
        while keeper.lost is None and time.time() < deadline:  # the next renewal finds it lost
            time.sleep(0.05)
        with pytest.raises(LeaseLost, match="taken over by run run-b"):
            keeper.check()
    assert lease.read_lease(out).run_id == "run-b"


def test_read_lease_writes_nothing(tmp_path):
    assert lease.read_lease(str(tmp_path / "never")) is None
    assert not (tmp_path / "never").exists()


# ------------------------------------------------------------------------------------------------
# Object stores: gs:// (emulator), s3:// (moto), memory://
# ------------------------------------------------------------------------------------------------

_PRECONDITIONS_LOCK = threading.Lock()


def _install_gcs_preconditions() -> None:
    """Make gcp-storage-emulator honour `ifGenerationMatch` on uploads, downloads and deletes, as GCS does
    (it ignores the parameter). The emulator's routes are kept; only the handlers are wrapped, and the
    wrapper checks the object's generation before the emulator (one request at a time) acts."""
    from gcp_storage_emulator import server
    from gcp_storage_emulator.exceptions import NotFound
    from gcp_storage_emulator.handlers import objects

    with _PRECONDITIONS_LOCK:
        if getattr(server, "_lerobot_preconditions", False):
            return

        def guarded(handler):
            def wrapper(request, response, storage, *args, **kwargs):
                wanted = (request.query.get("ifGenerationMatch") or [None])[0]
                if wanted is not None:
                    name = request.params.get("object_id") or request.query["name"][0]
                    try:
                        current = str(storage.get_file_obj(request.params["bucket_name"], name)["generation"])
                    except NotFound:
                        current = "0"
                    if current != wanted and not (current == "0" and wanted != "0" and handler is not objects.insert):
                        response.status = HTTPStatus.PRECONDITION_FAILED
                        response.json({"error": {"code": 412, "message": "conditionNotMet"}})
                        return None
                return handler(request, response, storage, *args, **kwargs)
            return wrapper

        wrapped = {f: guarded(f) for f in (objects.insert, objects.get, objects.delete)}
        server.HANDLERS = tuple((regex, {m: wrapped.get(h, h) for m, h in methods.items()})
                                for regex, methods in server.HANDLERS)
        server._lerobot_preconditions = True


def _gcs():
    _install_gcs_preconditions()
    return storage_emulators.gcs_emulator()


STORES = {
    "gs": (_gcs, ("gcp_storage_emulator.server", "gcsfs"), "lease-gs"),
    "s3": (storage_emulators.s3_emulator, ("moto.server", "s3fs"), "lease-s3"),
    "memory": (contextlib.nullcontext, (), "lease-memory"),
}


def _bucket(request):
    emulator, modules, name = STORES[request.param]
    reason = storage_emulators.missing(*modules)
    if reason:
        pytest.skip(reason)
    with emulator():
        fs = fsspec.filesystem(request.param)
        if request.param != "memory":
            fs.mkdir(name)
        yield f"{request.param}://{name}"
        if request.param == "memory" and fs.exists(f"/{name}"):
            fs.rm(f"/{name}", recursive=True)


@pytest.fixture(scope="module", params=sorted(STORES))
def bucket(request):
    """An empty bucket on the store, as a URL prefix."""
    yield from _bucket(request)


# moto checks S3's If-None-Match and then puts in two steps, so concurrent racers can both win there;
# real S3 (and GCS, and the emulator here, which answers one request at a time) decide atomically.
@pytest.fixture(scope="module", params=sorted(set(STORES) - {"s3"}))
def race_bucket(request):
    """An empty bucket on a store whose conditional create is atomic under concurrency."""
    yield from _bucket(request)


def test_store_create_hold_renew_release(bucket):
    out = f"{bucket}/basic"
    now, clock = _clock()
    first = lease.acquire(out, run_id="run-a", ttl_seconds=60, clock=clock)
    with pytest.raises(LeaseHeld, match="is leased by run run-a"):
        lease.acquire(out, run_id="run-b", clock=clock)
    now[0] += 30
    renewed = lease.renew(first, clock=clock)
    assert renewed.token != first.token and renewed.record.expires_at == now[0] + 60
    # The version read before the renewal is stale now: a swap or delete made with it must fail.
    store = lease._store_for(first.output)
    with pytest.raises(lease._Conflict):
        store.replace(b"{}", first.token)
    with pytest.raises(lease._Conflict):
        store.delete(first.token)
    assert lease.read_lease(out) == renewed.record
    assert lease.release(renewed) is True
    assert lease.read_lease(out) is None
    assert lease.release(renewed) is False


def test_store_expired_lease_is_taken_over(bucket):
    out = f"{bucket}/expired"
    now, clock = _clock()
    old = lease.acquire(out, run_id="run-a", ttl_seconds=10, clock=clock)
    now[0] += 11
    new = lease.acquire(out, run_id="run-b", ttl_seconds=10, clock=clock)
    assert new.took_over == old.record
    with pytest.raises(LeaseLost, match="taken over by run run-b"):
        lease.renew(old, clock=clock)
    assert lease.release(old) is False
    assert lease.read_lease(out).run_id == "run-b"


@pytest.mark.parametrize("expired", [False, True], ids=["free", "expired"])
def test_store_racers_exactly_one_wins(race_bucket, expired):
    """Threads started together (the emulators answer one request at a time, as one object's writes are
    ordered on GCS); S3 is left out: moto does not make its check-then-put atomic."""
    out = f"{race_bucket}/race-{'expired' if expired else 'free'}"
    if expired:
        fs, path = fsspec.core.url_to_fs(out)
        fs.pipe_file(f"{path}/{LEASE_NAME}", LeaseRecord("crashed", "h", 1, "", 1.0, 1.0, 2.0).to_bytes())
    start, outcomes = threading.Barrier(4), []

    def race(i: int) -> None:
        start.wait()
        try:
            got = lease.acquire(out, run_id=f"run-{i}", ttl_seconds=600)
            outcomes.append(("won", got.record.run_id, got.took_over.run_id if got.took_over else None))
        except LeaseHeld as ex:
            outcomes.append(("held", ex.holder.run_id, None))

    threads = [threading.Thread(target=race, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    winners = [o for o in outcomes if o[0] == "won"]
    assert len(outcomes) == 4 and len(winners) == 1, outcomes
    assert all(o[1] == winners[0][1] for o in outcomes), outcomes
    assert winners[0][2] == ("crashed" if expired else None)
    assert lease.read_lease(out).run_id == winners[0][1]


def test_unsupported_store_is_refused():
    with pytest.raises(ValueError, match="no lease support for https://example.invalid/out"):
        lease._store_for("https://example.invalid/out")


def test_record_round_trips():
    record = LeaseRecord("r", "h", 7, "job", 1.5, 2.5, 3.5)
    assert LeaseRecord.from_bytes(record.to_bytes()) == record


def test_store_oversized_lease_is_refused_before_its_body_is_read(bucket, monkeypatch):
    """A lease object larger than MAX_LEASE_BYTES (an edit, another tool's file) is `LeaseInvalid`, on every
    store, from its size alone: its body is never downloaded, however large it is."""
    out = f"{bucket}/oversized"
    fs, base = fsspec.core.url_to_fs(out)
    path = f"{base}/{LEASE_NAME}"
    fs.pipe_file(path, b" " * (lease.MAX_LEASE_BYTES + 1))
    downloads = []
    real_cat, real_call = fs.cat_file, getattr(fs, "call", None)
    monkeypatch.setattr(lease, "_s3_get", lambda *a: downloads.append("s3 get"))
    monkeypatch.setattr(type(fs), "cat_file", lambda self, *a, **k: downloads.append("cat") or real_cat(*a, **k))
    if real_call is not None and bucket.startswith("gs://"):
        monkeypatch.setattr(type(fs), "call", lambda self, *a, **k: (
            downloads.append("gcs media") if k.get("alt") == "media" else None) or real_call(*a, **k))
    root = lease.storage.normalize_root(out)
    for attempt in (lambda: lease.read_lease(out), lambda: lease.acquire(out, run_id="run-a")):
        with pytest.raises(lease.LeaseInvalid) as refused:
            attempt()
        assert refused.value.rule == "lease"
        assert str(refused.value) == (
            f"[lease] file {LEASE_NAME}: the lease file {root}/{LEASE_NAME} is larger than 65,536 bytes: it is not a "
            f"lease this importer wrote, so the output is not imported. If no import is running on {root}, delete "
            f"{root}/{LEASE_NAME} and run again")
    assert downloads == []
    assert fs.size(path) == lease.MAX_LEASE_BYTES + 1  # left as it was
    fs.rm(path)


def test_create_once_lets_exactly_one_racer_create(race_bucket, tmp_path):
    """The claim an episodes file's committers race for (its last parts written at once): one wins, the
    object keeps the winner's bytes, and a storage with no conditional create is named."""
    for uri in (f"{race_bucket}/claims/commit-a.json", f"file://{tmp_path}/claims/commit-a.json"):
        results: list[bool] = []
        barrier = threading.Barrier(6)

        def race(k: int) -> None:
            barrier.wait()
            results.append(lease.create_once(uri, f"racer {k}\n".encode()))

        threads = [threading.Thread(target=race, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == [False] * 5 + [True], uri
        assert lease.create_once(uri, b"late\n") is False
        fs, path = storage.filesystem(uri)
        fs.invalidate_cache()
        assert fs.cat_file(path).startswith(b"racer ")
    with pytest.raises(ValueError, match="no conditional create on http://example.com/x"):
        lease.create_once("http://example.com/x", b"")
