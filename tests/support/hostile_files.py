"""Hostile uploads of issue 25 (tests/datasets_app, tests/common and tests/hardening): a tar.gz of a
million folders, an HLS playlist named like a video, and a FIFO that tells whether a process
opened it, the proof without strace that a program did not open the file a playlist names.

Opening a FIFO blocks until both ends are open, so a thread that opens its writing end returns
only once a reader has opened the other end. When the test is over it opens the reading end
itself, which releases the thread; the flag the thread set before that says whether anything
else had opened it.
"""

from __future__ import annotations

import gzip
import os
import tarfile
import threading
from pathlib import Path


def directory_bomb(path: Path, *, entries: int, block: int = 10_000) -> Path:
    """A tar.gz of `entries` directory entries (the probe's was 4.8 MB for 1,000,000), written
    fast: one gzip member of `block` folder headers, repeated (gzip allows concatenated members,
    tar repeated folder names)."""
    headers = b"".join(_directory_header(f"folder{index:05d}/") for index in range(block))
    member = gzip.compress(headers, compresslevel=9)
    with open(path, "wb") as handle:
        for _ in range(entries // block):
            handle.write(member)
        handle.write(gzip.compress(bytes(1024)))  # the two zero blocks that end a tar
    return path


def _directory_header(name: str) -> bytes:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    return info.tobuf(format=tarfile.USTAR_FORMAT)


def hls_playlist(path: Path, segment: Path) -> Path:
    """An HLS playlist at `path` (named as the caller likes, e.g. clip.mp4) whose one segment is
    the local file `segment`."""
    path.write_text(
        f"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\n{segment}\n#EXT-X-ENDLIST\n",
        encoding="utf-8",
    )
    return path


class FifoWatch:
    """A FIFO at `path` and a thread that notes whether anyone opened it for reading."""

    def __init__(self, path: Path) -> None:
        self.path = path
        os.mkfifo(path)
        self.opened_by_another = threading.Event()
        self.released = False
        self.thread = threading.Thread(target=self._wait_for_a_reader, daemon=True)
        self.thread.start()

    def _wait_for_a_reader(self) -> None:
        descriptor = os.open(self.path, os.O_WRONLY)  # blocks until a reader opens the FIFO
        if not self.released:
            self.opened_by_another.set()
        os.close(descriptor)  # the reader sees the end of the file at once

    def release(self) -> None:
        """Open the reading end ourselves so the thread ends; returns once it has."""
        self.released = True
        descriptor = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        self.thread.join(10)
        os.close(descriptor)
        assert not self.thread.is_alive()
