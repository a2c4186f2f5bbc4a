"""The disk shelf of text embeddings: arrays by text key for one backend, in memory and in shards
under ``<store>/embeddings/<backend key>/`` (see :mod:`persobench.metrics.encoders.encoder`, which fills it).

A shard is four ``.npy`` files (keys, offsets, vectors, weights) written to a temporary
folder and renamed into place, so a crash leaves either a whole shard or none; a damaged shard is
ignored and its texts are embedded again.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from persobench.store.files import atomic_write_json

if TYPE_CHECKING:  # pragma: no cover - numpy loads with the first shelf used (the CLI's start-up skips it)
    import numpy as np

__all__ = ["EmbeddingShelf", "backend_key", "text_key"]


def text_key(text: str) -> bytes:
    """The cache key of a text: 128 bits of its SHA-256, hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32].encode("ascii")


class EmbeddingShelf:
    """Arrays by text key, for one backend: in memory, and (with a folder) in shards on disk."""

    def __init__(self, folder: Path | None, description: dict[str, Any]) -> None:
        self.folder = Path(folder) if folder is not None else None
        self.description = description
        self._index: dict[bytes, tuple[int, int, int]] = {}
        self._shards: list[tuple[np.ndarray, np.ndarray]] = []
        self._pending: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}
        self._seen: set[str] = set()
        self.damaged = 0
        self.refresh()

    def refresh(self) -> None:
        """Read the index of shards written since (by this or another process)."""
        import numpy as np

        if self.folder is None or not self.folder.is_dir():
            return
        for shard in sorted(self.folder.glob("shard-*")):
            if shard.name in self._seen or not shard.is_dir():
                continue
            self._seen.add(shard.name)
            try:
                keys = np.load(shard / "keys.npy")
                offsets = np.load(shard / "offsets.npy")
                vectors = np.load(shard / "vectors.npy", mmap_mode="r")
                weights = np.load(shard / "weights.npy", mmap_mode="r")
                if len(offsets) != len(keys) + 1 or int(offsets[-1]) != len(vectors) != len(weights):
                    raise ValueError("inconsistent shard")
            except (OSError, ValueError):  # a damaged shard is ignored: its texts are embedded again
                self.damaged += 1
                continue
            number = len(self._shards)
            self._shards.append((vectors, weights))
            for i, key in enumerate(keys.tolist()):
                self._index[key] = (number, int(offsets[i]), int(offsets[i + 1]))

    def __contains__(self, key: bytes) -> bool:
        return key in self._pending or key in self._index

    def get(self, key: bytes) -> tuple[np.ndarray, np.ndarray] | None:
        """``(vectors, weights)`` of a text (float32 copies), or None."""
        import numpy as np

        found = self._pending.get(key)
        if found is not None:
            return found
        place = self._index.get(key)
        if place is None:
            return None
        vectors, weights = self._shards[place[0]]
        return np.array(vectors[place[1]:place[2]]), np.array(weights[place[1]:place[2]])

    def put(self, key: bytes, vectors: np.ndarray, weights: np.ndarray) -> None:
        import numpy as np

        if key not in self:
            self._pending[key] = (np.ascontiguousarray(vectors, dtype=np.float32),
                                  np.ascontiguousarray(weights, dtype=np.float32))

    def flush(self) -> int:
        """Write the pending arrays as one new shard (atomically); returns how many were written."""
        import numpy as np

        if self.folder is None or not self._pending:
            return 0
        self.folder.mkdir(parents=True, exist_ok=True)
        about = self.folder / "backend.json"
        if not about.exists():

            atomic_write_json(about, self.description)
        keys = list(self._pending)
        lengths = [len(self._pending[k][0]) for k in keys]
        offsets = np.zeros(len(keys) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        tmp = Path(tempfile.mkdtemp(prefix=".shard-", dir=self.folder))
        try:
            for name, array in (("keys", np.array(keys, dtype="S32")), ("offsets", offsets),
                                ("vectors", np.concatenate([self._pending[k][0] for k in keys])),
                                ("weights", np.concatenate([self._pending[k][1] for k in keys]))):
                with open(tmp / f"{name}.npy", "wb") as handle:
                    np.save(handle, array)
                    handle.flush()
                    os.fsync(handle.fileno())
            final = self.folder / f"shard-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
            os.replace(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        self._pending.clear()
        self.refresh()
        return len(keys)

    def drop_resident(self) -> None:
        """Give back the pages of the shards this process has read: :meth:`get` hands out copies,
        but a mapped page read once stays in the process's resident memory, so by the end of a pass
        over many datasets the whole shelf (376 MB for the 58 published runs) counted in its peak.
        The pages stay in the system's file cache; a later read maps them again."""
        for arrays in self._shards:
            for array in arrays:
                handle = getattr(array, "_mmap", None)  # np.memmap's mapping
                if handle is None:
                    continue
                try:
                    handle.madvise(mmap.MADV_DONTNEED)
                except (AttributeError, OSError, ValueError):  # a platform without madvise: pages stay
                    pass


def backend_key(description: dict[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(description, sort_keys=True).encode()).hexdigest()[:16]
    return f"{description['kind']}-{digest}"
