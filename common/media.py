"""A thin typed wrapper around ffmpeg (through ffmpeg-python) for the video pipeline.

probe -> MediaInfo; transcode a window of a source into a browser-safe H.264/AAC MP4 (yuv420p,
+faststart, height capped, even dimensions, silent AAC track when the source has no audio); a poster
JPEG; N frames sampled uniformly; synthetic test videos from lavfi sources; drawn scenes of coloured
boxes; and a check that an MP4's
index (moov) comes before its media data (mdat).

Every ffmpeg/ffprobe run has a timeout (settings.LEPUS_FFMPEG_TIMEOUT unless given) and can call a
`heartbeat` while it waits, so a long transcode keeps its job row alive. Failures raise MediaError
with the last lines ffmpeg printed. Nothing here touches the database or storage.

A media file comes from an upload, so ffprobe and ffmpeg read it as one local file and nothing
else: the file protocol only (`-protocol_whitelist file`, the path given as `file:<path>`) and a
demuxer from MEDIA_DEMUXERS only (`-format_whitelist`), so an HLS or DASH playlist, a concat script
or an image sequence named `.mp4` is refused instead of opening the files it names. The transcode
then forces (`-f`) the demuxer that the probe found.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ffmpeg
from django.conf import settings

Heartbeat = Callable[[], None]

# How often a waiting run calls its heartbeat.
HEARTBEAT_SECONDS = 10.0
# Test patterns of lavfi that need no input and no font.
SYNTHETIC_PATTERNS = ("testsrc2", "smptebars", "testsrc", "rgbtestsrc", "smptehdbars", "yuvtestsrc")
# The demuxers (ffmpeg's names) an uploaded video may be read with: the containers of
# datasets_app.services.video.VIDEO_EXTENSIONS (mov: .mp4/.mov/.m4v/.3gp; matroska: .mkv/.webm;
# asf: .wmv; ogg: .ogv; mpeg/mpegvideo: .mpg; mpegts: .ts), none of which opens another file.
MEDIA_DEMUXERS = ("mov", "matroska", "avi", "flv", "mpeg", "mpegvideo", "mpegts", "ogg", "asf")
_REFUSED_DEMUXER = re.compile(r"\[([\w-]+) @ 0x[0-9a-f]+\] Format not on whitelist")


class MediaError(RuntimeError):
    """ffmpeg or ffprobe failed, timed out, or produced something unusable."""


@dataclass(frozen=True)
class MediaInfo:
    duration: float
    format_name: str
    has_video: bool
    has_audio: bool
    video_codec: str | None
    audio_codec: str | None
    width: int | None
    height: int | None
    pixel_format: str | None
    frame_rate: float | None
    sample_aspect_ratio: float
    rotation: int

    @property
    def demuxer(self) -> str:
        """ffmpeg's name for the demuxer that read the file ("mov" for "mov,mp4,m4a,...")."""
        return self.format_name.split(",", 1)[0]


def _input_options(*, demuxer: str | None = None) -> dict[str, str]:
    """Input options of ffmpeg for a file of unknown origin: see the module's docstring."""
    options = {"protocol_whitelist": "file", "format_whitelist": ",".join(MEDIA_DEMUXERS)}
    if demuxer is not None:
        if demuxer not in MEDIA_DEMUXERS:
            raise MediaError(f"the {demuxer or 'unknown'} format is not one Lepus reads")
        options["f"] = demuxer
    return options


def _file_url(path: str | Path) -> str:
    # "file:" keeps a name such as "concat:a|b" or "subfile:..." from choosing a protocol.
    return f"file:{Path(path).resolve()}"


def _timeout(timeout: float | None) -> float:
    return float(timeout if timeout is not None else settings.LEPUS_FFMPEG_TIMEOUT)


_CONTEXT_PREFIX = re.compile(r"\[[^\]]* @ 0x[0-9a-f]+\]\s*")


def _last_lines(stderr: bytes, count: int = 3) -> str:
    """ffmpeg's last words, without its "[demuxer @ 0x55f7...]" prefixes."""
    text = _CONTEXT_PREFIX.sub("", stderr.decode("utf-8", "replace"))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-count:]) or "no message"


def _run(args: list[str], *, timeout: float, heartbeat: Heartbeat | None, what: str) -> bytes:
    """Run a command with a deadline, calling `heartbeat` every few seconds; returns stdout."""
    try:
        process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
    except FileNotFoundError as error:
        raise MediaError(f"{args[0]} is not installed: {error}") from error
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        try:
            stdout, stderr = process.communicate(
                timeout=max(0.1, min(HEARTBEAT_SECONDS, remaining))
            )
            break
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                process.kill()
                process.communicate()
                raise MediaError(f"{what} timed out after {timeout:g} s") from None
            if heartbeat is not None:
                heartbeat()
    if process.returncode != 0:
        refused = _REFUSED_DEMUXER.search(stderr.decode("utf-8", "replace"))
        if refused:
            raise MediaError(
                f"{what} refused the file: it is read by ffmpeg's {refused.group(1)} demuxer, "
                f"which is not on the allow-list ({', '.join(MEDIA_DEMUXERS)})"
            )
        raise MediaError(f"{what} failed: {_last_lines(stderr)}")
    return stdout


def _run_graph(
    stream: Any, *, timeout: float | None, heartbeat: Heartbeat | None, what: str
) -> None:
    args = ffmpeg.compile(
        stream.global_args("-hide_banner", "-nostdin", "-loglevel", "error"),
        overwrite_output=True,
    )
    _run(args, timeout=_timeout(timeout), heartbeat=heartbeat, what=what)


def _fraction(text: str | None) -> float | None:
    if not text or text in ("0/0", "N/A"):
        return None
    try:
        if "/" in text:
            numerator, denominator = text.split("/", 1)
            return float(numerator) / float(denominator) if float(denominator) else None
        return float(text)
    except ValueError:
        return None


def probe(path: str | Path, *, timeout: float | None = None) -> MediaInfo:
    """Streams and duration of a media file (ffprobe; ffmpeg-python's probe has no timeout)."""
    args = ["ffprobe", "-v", "error"]
    for name, value in _input_options().items():
        args += [f"-{name}", value]
    args += ["-show_format", "-show_streams", "-of", "json", _file_url(path)]
    output = _run(args, timeout=_timeout(timeout), heartbeat=None, what="ffprobe")
    try:
        data = json.loads(output.decode("utf-8", "replace"))
    except ValueError as error:
        raise MediaError(f"ffprobe printed unreadable output: {error}") from error
    streams = data.get("streams", [])
    video = next((s for s in streams if s.get("codec_type") == "video"), None)
    # A cover picture (attached_pic) is not a video stream.
    if video is not None and video.get("disposition", {}).get("attached_pic"):
        video = None
    audio = next((s for s in streams if s.get("codec_type") == "audio"), None)
    fmt = data.get("format", {})
    duration = _fraction(fmt.get("duration")) or _fraction((video or {}).get("duration")) or 0.0
    sample_aspect = _fraction((video or {}).get("sample_aspect_ratio", "").replace(":", "/"))
    rotation = 0
    if video is not None:
        rotate_tag = video.get("tags", {}).get("rotate")
        for side_data in video.get("side_data_list", []) or []:
            if "rotation" in side_data:
                rotate_tag = side_data["rotation"]
        try:
            rotation = int(float(rotate_tag)) % 360 if rotate_tag is not None else 0
        except (TypeError, ValueError):
            rotation = 0
    return MediaInfo(
        duration=float(duration),
        format_name=str(fmt.get("format_name", "")),
        has_video=video is not None,
        has_audio=audio is not None,
        video_codec=video.get("codec_name") if video else None,
        audio_codec=audio.get("codec_name") if audio else None,
        width=int(video["width"]) if video and video.get("width") else None,
        height=int(video["height"]) if video and video.get("height") else None,
        pixel_format=video.get("pix_fmt") if video else None,
        frame_rate=_fraction(video.get("avg_frame_rate")) if video else None,
        sample_aspect_ratio=sample_aspect if sample_aspect else 1.0,
        rotation=rotation,
    )


def transcode(
    source: str | Path,
    output: str | Path,
    *,
    source_info: MediaInfo,
    max_height: int,
    start: float | None = None,
    duration: float | None = None,
    max_fps: float = 30.0,
    timeout: float | None = None,
    heartbeat: Heartbeat | None = None,
) -> None:
    """Cut [start, start + duration] (or the whole file) into an MP4 browsers play everywhere:
    H.264 (yuv420p, High profile), AAC stereo, the index at the front (+faststart), height at most
    `max_height` and both dimensions even. A source without audio gets a silent track, so every
    clip has the same shape."""
    if not source_info.has_video:
        raise MediaError("the source has no video stream")
    input_options: dict[str, Any] = _input_options(demuxer=source_info.demuxer)
    if start is not None and start > 0:
        input_options["ss"] = f"{start:.3f}"  # before -i: fast seek, then exact decode
    length = duration if duration is not None else source_info.duration
    if duration is not None:
        input_options["t"] = f"{duration:.3f}"
    stream = ffmpeg.input(_file_url(source), **input_options)
    video = stream.video
    if abs(source_info.sample_aspect_ratio - 1.0) > 0.01:
        # Anamorphic pixels: make them square first so the picture keeps its shape.
        video = video.filter("scale", "trunc(iw*sar/2)*2", "ih")
    if source_info.frame_rate and source_info.frame_rate > max_fps + 0.5:
        video = video.filter("fps", fps=max_fps)
    # Height capped and even; width follows the aspect ratio, also even (-2).
    video = video.filter("scale", -2, f"trunc(min(ih,{int(max_height)})/2)*2").filter("setsar", 1)
    if source_info.has_audio:
        audio = stream.audio
    else:
        audio = ffmpeg.input(
            "anullsrc=channel_layout=stereo:sample_rate=44100", f="lavfi", t=f"{length:.3f}"
        ).audio
    out = ffmpeg.output(
        video,
        audio,
        str(output),
        vcodec="libx264",
        pix_fmt="yuv420p",
        preset="veryfast",
        crf=23,
        **{"profile:v": "high", "b:a": "128k"},
        acodec="aac",
        ac=2,
        ar=44100,
        movflags="+faststart",
        shortest=None,
        f="mp4",
    )
    _run_graph(out, timeout=timeout, heartbeat=heartbeat, what="ffmpeg (transcode)")


def extract_poster(
    video: str | Path,
    output: str | Path,
    *,
    at_seconds: float,
    timeout: float | None = None,
    heartbeat: Heartbeat | None = None,
) -> None:
    """One JPEG frame at `at_seconds`."""
    stream = ffmpeg.input(
        _file_url(video), ss=f"{max(0.0, at_seconds):.3f}", **_input_options()
    ).video.output(str(output), vframes=1, **{"q:v": 3})
    _run_graph(stream, timeout=timeout, heartbeat=heartbeat, what="ffmpeg (poster)")
    if not Path(output).is_file() or Path(output).stat().st_size == 0:
        raise MediaError(f"ffmpeg wrote no poster frame at {at_seconds:.2f} s")


def frame_times(*, duration: float, count: int) -> list[float]:
    """`count` instants spread uniformly over the clip: the middle of each of `count` equal parts."""
    return [(index + 0.5) * duration / count for index in range(count)]


def extract_frames(
    video: str | Path,
    directory: str | Path,
    *,
    count: int,
    duration: float,
    timeout: float | None = None,
    heartbeat: Heartbeat | None = None,
) -> list[Path]:
    """`count` JPEG frames sampled uniformly (000.jpg, 001.jpg, ...), in one ffmpeg run."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{index:03d}.jpg" for index in range(count)]
    outputs = [
        ffmpeg.input(_file_url(video), ss=f"{instant:.3f}", **_input_options()).video.output(
            str(path), vframes=1, **{"q:v": 3}
        )
        for instant, path in zip(frame_times(duration=duration, count=count), paths, strict=True)
    ]
    _run_graph(
        ffmpeg.merge_outputs(*outputs), timeout=timeout, heartbeat=heartbeat, what="ffmpeg (frames)"
    )
    missing = [path.name for path in paths if not path.is_file() or path.stat().st_size == 0]
    if missing:
        raise MediaError(f"ffmpeg wrote no frame for {', '.join(missing)}")
    return paths


def synthesize_video(
    output: str | Path,
    *,
    duration: float,
    width: int = 426,
    height: int = 240,
    pattern: str = "testsrc2",
    hue_degrees: float = 0.0,
    frequency: float = 440.0,
    fps: int = 25,
    codec: str = "h264",
    audio: bool = True,
    timeout: float | None = None,
) -> None:
    """A synthetic video from lavfi sources (a test pattern, a sine tone), for demos and tests.

    `codec` "h264" writes H.264/AAC, "mpeg4" MPEG-4 part 2 with AAC (a source the pipeline must
    really transcode); the container follows the output's extension."""
    if pattern not in SYNTHETIC_PATTERNS:
        raise ValueError(f"unknown pattern {pattern!r}; use one of {SYNTHETIC_PATTERNS}")
    video = ffmpeg.input(
        f"{pattern}=size={int(width)}x{int(height)}:rate={int(fps)}:duration={duration:.3f}",
        f="lavfi",
    ).video
    if hue_degrees:
        video = video.filter("hue", h=f"{hue_degrees:.1f}")
    streams = [video]
    if audio:
        streams.append(
            ffmpeg.input(
                f"sine=frequency={frequency:.1f}:sample_rate=44100:duration={duration:.3f}",
                f="lavfi",
            ).audio
        )
    options: dict[str, Any] = {"pix_fmt": "yuv420p"}
    if codec == "h264":
        options.update(vcodec="libx264", preset="ultrafast")
    elif codec == "mpeg4":
        options.update(vcodec="mpeg4", **{"q:v": 5})
    else:
        raise ValueError(f"unknown codec {codec!r}; use h264 or mpeg4")
    if audio:
        options.update(acodec="aac", shortest=None)
    _run_graph(
        ffmpeg.output(*streams, str(output), **options),
        timeout=timeout,
        heartbeat=None,
        what="ffmpeg (synthesize)",
    )


@dataclass(frozen=True)
class DrawnBox:
    """A filled box drawn over a scene. `x` and `y` are ffmpeg expressions (they may use `t`, the
    time in seconds, and `W`/`H`, the frame size); `enable` an ffmpeg timeline expression or ""."""

    x: str
    y: str
    size: int
    colour: str
    enable: str = ""


def draw_scene(
    output: str | Path,
    *,
    background: str,
    boxes: list[DrawnBox],
    duration: float,
    width: int = 426,
    height: int = 240,
    fps: int = 25,
    timeout: float | None = None,
) -> None:
    """An H.264 video of coloured boxes over a plain background, drawn by ffmpeg's overlay filter
    (no font, no input file): the demo's scenes, whose captions can be right or wrong."""
    video = ffmpeg.input(
        f"color=c={background}:size={int(width)}x{int(height)}:rate={int(fps)}:duration={duration:.3f}",
        f="lavfi",
    ).video
    for box in boxes:
        # A square colour source overlaid on the background: overlay's x/y expressions know the time
        # `t` (drawbox's `t` is its line thickness, so it cannot move a box).
        square = ffmpeg.input(
            f"color=c={box.colour}:size={box.size}x{box.size}:rate={int(fps)}:duration={duration:.3f}",
            f="lavfi",
        ).video
        options: dict[str, Any] = {"x": box.x, "y": box.y, "eof_action": "pass"}
        if box.enable:
            options["enable"] = box.enable
        video = ffmpeg.overlay(video, square, **options)
    _run_graph(
        ffmpeg.output(video, str(output), vcodec="libx264", preset="ultrafast", pix_fmt="yuv420p"),
        timeout=timeout,
        heartbeat=None,
        what="ffmpeg (draw scene)",
    )


def moov_before_mdat(path: str | Path) -> bool:
    """True when an MP4's index (moov box) precedes its media data (mdat): playable while it
    downloads ("faststart")."""
    with open(path, "rb") as handle:
        size_total = Path(path).stat().st_size
        offset = 0
        while offset + 8 <= size_total:
            handle.seek(offset)
            header = handle.read(8)
            size = int.from_bytes(header[:4], "big")
            kind = header[4:8]
            if size == 1:
                size = int.from_bytes(handle.read(8), "big")
            elif size == 0:
                size = size_total - offset
            if kind == b"moov":
                return True
            if kind == b"mdat":
                return False
            if size < 8:
                return False
            offset += size
    return False


def is_browser_safe(info: MediaInfo) -> bool:
    return (
        info.video_codec == "h264"
        and info.pixel_format == "yuv420p"
        and info.audio_codec == "aac"
        and info.width is not None
        and info.height is not None
        and info.width % 2 == 0
        and info.height % 2 == 0
        and math.isfinite(info.duration)
        and info.duration > 0
    )
