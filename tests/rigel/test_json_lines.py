"""The JSON Lines readers of Rigel (release splits, FOIL files, image benchmarks) refuse a bad
line with the same words they always used, each under its own error class."""

import pytest

from training_bridge.rigel.data import ReleaseFormatError, parse_lines
from training_bridge.rigel.foil import FoilFormatError, parse_foil_file
from training_bridge.rigel.image_benchmarks import (
    MAX_LINE_BYTES,
    ImageBenchmarkError,
    read_image_benchmark,
)


def test_release_lines_refused_with_where():
    with pytest.raises(ReleaseFormatError, match=r"^train.jsonl, line 2: not JSON \("):
        list(parse_lines(["", "{oops"], name="train.jsonl"))
    with pytest.raises(ReleaseFormatError, match=r"^train.jsonl, line 1: expected a JSON object$"):
        list(parse_lines(["[1]"], name="train.jsonl"))


def test_foil_lines_refused_with_where():
    with pytest.raises(FoilFormatError, match=r"^FOIL file line 3: not JSON \("):
        parse_foil_file(["", "  ", "nope"], clip_references={})
    with pytest.raises(FoilFormatError, match=r"^FOIL file line 1: expected an object$"):
        parse_foil_file(['"text"'], clip_references={})


def test_image_lines_refused_with_where_and_size():
    with pytest.raises(ImageBenchmarkError, match=r"^the file, line 1: expected a JSON object$"):
        read_image_benchmark(["3"])
    with pytest.raises(ImageBenchmarkError, match=r"^x.jsonl, line 2: not JSON \("):
        read_image_benchmark(["", "{"], name="x.jsonl")
    # The size bound comes first, even for a blank line.
    with pytest.raises(
        ImageBenchmarkError, match=rf"^x.jsonl, line 1: longer than {MAX_LINE_BYTES} bytes$"
    ):
        read_image_benchmark([" " * (MAX_LINE_BYTES + 1)], name="x.jsonl")
