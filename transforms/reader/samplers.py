"""Training orders over an imported dataset: LeRobot's episode-aware sampler and a GOP-keeping shuffle.

    EpisodeAwareSampler   the frames of chosen episodes, minus some at each edge, in order or shuffled,
                          with LeRobot's arguments and order (`torch.randperm` over the kept frames)
    GopBlockSampler       a shuffle of blocks of consecutive items that decode from one GOP, each block
                          read in order, so a random epoch decodes each GOP about once instead of once
                          per item
    episode_frame_indices, gop_blocks, blocks_order   the numpy constructions behind them

A fully random order asks for a GOP's frames at random moments: a decoder cache of a few GOPs then
misses on nearly every item, and each item pays the decode of its GOP up to the frame it needs. Keeping
the items of one GOP together makes each GOP one sequential decode; shuffling the blocks keeps the
order random at the scale that matters for training (episodes and moments), as long as blocks are
much smaller than the dataset.

The numpy parts import without PyTorch; constructing a sampler needs it (`pip install -e ".[torch]"`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Optional

import numpy as np

try:
    import torch
    from torch.utils.data import Sampler as _SamplerBase
except ImportError:  # the pure parts of the reader work without PyTorch
    torch = None

    class _SamplerBase:  # type: ignore[no-redef]
        """Stands in for `torch.utils.data.Sampler` when PyTorch is not installed (constructing a sampler
        then raises ImportError)."""

__all__ = ["EpisodeAwareSampler", "GopBlockSampler", "blocks_order", "episode_frame_indices", "gop_blocks"]

_NEEDS_TORCH = ("{name} needs PyTorch, which is not installed: pip install -e \".[torch]\" "
                "(the reader's numpy parts work without it)")


def _require_torch(name: str) -> None:
    if torch is None:
        raise ImportError(_NEEDS_TORCH.format(name=name))


def _int_array(values: Any, what: str) -> np.ndarray:
    """A 1-d int64 array from a list, numpy array, tensor or Arrow column of integers."""
    if hasattr(values, "to_numpy") and not isinstance(values, np.ndarray):
        values = values.to_numpy()
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{what} must hold integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def _concat_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """`concatenate([arange(s, s + n) for s, n in zip(starts, lengths)])`, without a Python loop."""
    lengths = lengths.astype(np.int64, copy=False)
    total = int(lengths.sum())
    offsets = np.cumsum(lengths) - lengths  # where each range begins in the output
    return np.repeat(starts.astype(np.int64, copy=False) - offsets, lengths) + np.arange(total, dtype=np.int64)


def _seed_int(seed: int, epoch: int) -> int:
    """One 63-bit seed from (seed, epoch): every epoch gets an unrelated stream."""
    return int(np.random.SeedSequence([int(seed) & (2**64 - 1), int(epoch)]).generate_state(1, np.uint64)[0] >> 1)


# ------------------------------------------------------------------------------------------------
# Episode-aware order
# ------------------------------------------------------------------------------------------------

def episode_frame_indices(dataset_from_indices: Any, dataset_to_indices: Any,
                          episode_indices_to_use: Optional[Sequence[int]] = None, drop_n_first_frames: int = 0,
                          drop_n_last_frames: int = 0) -> np.ndarray:
    """The item indices LeRobot's `EpisodeAwareSampler` keeps, in its order (int64).

    Episode `e` (its position in the bounds) is kept when `episode_indices_to_use` is None or holds `e`;
    it contributes `range(from[e] + drop_n_first_frames, to[e] - drop_n_last_frames)`, in episode order
    (the order of `episode_indices_to_use` and repeats in it do not matter). An episode with no frames
    left contributes none.

    Args:
        dataset_from_indices: first item index of each episode.
        dataset_to_indices: one past the last item index of each episode.
        episode_indices_to_use: positions of the episodes to keep (all when None).
        drop_n_first_frames: frames left out at the start of each episode (>= 0).
        drop_n_last_frames: frames left out at the end of each episode (>= 0).

    Raises:
        ValueError: bounds of different lengths or not integers, a negative drop, or no frame left.
    """
    starts = _int_array(dataset_from_indices, "dataset_from_indices")
    stops = _int_array(dataset_to_indices, "dataset_to_indices")
    if starts.shape != stops.shape:
        raise ValueError(f"dataset_from_indices and dataset_to_indices must have the same length, "
                         f"got {len(starts)} and {len(stops)}")
    for name, n in (("drop_n_first_frames", drop_n_first_frames), ("drop_n_last_frames", drop_n_last_frames)):
        if int(n) < 0:
            raise ValueError(f"{name} must be >= 0, got {n}")
    used = np.ones(len(starts), dtype=bool)
    if episode_indices_to_use is not None:
        chosen = episode_indices_to_use
        if isinstance(chosen, (set, frozenset, range)) or not hasattr(chosen, "__len__"):
            chosen = sorted(chosen)
        used = np.isin(np.arange(len(starts), dtype=np.int64), _int_array(chosen, "episode_indices_to_use"))
    first = starts[used] + int(drop_n_first_frames)
    lengths = np.maximum(stops[used] - int(drop_n_last_frames) - first, 0)
    indices = _concat_ranges(first, lengths)
    if indices.size == 0:
        raise ValueError(
            f"no frame left to sample: {int(used.sum())} of {len(starts)} episode(s) chosen, and "
            f"drop_n_first_frames={drop_n_first_frames} + drop_n_last_frames={drop_n_last_frames} leave none "
            "of their frames; choose other episodes or drop fewer frames")
    return indices


class EpisodeAwareSampler(_SamplerBase):
    """LeRobot's `EpisodeAwareSampler` over an import: same arguments, same indices, same order.

    Yields the kept frames (see `episode_frame_indices`) in order, or, with `shuffle=True`, in the order
    of `torch.randperm(len(self), generator=...)` exactly as LeRobot does: with the same torch generator
    state both yield the same sequence. `seed=` (not in LeRobot) makes the shuffle a pure function of
    `(seed, epoch)`; the epoch advances after each pass, or is set with `set_epoch`.

    Build it from LeRobot-style bounds (`dataset_from_indices` / `dataset_to_indices`, or LeRobot's
    older `episode_data_index={"from": ..., "to": ...}`) or from a dataset with `from_dataset(ds)`,
    which takes `ds.episode_bounds`.

    Args:
        dataset_from_indices: first item index of each episode; a mapping with "from" and "to" here is
            taken as `episode_data_index`.
        dataset_to_indices: one past the last item index of each episode.
        episode_indices_to_use: positions of the episodes to keep in the bounds (all when None).
        drop_n_first_frames: frames left out at the start of each episode.
        drop_n_last_frames: frames left out at the end of each episode.
        shuffle: yield the kept frames in a random order.
        generator: the `torch.Generator` of the shuffle (LeRobot's argument); the global one when None.
        episode_data_index: `{"from": [...], "to": [...]}`, instead of the two bound lists.
        seed: when given (and no generator), shuffle with a generator seeded from `(seed, epoch)`.

    Raises:
        ImportError: PyTorch is not installed.
        ValueError: bad bounds or drops, or no frame left (see `episode_frame_indices`).
    """

    def __init__(self, dataset_from_indices: Any = None, dataset_to_indices: Any = None,
                 episode_indices_to_use: Optional[Sequence[int]] = None, drop_n_first_frames: int = 0,
                 drop_n_last_frames: int = 0, shuffle: bool = False, generator: Any = None, *,
                 episode_data_index: Optional[Mapping[str, Any]] = None, seed: Optional[int] = None) -> None:
        _require_torch("EpisodeAwareSampler")
        if isinstance(dataset_from_indices, Mapping):
            if episode_data_index is not None or dataset_to_indices is not None:
                raise TypeError("EpisodeAwareSampler: give either episode_data_index (a mapping with 'from' and "
                                "'to'; the other arguments by keyword) or dataset_from_indices and "
                                "dataset_to_indices")
            episode_data_index, dataset_from_indices = dataset_from_indices, None
        if episode_data_index is not None:
            missing = [k for k in ("from", "to") if k not in episode_data_index]
            if missing or dataset_from_indices is not None or dataset_to_indices is not None:
                raise TypeError("EpisodeAwareSampler: episode_data_index must be a mapping with 'from' and 'to' "
                                "and replaces dataset_from_indices / dataset_to_indices")
            dataset_from_indices, dataset_to_indices = episode_data_index["from"], episode_data_index["to"]
        if dataset_from_indices is None or dataset_to_indices is None:
            raise TypeError("EpisodeAwareSampler needs the episode bounds: dataset_from_indices and "
                            "dataset_to_indices, episode_data_index, or EpisodeAwareSampler.from_dataset(ds)")
        super().__init__()
        self.indices = episode_frame_indices(dataset_from_indices, dataset_to_indices, episode_indices_to_use,
                                             drop_n_first_frames, drop_n_last_frames)
        self.shuffle = bool(shuffle)
        self.generator = generator
        self.seed = seed
        self.epoch = 0

    @classmethod
    def from_dataset(cls, dataset: Any, **kwargs: Any) -> "EpisodeAwareSampler":
        """A sampler over `dataset.episode_bounds` (a list of `(from, to)` item positions per episode).

        Args:
            dataset: an `ImportedFrames` (or anything with `episode_bounds`).
            **kwargs: the other arguments of `EpisodeAwareSampler`. `episode_indices_to_use` holds episode
                indices, as LeRobot's training passes them: matched against `dataset.episode_indices`
                when the dataset has them (an `ImportedFrames` made with `episodes=` serves a subset),
                else counted in the order of `episode_bounds`.
        """
        bounds = np.asarray(dataset.episode_bounds, dtype=np.int64).reshape(-1, 2)
        chosen = kwargs.get("episode_indices_to_use")
        served = getattr(dataset, "episode_indices", None)
        if chosen is not None and served is not None:
            served = _int_array(served, "episode_indices")
            if len(served) != len(bounds):
                raise ValueError(f"the dataset lists {len(served)} episode indices for {len(bounds)} episode bounds")
            if isinstance(chosen, (set, frozenset, range)) or not hasattr(chosen, "__len__"):
                chosen = sorted(chosen)
            kwargs["episode_indices_to_use"] = np.flatnonzero(np.isin(served, _int_array(chosen,
                                                                                         "episode_indices_to_use")))
        return cls(bounds[:, 0], bounds[:, 1], **kwargs)

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next pass uses (with `seed=`); each pass then advances it by one.

        Args:
            epoch: the epoch number.
        """
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[int]:
        if not self.shuffle:
            return iter(self.indices.tolist())
        generator = self.generator
        if generator is None and self.seed is not None:
            generator = torch.Generator().manual_seed(_seed_int(self.seed, self.epoch))
        self.epoch += 1
        order = torch.randperm(len(self.indices), generator=generator).numpy()
        return iter(self.indices[order].tolist())

    def __len__(self) -> int:
        return len(self.indices)


# ------------------------------------------------------------------------------------------------
# GOP-block shuffle
# ------------------------------------------------------------------------------------------------

def gop_blocks(gop_ids: Any, episode_starts: Any = None, block: Optional[int] = None) -> tuple[np.ndarray, np.ndarray]:
    """Cut items `0..n-1` into blocks of consecutive items that decode from one GOP.

    A block starts wherever the GOP id changes and at each episode start (episodes are encoded on
    their own, so no GOP spans two; the cut also keeps ids that repeat across files apart). With
    `block`, each such run is further cut every `block` items counted from its first item, so blocks
    start on GOP starts and never hold two GOPs. Items without a camera frame (id -1) have no GOP to
    keep together: each is its own block, or blocks of `block` items within an episode.

    Args:
        gop_ids: int per item, the GOP its camera frame decodes from; -1 for none.
        episode_starts: first item of each episode (optional).
        block: largest block, in items (>= 1); whole GOP runs when None.

    Returns:
        `(starts, lengths)`: int64 arrays, blocks in item order, covering every item once.

    Raises:
        ValueError: `block` < 1, ids not one-dimensional integers, or an episode start outside the items.
    """
    gop = _int_array(gop_ids, "gop_ids")
    n = len(gop)
    if block is not None and int(block) < 1:
        raise ValueError(f"block must be >= 1 item, got {block}")
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    cut = np.empty(n, dtype=bool)
    cut[0] = True
    np.not_equal(gop[1:], gop[:-1], out=cut[1:])
    if episode_starts is not None:
        eps = _int_array(episode_starts, "episode_starts")
        if eps.size and (eps.min() < 0 or eps.max() > n):
            raise ValueError(f"episode starts must lie in [0, {n}] (the items), got {int(eps.min())}.."
                             f"{int(eps.max())}")
        cut[eps[eps < n]] = True
    no_camera = gop < 0
    if block is None:
        cut |= no_camera
    else:
        run_start = np.flatnonzero(cut)
        run_of = np.cumsum(cut) - 1
        position = np.arange(n, dtype=np.int64) - run_start[run_of]
        cut |= position % int(block) == 0
    starts = np.flatnonzero(cut).astype(np.int64)
    lengths = np.diff(np.append(starts, n)).astype(np.int64)
    return starts, lengths


def blocks_order(starts: np.ndarray, lengths: np.ndarray, shuffle: bool, rng: Optional[np.random.Generator] = None
                 ) -> np.ndarray:
    """All items of the blocks, blocks in a random order when `shuffle`, items in order within a block.

    Args:
        starts: first item of each block.
        lengths: items in each block.
        shuffle: permute the blocks (with `rng`).
        rng: the numpy generator of the permutation (required when `shuffle`).
    """
    if shuffle:
        perm = rng.permutation(len(starts))
        starts, lengths = starts[perm], lengths[perm]
    return _concat_ranges(starts, lengths)


class GopBlockSampler(_SamplerBase):
    """Every item once per epoch, GOP by GOP: blocks of items sharing a GOP in a random order.

    With DataLoader workers, consecutive batches go to different workers, so a GOP cut by a batch
    boundary is decoded by two workers; a batch size of at least a GOP's length keeps that rare.

    Args:
        dataset: an `ImportedFrames` (anything with `episode_bounds`, `gop_ids(camera)` and `len`).
        block: largest block, in items, cut from GOP starts; whole GOPs when None.
        shuffle: permute the blocks; in item order when False.
        seed: seed of the permutation, which is a pure function of `(seed, epoch)`.
        camera: the camera whose GOPs make the blocks (the dataset's default when None).

    Raises:
        ImportError: PyTorch is not installed.
        ValueError: `gop_ids` does not give one id per item, or a bad `block`.
    """

    def __init__(self, dataset: Any, *, block: Optional[int] = None, shuffle: bool = True, seed: int = 0,
                 camera: Optional[str] = None) -> None:
        _require_torch("GopBlockSampler")
        super().__init__()
        gop = _int_array(dataset.gop_ids(camera), "gop_ids")
        if len(gop) != len(dataset):
            raise ValueError(f"GopBlockSampler: gop_ids({camera!r}) gives {len(gop)} ids for a dataset of "
                             f"{len(dataset)} items; it must give one per item")
        bounds = np.asarray(dataset.episode_bounds, dtype=np.int64).reshape(-1, 2)
        self.starts, self.lengths = gop_blocks(gop, bounds[:, 0], block)
        self.num_items = len(gop)
        self.block = block
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.epoch = 0

    @property
    def num_blocks(self) -> int:
        """How many blocks an epoch shuffles."""
        return len(self.starts)

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next pass uses; each pass then advances it by one.

        Args:
            epoch: the epoch number.
        """
        self.epoch = int(epoch)

    def order(self, epoch: Optional[int] = None) -> np.ndarray:
        """The item order of one epoch (int64), without advancing the epoch.

        Args:
            epoch: the epoch (the sampler's current one when None).
        """
        epoch = self.epoch if epoch is None else int(epoch)
        rng = np.random.default_rng(_seed_int(self.seed, epoch)) if self.shuffle else None
        return blocks_order(self.starts, self.lengths, self.shuffle, rng)

    def __iter__(self) -> Iterator[int]:
        order = self.order()
        self.epoch += 1
        return iter(order.tolist())

    def __len__(self) -> int:
        return self.num_items
