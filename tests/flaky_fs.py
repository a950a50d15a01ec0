"""An fsspec filesystem for tests that fails a fraction of reads and writes with transient errors.

`flaky:///abs/path` is the local file `/abs/path`; each storage call and each read or write of an open
file fails with ConnectionResetError with probability `FlakyFileSystem.rate` (seeded, so a test is
repeatable). `FlakyFileSystem.injected` counts the faults raised.
"""

from __future__ import annotations

import random

import fsspec
from fsspec.implementations.local import LocalFileSystem


class _FlakyFile:
    def __init__(self, fs: "FlakyFileSystem", raw) -> None:
        self._fs = fs
        self._raw = raw

    def read(self, *args):
        self._fs._maybe_fail("read")
        return self._raw.read(*args)

    def write(self, data):
        self._fs._maybe_fail("write")
        return self._raw.write(data)

    def __getattr__(self, name):
        return getattr(self._raw, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._raw.close()


class FlakyFileSystem(LocalFileSystem):
    protocol = ("flaky",)
    rate = 0.0
    injected = 0
    _rng = random.Random(0)

    @classmethod
    def configure(cls, rate: float, seed: int = 0) -> None:
        cls.rate, cls.injected, cls._rng = rate, 0, random.Random(seed)

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, str) and path.startswith("flaky://"):
            path = path[len("flaky://"):]
        return LocalFileSystem._strip_protocol(path)

    def unstrip_protocol(self, name: str) -> str:
        return "flaky://" + name

    def _maybe_fail(self, what: str) -> None:
        if self._rng.random() < type(self).rate:
            type(self).injected += 1
            raise ConnectionResetError(f"injected transient fault in {what}")

    def _open(self, path, mode="rb", **kwargs):
        self._maybe_fail("open")
        return _FlakyFile(self, super()._open(path, mode=mode, **kwargs))

    def cat_file(self, path, start=None, end=None, **kwargs):
        self._maybe_fail("cat_file")
        return super().cat_file(path, start=start, end=end, **kwargs)

    def size(self, path):
        self._maybe_fail("size")
        return super().size(path)

    def mv(self, path1, path2, **kwargs):
        self._maybe_fail("mv")
        return super().mv(path1, path2, **kwargs)


def register() -> None:
    fsspec.register_implementation("flaky", FlakyFileSystem, clobber=True)
