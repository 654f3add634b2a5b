"""The demo's still images: a few pictures Pillow draws (coloured shapes on plain backgrounds),
with references that describe each and candidate captions from exact to wrong in known ways, as the
generic image JSONL (`annotation.imports.images`). Everything is a function of the arguments: the
same call draws the same pixels and writes the same lines, so the demo is reproducible. Nothing
here touches the database."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageDraw

WIDTH, HEIGHT = 480, 320
SYSTEM = "still-template-writer"
COLOURS = {"red": (229, 56, 59), "blue": (58, 134, 255), "yellow": (255, 214, 10)}
BACKGROUNDS = {"grey": (108, 117, 125), "dark green": (27, 67, 50), "black": (0, 0, 0)}
NUMBER_WORDS = {1: "one", 2: "two", 3: "three"}


@dataclass(frozen=True)
class StillImage:
    image_id: str
    colour: str
    shape: str  # "square" or "circle"
    count: int
    background: str

    @property
    def file_name(self) -> str:
        return f"{self.image_id}.png"

    def noun(self, count: int | None = None) -> str:
        plural = (count or self.count) > 1
        return f"{self.shape}s" if plural else self.shape


# The demo's images: few enough to rate in a minute, varied enough that the captions differ.
STILLS = (
    StillImage("demo_still_0", "red", "square", 1, "grey"),
    StillImage("demo_still_1", "blue", "circle", 2, "dark green"),
    StillImage("demo_still_2", "yellow", "square", 3, "black"),
    StillImage("demo_still_3", "blue", "square", 2, "grey"),
)


def draw(still: StillImage) -> Image.Image:
    image = Image.new("RGB", (WIDTH, HEIGHT), BACKGROUNDS[still.background])
    pen = ImageDraw.Draw(image)
    size, gap = 80, 40
    left = (WIDTH - still.count * size - (still.count - 1) * gap) // 2
    top = (HEIGHT - size) // 2
    for index in range(still.count):
        x = left + index * (size + gap)
        box = (x, top, x + size, top + size)
        if still.shape == "square":
            pen.rectangle(box, fill=COLOURS[still.colour])
        else:
            pen.ellipse(box, fill=COLOURS[still.colour])
    return image


def _phrase(still: StillImage, *, colour: str | None = None, count: int | None = None) -> str:
    number = count or still.count
    return f"{NUMBER_WORDS[number]} {colour or still.colour} {still.noun(number)}"


def line(still: StillImage) -> dict[str, object]:
    """The image's JSONL line: references and four candidates (exact, wrong colour, wrong count,
    unrelated)."""
    wrong_colour = next(name for name in COLOURS if name != still.colour)
    wrong_count = 1 if still.count > 1 else 2
    phrase = _phrase(still)
    return {
        "image_id": still.image_id,
        "image": still.file_name,
        "references": [
            f"{phrase.capitalize()} on a {still.background} background.",
            f"A still picture of {phrase} against {still.background}.",
        ],
        "candidates": [
            {
                "caption": f"{phrase.capitalize()} on a {still.background} background.",
                "system": SYSTEM,
            },
            {
                "caption": f"{_phrase(still, colour=wrong_colour).capitalize()} on a "
                f"{still.background} background.",
                "system": SYSTEM,
            },
            {
                "caption": f"{_phrase(still, count=wrong_count).capitalize()} on a "
                f"{still.background} background.",
                "system": SYSTEM,
            },
            {"caption": "A dog catches a frisbee on a sunny beach.", "system": SYSTEM},
        ],
    }


def write_stills(directory: str | Path) -> Path:
    """Draw the demo's images into `directory` and write its `stills.jsonl` beside them (only what
    is missing or different); returns the JSONL's path."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    for still in STILLS:
        target = folder / still.file_name
        if not target.exists():
            partial = folder / f".partial-{still.file_name}"
            draw(still).save(partial, "PNG")
            partial.replace(target)
    path = folder / "stills.jsonl"
    text = "".join(json.dumps(line(still), sort_keys=True) + "\n" for still in STILLS)
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path
