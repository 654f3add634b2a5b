"""Video input: sampling, decoding (ffmpeg/OpenCV), JPEG frames, resizing and the patch layout."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.rigel.oracles import preprocess_video, video_token_count
from training_bridge.rigel.backbone import QWEN3_VL_BENCH_VIDEO, QWEN3_VL_HUB_VIDEO
from training_bridge.rigel.video import (
    available_decoders,
    decode_video,
    grid_thw,
    load_frames,
    patchify,
    resize_uint8,
    sample_indices,
    target_size,
    timestamps,
)

needs_ffmpeg = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg is not installed")


def test_sampling_is_uniform_and_rounded() -> None:
    assert sample_indices(120, 8).tolist() == [0, 17, 34, 51, 68, 85, 102, 119]
    assert sample_indices(5, 8).tolist() == [0, 1, 1, 2, 2, 3, 3, 4]
    with pytest.raises(ValueError):
        sample_indices(0, 8)


def test_benchmark_workload_gives_484_video_tokens() -> None:
    # 8 frames of 448 px: the issue's workload (transformers' class defaults, per-frame cap).
    size = target_size(8, 448, 448, QWEN3_VL_BENCH_VIDEO)
    assert size == (352, 352)
    grid = grid_thw(8, *size, QWEN3_VL_BENCH_VIDEO)
    assert grid == (4, 22, 22)
    assert video_token_count(grid, QWEN3_VL_BENCH_VIDEO) == 484
    # The checkpoint's own video_preprocessor_config.json keeps 448 px: 784 tokens.
    hub = target_size(8, 448, 448, QWEN3_VL_HUB_VIDEO)
    assert hub == (448, 448)
    assert video_token_count(grid_thw(8, *hub, QWEN3_VL_HUB_VIDEO), QWEN3_VL_HUB_VIDEO) == 784
    # Non-square input is rounded to multiples of 32.
    assert target_size(8, 360, 640, QWEN3_VL_HUB_VIDEO) == (352, 640)


def _naive_patches(video: np.ndarray, tp: int = 2, p: int = 16, m: int = 2) -> np.ndarray:
    """Reference layout written with loops: group, merge block row/col, in-block row/col; each
    row = channel, time, y, x."""
    frames, _channels, height, width = video.shape
    if frames % tp:
        video = np.concatenate([video, np.repeat(video[-1:], tp - frames % tp, axis=0)])
    rows = []
    for g in range(video.shape[0] // tp):
        for bh in range(height // p // m):
            for bw in range(width // p // m):
                for ih in range(m):
                    for iw in range(m):
                        y, x = (bh * m + ih) * p, (bw * m + iw) * p
                        block = video[g * tp : (g + 1) * tp, :, y : y + p, x : x + p]  # (tp,C,p,p)
                        rows.append(block.transpose(1, 0, 2, 3).reshape(-1))
    return np.stack(rows)


def test_patchify_matches_a_loop_reference() -> None:
    rng = np.random.default_rng(1)
    video = rng.standard_normal((5, 3, 64, 96)).astype(np.float32)
    values, grid = patchify(torch.from_numpy(video)[None], QWEN3_VL_HUB_VIDEO)
    assert grid == (3, 4, 6)
    assert np.array_equal(values[0].numpy(), _naive_patches(video))


def test_preprocess_normalises_to_minus_one_one() -> None:
    frames = np.zeros((2, 64, 64, 3), dtype=np.uint8)
    frames[..., 0] = 255
    values, grid = preprocess_video(frames, QWEN3_VL_HUB_VIDEO)
    assert grid == (1, 4, 4)
    per_channel = values.view(-1, 3, 2 * 16 * 16)
    assert per_channel[:, 0].eq(1.0).all() and per_channel[:, 1:].eq(-1.0).all()


def test_uint8_resize_cpu_kernel_and_float_path_are_close() -> None:
    # The CPU kernel works in two uint8 passes (rounded and clipped in between), the other
    # devices in float32: on white noise they differ where the bicubic overshoot was clipped.
    rng = np.random.default_rng(2)
    frames = torch.from_numpy(rng.integers(0, 256, (3, 3, 90, 120), dtype=np.uint8))
    native = resize_uint8(frames, (64, 96))
    floating = (
        torch.nn.functional.interpolate(
            frames.float(), size=[64, 96], mode="bicubic", align_corners=False, antialias=True
        )
        .clamp(0, 255)
        .round()
        .to(torch.uint8)
    )
    assert native.dtype == torch.uint8 and native.shape == (3, 3, 64, 96)
    diff = (native.int() - floating.int()).abs()
    assert diff.float().mean() < 0.5 and diff.max() <= 32
    assert resize_uint8(frames, (90, 120)) is frames  # same size: untouched


def test_timestamps_average_each_temporal_group() -> None:
    assert timestamps([0, 17, 34, 51, 68, 85, 102, 119], 24.0) == pytest.approx(
        [17 / 48, 85 / 48, 153 / 48, 221 / 48]
    )
    assert timestamps([0, 12, 24], 12.0) == [0.5, 2.0]  # odd count: last index repeated


def _make_mp4(
    path: Path, frames: int = 48, size: str = "96x64", rate: int = 24, x264: str = ""
) -> Path:
    extra = ["-x264-params", x264] if x264 else []
    subprocess.run(
        [
            "ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i",
            f"testsrc2=size={size}:rate={rate}:duration={frames / rate}",
            "-pix_fmt", "yuv420p", "-c:v", "libx264", "-g", "12", *extra, str(path),
        ],
        check=True,
    )  # fmt: skip
    return path


@needs_ffmpeg
def test_ffmpeg_decoder_samples_the_right_frames(tmp_path: Path) -> None:
    mp4 = _make_mp4(tmp_path / "clip.mp4")
    video = decode_video(mp4, 8, backend="ffmpeg")
    assert video.total_frames == 48
    assert video.fps == 24.0
    assert video.indices.tolist() == sample_indices(48, 8).tolist()
    assert video.frames.shape == (8, 64, 96, 3) and video.frames.dtype == np.uint8
    # testsrc2 changes every frame: sampled frames are distinct and in order of the indices.
    whole = decode_video(mp4, 48, backend="ffmpeg").frames
    for k, index in enumerate(video.indices):
        assert np.array_equal(video.frames[k], whole[index])
    scaled = decode_video(mp4, 4, size=(32, 48), backend="ffmpeg")
    assert scaled.frames.shape == (4, 32, 48, 3)


@needs_ffmpeg
@pytest.mark.skipif("av" not in available_decoders(), reason="PyAV is not installed")
@pytest.mark.parametrize(
    "x264",
    ["", "open-gop=1:b-pyramid=normal:bframes=3", "keyint=1"],
    ids=["closed-gop", "open-gop", "all-intra"],
)
@pytest.mark.parametrize("count", [8, 5, 48])
def test_pyav_decoder_skips_work_without_changing_a_pixel(
    tmp_path: Path, x264: str, count: int
) -> None:
    """PyAV leaves out packets before a keyframe and unwanted non-reference frames: the sampled
    frames must equal its own full decode bit for bit (B-frames, four GOPs)."""
    from training_bridge.rigel.video import _decode_av

    mp4 = _make_mp4(tmp_path / "clip.mp4", x264=x264)
    fast = decode_video(mp4, count, backend="av")
    full = _decode_av(mp4, count, None, skip_unneeded=False)
    assert fast.total_frames == full.total_frames == 48 and fast.fps == full.fps == 24.0
    assert fast.indices.tolist() == full.indices.tolist() == sample_indices(48, count).tolist()
    assert np.array_equal(fast.frames, full.frames)
    if count == 48:  # testsrc2 changes every frame: all 48 distinct, in order
        assert len({frame.tobytes() for frame in fast.frames}) == 48
    scaled = decode_video(mp4, 4, size=(32, 48), backend="av")
    assert scaled.frames.shape == (4, 32, 48, 3) and scaled.frames.dtype == np.uint8


def test_load_frames_from_a_directory(tmp_path: Path) -> None:
    from PIL import Image

    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (4, 40, 56, 3), dtype=np.uint8)
    frames_dir = tmp_path / "frames"
    frames_dir.mkdir()
    for k, image in enumerate(images):
        Image.fromarray(image).save(frames_dir / f"{k:03d}.png")
    video = load_frames(frames_dir, fps=2.0, indices=[0, 4, 8, 12])
    assert np.array_equal(video.frames, images)
    assert video.indices.tolist() == [0, 4, 8, 12] and video.fps == 2.0
    default = load_frames(sorted(frames_dir.iterdir()))
    assert default.indices.tolist() == [0, 1, 2, 3] and default.fps == 24.0


def _has_cuda() -> bool:
    return torch.cuda.is_available()


@needs_ffmpeg
@pytest.mark.skipif("av" not in available_decoders(), reason="PyAV is not installed")
@pytest.mark.skipif(_has_cuda(), reason="checks the failure without a CUDA device")
def test_nvdec_decoder_fails_instead_of_decoding_in_software(tmp_path: Path) -> None:
    """`av_cuda` must never fall back to the CPU silently: a benchmark of it would measure the
    software decoder under the hardware decoder's name."""
    mp4 = _make_mp4(tmp_path / "clip.mp4")
    with pytest.raises(Exception):  # noqa: B017 (FFmpeg's error type depends on the machine)
        decode_video(mp4, 8, backend="av_cuda")


@needs_ffmpeg
@pytest.mark.skipif("av" not in available_decoders(), reason="PyAV is not installed")
@pytest.mark.skipif(not _has_cuda(), reason="NVDEC decoding needs an NVIDIA GPU")
def test_nvdec_decoder_samples_the_same_frames_as_software(tmp_path: Path) -> None:
    mp4 = _make_mp4(tmp_path / "clip.mp4", x264="open-gop=1:b-pyramid=normal:bframes=3")
    hardware = decode_video(mp4, 8, backend="av_cuda")
    software = decode_video(mp4, 8, backend="av")
    assert hardware.indices.tolist() == software.indices.tolist()
    assert hardware.frames.shape == software.frames.shape
    # the same pictures; the colour conversion of the downloaded surface may round differently
    assert np.abs(hardware.frames.astype(int) - software.frames.astype(int)).mean() < 2
