"""Issue 25, the HLS part of finding 8: ffprobe and ffmpeg read an uploaded video as one local file
through an allow-list of demuxers. Before, an HLS playlist uploaded as `clip.mp4` made ffprobe
open the local file the playlist names.

The proof that the named file is not opened needs no strace: it is a FIFO. Opening a FIFO blocks
until both ends are open, so a thread that opens its writing end returns only once a reader (the
ffprobe that follows the playlist) opened the other end. After the probe the test opens the
reading end itself, which releases the thread, and the flag it set before that says whether
anything else had.
"""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from common import media


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


def _playlist(path: Path, segment: Path) -> Path:
    path.write_text(
        f"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\n{segment}\n#EXT-X-ENDLIST\n",
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize("name", ["clip.mp4", "clip.m3u8", "concat:clip.mp4"])
def test_a_playlist_named_as_a_video_is_refused_without_opening_what_it_names(tmp_path, name):
    watch = FifoWatch(tmp_path / "secret.ts")
    playlist = _playlist(tmp_path / name, watch.path)

    try:
        with pytest.raises(media.MediaError) as caught:
            media.probe(playlist, timeout=30)
        opened = watch.opened_by_another.is_set()
    finally:
        watch.release()

    assert not opened, "ffprobe opened the file the playlist names"
    assert str(caught.value) == (
        "ffprobe refused the file: it is read by ffmpeg's hls demuxer, which is not on the "
        "allow-list (mov, matroska, avi, flv, mpeg, mpegvideo, mpegts, ogg, asf)"
    )


def test_a_concat_script_is_refused_too(tmp_path):
    watch = FifoWatch(tmp_path / "secret.mp4")
    script = tmp_path / "clip.mp4"
    script.write_text(f"ffconcat version 1.0\nfile '{watch.path}'\n", encoding="utf-8")

    try:
        with pytest.raises(media.MediaError) as caught:
            media.probe(script, timeout=30)
        opened = watch.opened_by_another.is_set()
    finally:
        watch.release()

    assert not opened
    assert "ffmpeg's concat demuxer, which is not on the allow-list" in str(caught.value)


def test_the_transcode_forces_the_probed_demuxer_and_refuses_any_other(tmp_path):
    source = tmp_path / "source.mkv"
    media.synthesize_video(source, duration=1.0, codec="mpeg4")
    info = media.probe(source)
    assert (info.format_name, info.demuxer) == ("matroska,webm", "matroska")

    media.transcode(source, tmp_path / "out.mp4", source_info=info, max_height=240)
    assert media.probe(tmp_path / "out.mp4").demuxer == "mov"

    watch = FifoWatch(tmp_path / "secret.ts")
    playlist = _playlist(tmp_path / "clip.mp4", watch.path)
    try:
        # A MediaInfo that says "hls" is refused before ffmpeg runs; one that lies ("mov") makes
        # ffmpeg parse the playlist as an MP4, which fails without following it.
        with pytest.raises(media.MediaError, match="the hls format is not one Lepus reads"):
            media.transcode(
                playlist, tmp_path / "a.mp4", source_info=_lying(info, "hls"), max_height=240
            )
        with pytest.raises(media.MediaError, match=r"ffmpeg \(transcode\) failed"):
            media.transcode(
                playlist, tmp_path / "b.mp4", source_info=_lying(info, "mov"), max_height=240
            )
        opened = watch.opened_by_another.is_set()
    finally:
        watch.release()
    assert not opened


def _lying(info: media.MediaInfo, format_name: str) -> media.MediaInfo:
    return replace(info, format_name=format_name)
