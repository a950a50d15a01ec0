"""Training orders over an import: LeRobot's episode-aware sampler and the GOP-block shuffle.

The numpy constructions are checked without PyTorch; the samplers themselves skip when it is missing.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

import numpy as np
import pytest

from tests.helpers import run_python
from transforms.reader.samplers import blocks_order, episode_frame_indices, gop_blocks

REPO = Path(__file__).resolve().parents[1]

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (pip install -e '.[torch]'); "
                                                      "the samplers are torch.utils.data.Sampler subclasses")


def lerobot_indices(froms, tos, use=None, first=0, last=0) -> list[int]:
    """LeRobot's own construction of the kept indices (its EpisodeAwareSampler loop, written out)."""
    out = []
    for episode, (start, end) in enumerate(zip(froms, tos)):
        if use is None or episode in use:
            out.extend(range(start + first, end - last))
    return out


@dataclasses.dataclass
class StandIn:
    """What the samplers read from an ImportedFrames: episode bounds, GOP ids per camera, a length."""

    episode_bounds: list
    gops: dict

    def __len__(self) -> int:
        return len(next(iter(self.gops.values())))

    def gop_ids(self, camera: Optional[str] = None) -> np.ndarray:
        return np.asarray(self.gops[camera if camera is not None else next(iter(self.gops))], np.int64)


def synthetic(episode_lengths, gop_len, cameras=("cam",)) -> StandIn:
    """Episodes encoded on their own (GOPs restart at each episode), GOP ids running across the file."""
    bounds, gops, next_gop, start = [], [], 0, 0
    for n in episode_lengths:
        bounds.append((start, start + n))
        gops.append(next_gop + np.arange(n) // gop_len)
        next_gop += -(-n // gop_len)
        start += n
    ids = np.concatenate(gops).astype(np.int64)
    return StandIn(bounds, {c: ids + 1000 * k for k, c in enumerate(cameras)})


# ------------------------------------------------------------------------------------------------
# Episode-aware indices (numpy, no torch)
# ------------------------------------------------------------------------------------------------

def test_kept_indices_on_small_bounds():
    froms, tos = [0, 5, 8], [5, 8, 12]
    assert episode_frame_indices(froms, tos).tolist() == list(range(12))
    # drop 1 first + 2 last: episode 0 keeps 1..2, episode 1 (3 frames) keeps nothing, episode 2 keeps 9
    assert episode_frame_indices(froms, tos, drop_n_first_frames=1, drop_n_last_frames=2).tolist() == [1, 2, 9]
    assert episode_frame_indices(froms, tos, drop_n_last_frames=1).tolist() == [0, 1, 2, 3, 5, 6, 8, 9, 10]
    assert episode_frame_indices(froms, tos, drop_n_first_frames=3).tolist() == [3, 4, 11]
    # chosen episodes come in episode order, whatever the order or repeats of the list
    assert episode_frame_indices(froms, tos, [2, 0, 2]).tolist() == [0, 1, 2, 3, 4, 8, 9, 10, 11]
    assert episode_frame_indices(froms, tos, {1}).tolist() == [5, 6, 7]
    idx = episode_frame_indices(np.array([3, 10], np.int32), np.array([6, 12], np.int32))
    assert idx.dtype == np.int64 and idx.tolist() == [3, 4, 5, 10, 11]


def test_kept_indices_equal_lerobots_loop_on_random_bounds():
    rng = np.random.default_rng(5)
    for _ in range(200):
        lengths = rng.integers(1, 12, rng.integers(1, 9))
        tos = np.cumsum(lengths) + int(rng.integers(0, 4))
        froms = tos - lengths
        first, last = (int(x) for x in rng.integers(0, 6, 2))
        use = None if rng.random() < 0.3 else sorted(set(rng.integers(0, len(lengths) + 2, 4).tolist()))
        want = lerobot_indices(froms.tolist(), tos.tolist(), use, first, last)
        if not want:
            with pytest.raises(ValueError, match="no frame left to sample"):
                episode_frame_indices(froms, tos, use, first, last)
        else:
            assert episode_frame_indices(froms, tos, use, first, last).tolist() == want


def test_kept_indices_refuse_bad_arguments():
    with pytest.raises(ValueError, match="drop_n_first_frames must be >= 0, got -1"):
        episode_frame_indices([0], [5], drop_n_first_frames=-1)
    with pytest.raises(ValueError, match="drop_n_last_frames must be >= 0, got -2"):
        episode_frame_indices([0], [5], drop_n_last_frames=-2)
    with pytest.raises(ValueError, match="same length, got 2 and 1"):
        episode_frame_indices([0, 5], [5])
    with pytest.raises(ValueError, match="must hold integers, got dtype float64"):
        episode_frame_indices([0.0, 5.0], [5.0, 9.0])
    with pytest.raises(ValueError) as err:
        episode_frame_indices([0, 3], [3, 5], drop_n_first_frames=2, drop_n_last_frames=1)
    assert str(err.value) == ("no frame left to sample: 2 of 2 episode(s) chosen, and drop_n_first_frames=2 + "
                              "drop_n_last_frames=1 leave none of their frames; choose other episodes or drop "
                              "fewer frames")
    with pytest.raises(ValueError, match="0 of 2 episode"):
        episode_frame_indices([0, 3], [3, 5], episode_indices_to_use=[4])


# ------------------------------------------------------------------------------------------------
# GOP blocks (numpy, no torch)
# ------------------------------------------------------------------------------------------------

def test_gop_blocks_on_small_ids():
    gops = [0, 0, 0, 1, 1, 1, 1, 2, 2, 3]
    starts, lengths = gop_blocks(gops)
    assert starts.tolist() == [0, 3, 7, 9] and lengths.tolist() == [3, 4, 2, 1]
    # an episode start inside a run cuts it (ids repeating across files stay apart)
    starts, lengths = gop_blocks([5, 5, 5, 5, 6, 6], episode_starts=[0, 2])
    assert starts.tolist() == [0, 2, 4] and lengths.tolist() == [2, 2, 2]
    # fixed-size blocks counted from each GOP start: never two GOPs in one block
    starts, lengths = gop_blocks(gops, block=2)
    assert starts.tolist() == [0, 2, 3, 5, 7, 9] and lengths.tolist() == [2, 1, 2, 2, 2, 1]
    assert gop_blocks(gops, block=100)[0].tolist() == [0, 3, 7, 9]
    # no camera: every item its own block, or `block` items within an episode
    assert gop_blocks([-1] * 5, episode_starts=[0, 3])[1].tolist() == [1, 1, 1, 1, 1]
    starts, lengths = gop_blocks([-1] * 5, episode_starts=[0, 3], block=2)
    assert starts.tolist() == [0, 2, 3] and lengths.tolist() == [2, 1, 2]
    assert [a.tolist() for a in gop_blocks([])] == [[], []]


def test_gop_blocks_refuse_bad_arguments():
    with pytest.raises(ValueError, match="block must be >= 1 item, got 0"):
        gop_blocks([0, 0], block=0)
    with pytest.raises(ValueError, match=r"episode starts must lie in \[0, 2\] \(the items\), got 0..5"):
        gop_blocks([0, 0], episode_starts=[0, 5])
    with pytest.raises(ValueError, match="gop_ids must be one-dimensional"):
        gop_blocks([[0, 1]])


def test_blocks_order_covers_every_item_and_keeps_blocks_whole():
    ds = synthetic([47, 30, 91, 5], gop_len=12)
    gop = ds.gop_ids()
    starts, lengths = gop_blocks(gop, [b[0] for b in ds.episode_bounds], block=5)
    order = blocks_order(starts, lengths, True, np.random.default_rng(3))
    assert sorted(order.tolist()) == list(range(len(ds)))
    assert blocks_order(starts, lengths, False).tolist() == list(range(len(ds)))
    position = np.empty_like(order)
    position[order] = np.arange(len(order))
    for start, n in zip(starts.tolist(), lengths.tolist()):
        assert 1 <= n <= 5 and len(set(gop[start:start + n].tolist())) == 1  # one GOP per block
        # the block's items are read one after the other, in item order
        assert np.array_equal(position[start:start + n], position[start] + np.arange(n))
    assert not np.array_equal(order, np.arange(len(order)))


# ------------------------------------------------------------------------------------------------
# EpisodeAwareSampler
# ------------------------------------------------------------------------------------------------

@needs_torch
def test_episode_aware_sampler_is_lerobots_order():
    from transforms.reader.samplers import EpisodeAwareSampler

    froms, tos = [0, 40, 70], [40, 70, 130]
    s = EpisodeAwareSampler(froms, tos, episode_indices_to_use=[0, 2], drop_n_first_frames=2,
                            drop_n_last_frames=3)
    assert isinstance(s, torch.utils.data.Sampler)
    assert list(s) == list(range(2, 37)) + list(range(72, 127)) and len(s) == 90
    # shuffled: LeRobot yields indices[torch.randperm(len)] from the global generator; so do we
    kept = lerobot_indices(froms, tos, None, 1, 1)
    s = EpisodeAwareSampler(torch.tensor(froms), torch.tensor(tos), drop_n_first_frames=1, drop_n_last_frames=1,
                            shuffle=True)
    torch.manual_seed(123)
    want = [kept[i] for i in torch.randperm(len(kept))]
    torch.manual_seed(123)
    got = list(s)
    assert got == want and sorted(got) == kept and got != kept
    g1, g2 = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    assert list(EpisodeAwareSampler(froms, tos, shuffle=True, generator=g1)) == \
        [list(range(130))[i] for i in torch.randperm(130, generator=g2)]


@needs_torch
def test_episode_aware_sampler_seed_epoch_and_other_forms():
    from transforms.reader.samplers import EpisodeAwareSampler

    ds = synthetic([40, 30, 60], gop_len=10)
    a = EpisodeAwareSampler.from_dataset(ds, shuffle=True, seed=7, drop_n_last_frames=4)
    b = EpisodeAwareSampler.from_dataset(ds, shuffle=True, seed=7, drop_n_last_frames=4)
    c = EpisodeAwareSampler.from_dataset(ds, shuffle=True, seed=8, drop_n_last_frames=4)
    first_a, first_b, first_c = list(a), list(b), list(c)
    kept = lerobot_indices([0, 40, 70], [40, 70, 130], None, 0, 4)
    assert first_a == first_b and sorted(first_a) == kept
    assert first_c != first_a and sorted(first_c) == kept
    second = list(a)  # the epoch advanced
    assert second != first_a and sorted(second) == kept
    a.set_epoch(0)
    assert list(a) == first_a
    # LeRobot's older form: episode_data_index = {"from": ..., "to": ...}
    edi = {"from": torch.tensor([0, 40, 70]), "to": torch.tensor([40, 70, 130])}
    assert list(EpisodeAwareSampler(edi, episode_indices_to_use=[1])) == list(range(40, 70))
    # episode 1 has 30 frames: dropping 38 leaves none of it
    assert list(EpisodeAwareSampler(episode_data_index=edi, drop_n_first_frames=38)) == [38, 39] + \
        list(range(108, 130))
    with pytest.raises(TypeError, match="needs the episode bounds"):
        EpisodeAwareSampler()
    with pytest.raises(TypeError, match="give either episode_data_index"):
        EpisodeAwareSampler(edi, [1])


@needs_torch
def test_episode_aware_sampler_from_a_dataset_serving_some_episodes():
    """Like LeRobot's training, `episode_indices_to_use` names episodes, matched to the ones served."""
    from transforms.reader.samplers import EpisodeAwareSampler

    ds = synthetic([10, 4, 6], gop_len=5)
    ds.episode_indices = np.array([3, 7, 9])   # ImportedFrames(episodes=[3, 7, 9])
    s = EpisodeAwareSampler.from_dataset(ds, episode_indices_to_use=[9, 3], drop_n_first_frames=1)
    assert list(s) == list(range(1, 10)) + list(range(15, 20))
    assert list(EpisodeAwareSampler.from_dataset(ds, episode_indices_to_use={7})) == [10, 11, 12, 13]
    assert list(EpisodeAwareSampler.from_dataset(ds, drop_n_last_frames=3)) == \
        list(range(7)) + [10] + list(range(14, 17))
    with pytest.raises(ValueError, match="0 of 3 episode"):
        EpisodeAwareSampler.from_dataset(ds, episode_indices_to_use=[0, 1, 2])


@needs_torch
def test_episode_aware_sampler_in_a_dataloader():
    from transforms.reader.samplers import EpisodeAwareSampler

    class Items(torch.utils.data.Dataset):
        def __len__(self):
            return 50

        def __getitem__(self, i):
            return {"index": torch.tensor(i)}

    s = EpisodeAwareSampler([0, 20], [20, 50], drop_n_last_frames=5, shuffle=True, seed=1)
    loader = torch.utils.data.DataLoader(Items(), batch_size=8, sampler=s)
    got = torch.cat([b["index"] for b in loader]).tolist()
    assert sorted(got) == list(range(15)) + list(range(20, 45))


# ------------------------------------------------------------------------------------------------
# GopBlockSampler
# ------------------------------------------------------------------------------------------------

@needs_torch
def test_gop_block_sampler_every_item_once_and_gops_whole():
    from transforms.reader.samplers import GopBlockSampler

    ds = synthetic([100, 37, 250, 64, 13], gop_len=15, cameras=("top", "wrist"))
    gop = ds.gop_ids("top")
    s = GopBlockSampler(ds, seed=3)
    assert isinstance(s, torch.utils.data.Sampler) and len(s) == len(ds) == 464
    for _ in range(3):
        order = np.array(list(s))
        assert np.array_equal(np.sort(order), np.arange(464))   # every index exactly once per epoch
        # each GOP is visited in one stretch, in item order: one decode of it per epoch
        first_seen = {}
        for pos, g in enumerate(gop[order].tolist()):
            first_seen.setdefault(g, pos)
        for g, pos in first_seen.items():
            n = int((gop == g).sum())
            stretch = order[pos:pos + n]
            assert (gop[stretch] == g).all() and (np.diff(stretch) == 1).all()
    assert s.num_blocks == len(np.unique(gop))  # no GOP here spans two episodes


@needs_torch
def test_gop_block_sampler_fixed_blocks_never_straddle_a_gop():
    from transforms.reader.samplers import GopBlockSampler

    ds = synthetic([100, 37, 250], gop_len=15)
    gop = ds.gop_ids()
    s = GopBlockSampler(ds, block=4, seed=11)
    assert s.num_blocks == sum(-(-int((gop == g).sum()) // 4) for g in np.unique(gop))
    for start, n in zip(s.starts.tolist(), s.lengths.tolist()):
        assert 1 <= n <= 4 and len(set(gop[start:start + n].tolist())) == 1
        gop_first = int(np.flatnonzero(gop == gop[start])[0])
        assert (start - gop_first) % 4 == 0   # aligned on the GOP's start
    order = np.array(list(s))
    assert np.array_equal(np.sort(order), np.arange(len(ds)))


@needs_torch
def test_gop_block_sampler_seeds_and_epochs():
    from transforms.reader.samplers import GopBlockSampler

    ds = synthetic([300, 200], gop_len=10)
    one, same, other = GopBlockSampler(ds, seed=1), GopBlockSampler(ds, seed=1), GopBlockSampler(ds, seed=2)
    e0 = list(one)
    assert e0 == list(same) and e0 != list(other)
    e1 = list(one)
    assert e1 != e0 and sorted(e1) == sorted(e0)
    one.set_epoch(0)
    assert list(one) == e0 and one.order(1).tolist() == e1
    assert list(GopBlockSampler(ds, shuffle=False)) == list(range(500))
    # the camera picks whose GOPs make the blocks
    ds2 = StandIn([(0, 6)], {"a": np.array([0, 0, 0, 1, 1, 1]), "b": np.array([0, 0, 1, 1, 2, 2])})
    assert GopBlockSampler(ds2, camera="a").lengths.tolist() == [3, 3]
    assert GopBlockSampler(ds2, camera="b").lengths.tolist() == [2, 2, 2]


@needs_torch
def test_gop_block_sampler_refuses_ids_of_another_length():
    from transforms.reader.samplers import GopBlockSampler

    class Short(StandIn):
        def __len__(self):
            return 7

    with pytest.raises(ValueError, match=r"gop_ids\('top'\) gives 6 ids for a dataset of 7 items"):
        GopBlockSampler(Short([(0, 7)], {"top": np.zeros(6)}), camera="top")


def test_reader_imports_without_torch():
    """With torch unimportable: the reader and the samplers' numpy parts work; a sampler says what it needs."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import transforms.reader as r\n"
        "from transforms.reader.samplers import gop_blocks, GopBlockSampler\n"
        "print(gop_blocks([0, 0, 1])[1].tolist())\n"
        "try:\n"
        "    GopBlockSampler(None)\n"
        "except ImportError as e:\n"
        "    print(e)\n")
    lines = run_python(code)
    assert lines[0] == "[2, 1]"
    assert lines[1].startswith("GopBlockSampler needs PyTorch, which is not installed: pip install -e")


@needs_torch
def test_reader_package_loads_the_samplers_on_first_use():
    code = (
        "import sys\n"
        "import transforms.reader as r\n"
        "print('torch' in sys.modules)\n"
        "import torch\n"
        "print(issubclass(r.GopBlockSampler, torch.utils.data.Sampler), r.EpisodeAwareSampler.__module__)\n")
    assert run_python(code) == ["False", "True transforms.reader.samplers"]


# ------------------------------------------------------------------------------------------------
# Over a real import: each GOP decoded once per epoch
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def h264_import(tmp_path_factory) -> Path:
    from tests.helpers import lerobot_dataset, run_import

    out = tmp_path_factory.mktemp("samplers") / "h264_multi_file"
    assert run_import(lerobot_dataset("h264_multi_file"), out) == 0
    return out


@needs_torch
def test_gop_block_order_decodes_each_gop_once(h264_import):
    """LeRobot's h264 dataset (GOP 6, B-frames, cameras in different files): in block order every GOP of
    both cameras is started once; in a random order many are started again."""
    from transforms.reader import ImportedFrames
    from transforms.reader.samplers import GopBlockSampler

    ds = ImportedFrames(str(h264_import))
    top, side = ds.gop_ids("observation.images.top"), ds.gop_ids("observation.images.side")
    assert len(ds) == 104 and top.min() >= 0
    sampler = GopBlockSampler(ds, seed=4, camera="observation.images.top")
    assert sampler.num_blocks == len(np.unique(top))
    order = list(sampler)
    assert sorted(order) == list(range(104))
    for i in order:
        ds[i]
    gops = len(np.unique(top)) + len(np.unique(side))
    assert ds.gop_cache.streams_started == gops
    shuffled = ImportedFrames(str(h264_import), cache_gops=2)
    for i in np.random.default_rng(4).permutation(104).tolist():
        shuffled[i]
    assert shuffled.gop_cache.streams_started > 2 * gops
