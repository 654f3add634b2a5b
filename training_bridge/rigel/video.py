"""Video input for Rigel, in plain torch (no torchvision): decoding, frame sampling, resizing,
normalisation and the Qwen-VL patch layout.

The layout reproduces transformers' ``Qwen3VLVideoProcessor`` (and Qwen2-VL's for Qwen2.5-VL):

1. frames are sampled uniformly: ``np.linspace(0, total - 1, n).round()``;
2. the clip is resized with ``smart_resize`` to multiples of ``patch_size * merge_size``, keeping
   ``t * h * w`` between ``min_pixels`` and ``max_pixels`` (optionally with the per-frame cap);
   the resize is bicubic with antialiasing on uint8 frames, as torchvision's ``resize`` does it
   (native uint8 kernel on CPU; float, clamp and round elsewhere);
3. pixels are normalised with the fused ``(x - 255 * mean) / (255 * std)``;
4. the frame count is padded to a multiple of ``temporal_patch_size`` with the last frame, and
   patches are laid out group by group, in ``merge x merge`` blocks, each row holding
   ``C * temporal_patch_size * patch * patch`` values: ``pixel_values_videos`` (N, C·tp·p·p) and
   ``video_grid_thw`` (t, h, w) in patches.

Everything works on CPU or CUDA tensors and on a batch of clips of one size at once.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F

from .backbone import VisionSettings

DECODER_ENV = "LEPUS_VIDEO_DECODER"


@dataclass
class DecodedVideo:
    """Sampled frames of a clip, uint8 (T, H, W, 3) RGB, with where they came from."""

    frames: np.ndarray
    indices: np.ndarray  # frame numbers in the source (for Qwen3-VL's timestamps)
    fps: float
    total_frames: int


# --------------------------------------------------------------------------------------------
# Sampling and decoding


def sample_indices(total_frames: int, num_frames: int) -> np.ndarray:
    """Uniform sampling as transformers does it: linspace over [0, total - 1], rounded."""
    if total_frames <= 0:
        raise ValueError("the video has no frames")
    return np.linspace(0, total_frames - 1, num_frames).round().astype(int)


def probe_video(path: str | Path) -> tuple[int, float, int, int]:
    """(total_frames, fps, width, height) of the first video stream, via ffprobe."""
    out = subprocess.run(
        [
            "ffprobe",
            "-v",
            "error",
            "-select_streams",
            "v:0",
            "-show_entries",
            "stream=nb_frames,avg_frame_rate,r_frame_rate,width,height,duration",
            "-show_entries",
            "format=duration",
            "-of",
            "json",
            str(path),
        ],
        check=True,
        capture_output=True,
    ).stdout
    data = json.loads(out)
    stream = data["streams"][0]
    fps = _rate(stream.get("avg_frame_rate")) or _rate(stream.get("r_frame_rate")) or 24.0
    total = int(stream.get("nb_frames") or 0)
    if total <= 0:
        duration = float(stream.get("duration") or data.get("format", {}).get("duration") or 0)
        total = max(1, int(round(duration * fps)))
    return total, fps, int(stream["width"]), int(stream["height"])


def _rate(text: str | None) -> float:
    if not text or text in ("0/0", "0"):
        return 0.0
    if "/" in text:
        num, den = text.split("/")
        return float(num) / float(den) if float(den) else 0.0
    return float(text)


def available_decoders() -> list[str]:
    """Installed decoders, fastest first: ``av`` (PyAV), ``ffmpeg`` (binary)."""
    names: list[str] = []
    try:
        import av  # noqa: F401

        names.append("av")
    except ImportError:
        pass
    if shutil.which("ffmpeg") and shutil.which("ffprobe"):
        names.append("ffmpeg")
    return names


def decode_video(
    path: str | Path,
    num_frames: int = 8,
    *,
    size: tuple[int, int] | None = None,
    backend: str = "auto",
) -> DecodedVideo:
    """Decode ``num_frames`` uniformly sampled frames of an MP4 (or any file ffmpeg reads).

    ``size`` = (height, width) scales the frames while decoding (faster, but not bit-identical to
    the processor's bicubic resize); ``None`` keeps the native size (the processor path).
    ``backend``: ``av`` (PyAV, in-process, decodes only what the sampled frames need),
    ``av_cuda`` (the same through FFmpeg's CUDA hardware decoder, NVDEC, the frames copied back to
    the CPU; it never falls back to software, so a machine without NVDEC raises), ``ffmpeg`` (a
    subprocess piping raw RGB), or ``auto``: the decoder named by the ``LEPUS_VIDEO_DECODER``
    environment variable, else the first of these installed. ``ffmpeg``'s colour conversion
    differs slightly from ``av``'s (libswscale's defaults).
    """
    if backend == "auto":
        backend = os.environ.get(DECODER_ENV, "").strip() or "auto"
    if backend == "auto":
        names = available_decoders()
        if not names:
            raise RuntimeError("no video decoder: install av or ffmpeg")
        backend = names[0]
    if backend == "av":
        return _decode_av(path, num_frames, size)
    if backend == "av_cuda":
        return _decode_av(path, num_frames, size, hwaccel="cuda")
    if backend == "ffmpeg":
        return _decode_ffmpeg(path, num_frames, size)
    raise ValueError(f"unknown decoder {backend!r}")


def _av_open_options(hwaccel: str | None) -> dict[str, Any]:
    """`av.open`'s options: none in software; an FFmpeg hardware decoder that never falls back."""
    if hwaccel is None:
        return {}
    from av.codec.hwaccel import HWAccel

    # primary_ctx: every clip reuses the device's primary CUDA context (creating one per clip
    # would cost more than decoding it)
    return {
        "hwaccel": HWAccel(
            device_type=hwaccel,
            allow_software_fallback=False,
            options={"primary_ctx": "1"} if hwaccel == "cuda" else None,
        )
    }


def _next_keyframes(packets: Sequence[Any], timestamps: bool) -> list[int | None]:
    """next_key[k]: the timestamp of the first keyframe at or after decode position k (None when
    there is none, or no timestamps)."""
    next_key: list[int | None] = [None] * (len(packets) + 1)
    for k in range(len(packets) - 1, -1, -1):
        packet = packets[k]
        next_key[k] = (
            cast(int, packet.pts) if timestamps and packet.is_keyframe else next_key[k + 1]
        )
    return next_key


class _WantedFrames:
    """The sampled frames as they come out of the decoder, keyed by timestamp (or, without
    timestamps, by output position), converted to RGB (scaled to `size` when given)."""

    def __init__(self, wanted: set[int], *, size: tuple[int, int] | None, timestamps: bool) -> None:
        self.remaining = set(wanted)
        self.size = size
        self.timestamps = timestamps
        self.got: dict[int, np.ndarray] = {}
        self.shown = 0  # frames out of the decoder, for streams without timestamps

    def keep(self, frames: list[Any]) -> None:
        for frame in frames:
            key = int(frame.pts) if self.timestamps else self.shown
            self.shown += 1
            if key in self.remaining:
                self.remaining.discard(key)
                if self.size is None:
                    self.got[key] = frame.to_ndarray(format="rgb24")
                else:
                    self.got[key] = frame.reformat(
                        width=self.size[1],
                        height=self.size[0],
                        format="rgb24",
                        interpolation="AREA",
                    ).to_ndarray()


def _decode_av(
    path: str | Path,
    num_frames: int,
    size: tuple[int, int] | None,
    *,
    skip_unneeded: bool = True,
    hwaccel: str | None = None,
) -> DecodedVideo:
    """PyAV, one thread, decoding only what the sampled frames depend on.

    ``hwaccel`` names an FFmpeg hardware device type (``"cuda"``: NVDEC) that decodes instead of
    the CPU; the decoded surfaces are copied back to system memory, so what follows is the same
    (the pixels may differ from software decoding by the colour conversion's rounding).

    The packets are read first (no decoding); frame n is the packet with the n-th smallest
    timestamp. With ``skip_unneeded`` two kinds of work are left out, neither of which any sampled
    frame depends on, so the sampled frames are bit-identical to a full decode:

    - packets before a keyframe K (in decode order) while every frame still wanted is shown at or
      after K (a keyframe starts a fresh decode; frames shown after it never reference packets
      before it, open GOPs included: their leading pictures are shown *before* K); earlier
      keyframes too, so an all-intra file decodes only the sampled frames;
    - non-reference frames that are not wanted (the decoder's ``skip_frame = NONREF``; with
      x264's default B-frames that is about half of all frames).

    For a 5 s, 24 fps clip with 2 s GOPs and 8 frames sampled this takes about 35% less CPU than
    decoding every frame up to the last sampled one (docs/benchmarks.md).
    """
    import av

    with av.open(str(path), **_av_open_options(hwaccel)) as container:
        stream = container.streams.video[0]
        codec = stream.codec_context
        codec.thread_count = 1
        fps = float(stream.average_rate or stream.guessed_rate or 0) or 24.0
        packets = [packet for packet in container.demux(stream) if packet.size]
        timestamps = all(packet.pts is not None for packet in packets)
        if timestamps:
            order = sorted(cast(int, packet.pts) for packet in packets)
        else:  # nothing to tell frames apart by: decode them all, count them in output order
            skip_unneeded = False
            order = list(range(len(packets)))
        total = len(order)
        indices = sample_indices(total, num_frames)
        wanted = {order[int(i)] for i in indices}
        next_key = _next_keyframes(packets, timestamps)
        kept = _WantedFrames(wanted, size=size, timestamps=timestamps)
        for k, packet in enumerate(packets):
            if not kept.remaining:
                break
            if skip_unneeded:
                later = next_key[k + 1]
                if later is not None and min(kept.remaining) >= later:
                    continue  # decoding restarts at that keyframe (this one too, if it is one)
                codec.skip_frame = "DEFAULT" if cast(int, packet.pts) in wanted else "NONREF"
            kept.keep(codec.decode(packet))
        if kept.remaining:
            codec.skip_frame = "DEFAULT"
            kept.keep(codec.decode(None))
    got = kept.got
    if not got:
        raise RuntimeError(f"PyAV decoded no frames from {path}")
    # A stream shorter than its packets promise repeats its last decoded frame.
    last = got[max(got)]
    frames = np.stack([got.get(order[int(i)], last) for i in indices])
    return DecodedVideo(frames=frames, indices=indices, fps=fps, total_frames=total)


def _decode_ffmpeg(path: str | Path, num_frames: int, size: tuple[int, int] | None) -> DecodedVideo:
    total, fps, width, height = probe_video(path)
    indices = sample_indices(total, num_frames)
    wanted = sorted(set(int(i) for i in indices))
    select = "+".join(f"eq(n\\,{i})" for i in wanted)
    filters = [f"select='{select}'"]
    out_h, out_w = height, width
    if size is not None:
        out_h, out_w = size
        filters.append(f"scale={out_w}:{out_h}:flags=bicubic")
    cmd = [
        "ffmpeg",
        "-v",
        "error",
        "-nostdin",
        "-threads",
        "1",
        "-i",
        str(path),
        "-vf",
        ",".join(filters),
        "-vsync",
        "0",
        "-f",
        "rawvideo",
        "-pix_fmt",
        "rgb24",
        "pipe:1",
    ]
    raw = subprocess.run(cmd, check=True, capture_output=True).stdout
    frame_bytes = out_h * out_w * 3
    got = len(raw) // frame_bytes
    if got == 0:
        raise RuntimeError(f"ffmpeg decoded no frames from {path}")
    decoded = np.frombuffer(raw[: got * frame_bytes], dtype=np.uint8).reshape(got, out_h, out_w, 3)
    # Map each wanted index to its decoded frame (a short stream repeats its last frame).
    position = {index: min(k, got - 1) for k, index in enumerate(wanted)}
    frames = np.stack([decoded[position[int(i)]] for i in indices])
    return DecodedVideo(frames=frames, indices=indices, fps=fps, total_frames=total)


def load_frames(
    paths_or_dir: str | Path | Sequence[str | Path],
    *,
    fps: float | None = None,
    indices: Sequence[int] | None = None,
    default_fps: float = 24.0,
) -> DecodedVideo:
    """Pre-sampled JPEG/PNG frames (the ingest pipeline's ``clips/<id>/frames/000.jpg``...).

    ``indices``/``fps`` say where the frames were taken from (Qwen3-VL writes their timestamps
    into the prompt); without them the frames count as 0, 1, 2... at ``default_fps``.
    """
    from PIL import Image

    if isinstance(paths_or_dir, (str, Path)) and Path(paths_or_dir).is_dir():
        directory = Path(paths_or_dir)
        files = sorted(
            p for p in directory.iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png", ".webp")
        )
    else:
        files = [Path(p) for p in paths_or_dir]  # type: ignore[union-attr]
    if not files:
        raise ValueError(f"no frames in {paths_or_dir}")
    frames = np.stack([np.asarray(Image.open(f).convert("RGB")) for f in files])
    idx = np.asarray(indices if indices is not None else range(len(files)), dtype=int)
    if len(idx) != len(files):
        raise ValueError("one index per frame is needed")
    return DecodedVideo(
        frames=frames, indices=idx, fps=float(fps or default_fps), total_frames=int(idx.max()) + 1
    )


# --------------------------------------------------------------------------------------------
# Resizing, normalisation, patches


def smart_resize(
    num_frames: int,
    height: int,
    width: int,
    *,
    temporal_factor: int = 2,
    factor: int = 32,
    min_pixels: int = 128 * 32 * 32,
    max_pixels: int = 32 * 32 * 768,
) -> tuple[int, int]:
    """transformers' Qwen3-VL ``smart_resize`` (same arithmetic, same rounding)."""
    if num_frames < temporal_factor:
        raise ValueError(f"t:{num_frames} must be larger than temporal_factor:{temporal_factor}")
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height = int(height * scale)
        width = int(width * scale)
    if max(height, width) / min(height, width) > 200:
        raise ValueError("absolute aspect ratio must be smaller than 200")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    t_bar = round(num_frames / temporal_factor) * temporal_factor
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt((num_frames * height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (num_frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def smart_resize_qwen2(
    height: int,
    width: int,
    *,
    factor: int = 28,
    min_pixels: int = 56 * 56,
    max_pixels: int = 28 * 28 * 1280,
) -> tuple[int, int]:
    """Qwen2-VL / Qwen2.5-VL per-frame ``smart_resize``."""
    if max(height, width) / min(height, width) > 200:
        raise ValueError("absolute aspect ratio must be smaller than 200")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def target_size(
    num_frames: int, height: int, width: int, vision: VisionSettings
) -> tuple[int, int]:
    """(height, width) the processor resizes a clip of this shape to."""
    factor = vision.factor
    if vision.family == "qwen2_5_vl":
        return smart_resize_qwen2(
            height, width, factor=factor, min_pixels=vision.min_pixels, max_pixels=vision.max_pixels
        )
    max_pixels = vision.max_pixels
    if vision.cap_pixels_per_frame:
        frame_cap = vision.max_video_tokens * factor * factor
        per_frame = max(
            min(frame_cap, vision.max_pixels // num_frames), int(vision.min_pixels * 1.05)
        )
        max_pixels = per_frame * num_frames
    return smart_resize(
        num_frames,
        height,
        width,
        temporal_factor=vision.temporal_patch_size,
        factor=factor,
        min_pixels=vision.min_pixels,
        max_pixels=max_pixels,
    )


def grid_thw(
    num_frames: int, height: int, width: int, vision: VisionSettings
) -> tuple[int, int, int]:
    """(t, h, w) in patches for a clip of ``num_frames`` frames resized to (height, width)."""
    tp = vision.temporal_patch_size
    return (
        (num_frames + (-num_frames % tp)) // tp,
        height // vision.patch_size,
        width // vision.patch_size,
    )


def resize_uint8(frames: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Bicubic antialiased resize of uint8 (..., C, H, W) frames, as torchvision's v2 ``resize``:
    the native uint8 kernel on CPU, float32 + clamp + round on other devices."""
    if frames.dtype != torch.uint8:
        raise TypeError("resize_uint8 takes uint8 frames")
    height, width = size
    shape = frames.shape
    if (shape[-2], shape[-1]) == (height, width):
        return frames
    flat = frames.reshape(-1, shape[-3], shape[-2], shape[-1])
    if flat.device.type == "cpu":
        out = F.interpolate(
            flat, size=[height, width], mode="bicubic", align_corners=False, antialias=True
        )
    else:
        out = F.interpolate(
            flat.float(), size=[height, width], mode="bicubic", align_corners=False, antialias=True
        )
        out = out.clamp_(0, 255).round_().to(torch.uint8)
    return out.reshape(*shape[:-2], height, width)


def normalize(frames: torch.Tensor, vision: VisionSettings) -> torch.Tensor:
    """uint8 (..., C, H, W) -> float32, with the processor's fused rescale + normalise."""
    device = frames.device
    # Same arithmetic as transformers: float32 tensors times 1 / rescale_factor.
    rescale = 1.0 / 255.0
    mean = (torch.tensor(vision.image_mean, device=device) * (1.0 / rescale)).view(-1, 1, 1)
    std = (torch.tensor(vision.image_std, device=device) * (1.0 / rescale)).view(-1, 1, 1)
    return frames.to(torch.float32).sub_(mean).div_(std)


def patchify(
    videos: torch.Tensor, vision: VisionSettings
) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """(B, T, C, H, W) float -> (B, t*h*w, C*tp*p*p) in the processor's order, and (t, h, w)."""
    batch, frames, channels, height, width = videos.shape
    tp, p, m = vision.temporal_patch_size, vision.patch_size, vision.merge_size
    if pad := -frames % tp:
        videos = torch.cat((videos, videos[:, -1:].expand(-1, pad, -1, -1, -1)), dim=1)
        frames += pad
    gt, gh, gw = frames // tp, height // p, width // p
    patches = videos.view(batch, gt, tp, channels, gh // m, m, p, gw // m, m, p)
    patches = patches.permute(0, 1, 4, 7, 5, 8, 3, 2, 6, 9)
    return patches.reshape(batch, gt * gh * gw, channels * tp * p * p), (gt, gh, gw)


def frames_to_tensor(frames: np.ndarray | torch.Tensor) -> torch.Tensor:
    """(T, H, W, 3) uint8 numpy/tensor -> (T, 3, H, W) uint8 tensor (contiguous)."""
    tensor = (
        torch.from_numpy(np.ascontiguousarray(frames)) if isinstance(frames, np.ndarray) else frames
    )
    if tensor.dtype != torch.uint8:
        raise TypeError("frames must be uint8")
    if tensor.ndim != 4 or tensor.shape[-1] != 3:
        raise ValueError(f"frames must be (T, H, W, 3), got {tuple(tensor.shape)}")
    return tensor.permute(0, 3, 1, 2).contiguous()


def preprocess_clips(
    clips: torch.Tensor, vision: VisionSettings, *, size: tuple[int, int] | None = None
) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """A batch of clips of one shape, uint8 (B, T, 3, H, W) on any device -> (pixel_values
    (B, N, C·tp·p·p) float32, (t, h, w)). ``size`` overrides the processor's target size."""
    _batch, frames, _, height, width = clips.shape
    size = size or target_size(frames, height, width, vision)
    resized = resize_uint8(clips, size)
    values, grid = patchify(normalize(resized, vision), vision)
    return values, grid


def timestamps(
    indices: Sequence[int] | np.ndarray, fps: float, temporal_patch_size: int = 2
) -> list[float]:
    """Qwen3-VL's per-group timestamps: mean time of the first and last frame of each group."""
    idx = [int(i) for i in indices]
    if len(idx) % temporal_patch_size != 0:
        idx.extend(idx[-1] for _ in range(temporal_patch_size - len(idx) % temporal_patch_size))
    times = [i / fps for i in idx]
    return [
        (times[i] + times[i + temporal_patch_size - 1]) / 2
        for i in range(0, len(times), temporal_patch_size)
    ]
