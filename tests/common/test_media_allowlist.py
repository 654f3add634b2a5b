"""Issue 25, the HLS part of finding 8: ffprobe and ffmpeg read an uploaded video as one local file
through an allow-list of demuxers. Before, an HLS playlist uploaded as `clip.mp4` made ffprobe
open the local file the playlist names.

The proof that the named file is not opened needs no strace: it is a FIFO watched by
`tests.support.hostile_files.FifoWatch`, which notes whether anything opened it for reading.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from common import media
from tests.support.hostile_files import FifoWatch, hls_playlist


@pytest.mark.parametrize("name", ["clip.mp4", "clip.m3u8", "concat:clip.mp4"])
def test_a_playlist_named_as_a_video_is_refused_without_opening_what_it_names(tmp_path, name):
    watch = FifoWatch(tmp_path / "secret.ts")
    playlist = hls_playlist(tmp_path / name, watch.path)

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
    playlist = hls_playlist(tmp_path / "clip.mp4", watch.path)
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
