"""The demo's scene corpus: short videos that ffmpeg draws (coloured squares that move, appear one by
one or change colour, over plain backgrounds), references that describe each scene, and candidate
captions that range from exact to wrong in known ways, each with the quality it was written to have.

Colour bars under captions about darts let nobody judge relevance; these scenes can be judged by
anyone in seconds, and because every candidate's flaw is known, the demo's crowd (and the tests'
simulated crowd) can be checked against the truth: an honest crowd's aggregates must rank the exact
caption above the flawed ones and the unrelated one last.

Everything is a function of (number of scenes, seed): the same arguments give the same files, so the
corpus shipped in `data/demo_scenes/` is checked against this code by the tests. Nothing here touches
the database; rendering goes through `common.media.draw_scene`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import media

DEFAULT_SCENES = 24
DEFAULT_SEED = 20261126
SECONDS = 4.0
WIDTH, HEIGHT, BOX = 426, 240, 48
SYSTEM = ("scene-template-writer", "1.0")

# Caption colour name -> ffmpeg colour. Backgrounds are muted so every box colour stands out.
COLOURS = {
    "red": "0xE5383B",
    "green": "0x2DC653",
    "blue": "0x3A86FF",
    "yellow": "0xFFD60A",
    "orange": "0xFB8500",
    "purple": "0x9D4EDD",
    "white": "0xFFFFFF",
}
BACKGROUNDS = {
    "black": "0x000000",
    "grey": "0x6C757D",
    "dark blue": "0x14213D",
    "dark green": "0x1B4332",
}
DIRECTIONS = {
    # name: (caption phrase, from, to, x expression, y expression)
    "right": ("to the right", "left", "right", f"10+(W-{BOX + 20})*t/{SECONDS:g}", f"(H-{BOX})/2"),
    "left": (
        "to the left",
        "right",
        "left",
        f"W-{BOX + 10}-(W-{BOX + 20})*t/{SECONDS:g}",
        f"(H-{BOX})/2",
    ),
    "down": ("downwards", "top", "bottom", f"(W-{BOX})/2", f"10+(H-{BOX + 20})*t/{SECONDS:g}"),
    "up": (
        "upwards",
        "bottom",
        "top",
        f"(W-{BOX})/2",
        f"H-{BOX + 10}-(H-{BOX + 20})*t/{SECONDS:g}",
    ),
}
OPPOSITE = {"right": "left", "left": "right", "down": "up", "up": "down"}
NUMBER_WORDS = {2: "two", 3: "three", 4: "four", 5: "five"}
UNRELATED = (
    "A man throws darts at a board in a crowded pub.",
    "Two children kick a football across a park.",
    "A woman slices vegetables on a kitchen counter.",
    "A dog catches a frisbee on a sunny beach.",
)
HALLUCINATIONS = (" while a dog runs past", " as a ball bounces beside it", " next to a small tree")

# The quality each kind of candidate was written to have, per criterion of the default questions
# (descriptiveness, relevance, fluency), read with the per-criterion rubric that demo campaigns use
# (annotation.questions): an unrelated caption can still be fluent.
INTENDED: dict[str, dict[str, int]] = {
    "exact": {"descriptiveness": 5, "relevance": 5, "fluency": 5},
    "hallucinated_object": {"descriptiveness": 4, "relevance": 2, "fluency": 5},
    "too_vague": {"descriptiveness": 2, "relevance": 4, "fluency": 5},
    "broken_grammar": {"descriptiveness": 4, "relevance": 4, "fluency": 2},
    "wrong_colour": {"descriptiveness": 3, "relevance": 2, "fluency": 5},
    "wrong_action": {"descriptiveness": 3, "relevance": 2, "fluency": 5},
    "unrelated": {"descriptiveness": 1, "relevance": 1, "fluency": 5},
}


@dataclass(frozen=True)
class Scene:
    clip_id: str
    kind: str  # "move", "appear" or "change"
    background: str
    colour: str
    second_colour: str = ""  # "change": the colour it turns into
    direction: str = ""  # "move"
    count: int = 0  # "appear"

    def boxes(self) -> list[media.DrawnBox]:
        """The squares to draw, in the frame's pixel coordinates."""
        if self.kind == "move":
            _, _, _, x, y = DIRECTIONS[self.direction]
            return [media.DrawnBox(x=x, y=y, size=BOX, colour=COLOURS[self.colour])]
        if self.kind == "appear":
            gap = 16
            left = (WIDTH - self.count * BOX - (self.count - 1) * gap) // 2
            interval = (SECONDS - 1.0) / self.count
            return [
                media.DrawnBox(
                    x=str(left + index * (BOX + gap)),
                    y=str((HEIGHT - BOX) // 2),
                    size=BOX,
                    colour=COLOURS[self.colour],
                    enable=f"gte(t,{0.3 + index * interval:.2f})",
                )
                for index in range(self.count)
            ]
        half = SECONDS / 2
        centre_x, centre_y = str((WIDTH - BOX) // 2), str((HEIGHT - BOX) // 2)
        return [
            media.DrawnBox(centre_x, centre_y, BOX, COLOURS[self.colour], f"lt(t,{half:g})"),
            media.DrawnBox(
                centre_x, centre_y, BOX, COLOURS[self.second_colour], f"gte(t,{half:g})"
            ),
        ]


@dataclass(frozen=True)
class Candidate:
    candidate_id: str
    flaw: str
    text: str

    @property
    def intended(self) -> dict[str, int]:
        return INTENDED[self.flaw]


def _other(rng: random.Random, choices: list[str], *avoid: str) -> str:
    return rng.choice([choice for choice in choices if choice not in avoid])


def make_scenes(count: int = DEFAULT_SCENES, seed: int = DEFAULT_SEED) -> list[Scene]:
    """`count` scenes, the three kinds in turn, colours and backgrounds drawn from `seed`."""
    if count < 1:
        raise ValueError("count must be at least 1")
    rng = random.Random(seed)
    colours, backgrounds = list(COLOURS), list(BACKGROUNDS)
    scenes = []
    for index in range(count):
        kind = ("move", "appear", "change")[index % 3]
        background = rng.choice(backgrounds)
        colour = rng.choice(colours)
        clip_id = f"demo-scene-{index + 1:03d}"
        if kind == "move":
            scenes.append(
                Scene(clip_id, kind, background, colour, direction=rng.choice(list(DIRECTIONS)))
            )
        elif kind == "appear":
            scenes.append(Scene(clip_id, kind, background, colour, count=rng.randint(2, 4)))
        else:
            second = _other(rng, colours, colour)
            scenes.append(Scene(clip_id, kind, background, colour, second_colour=second))
    return scenes


def references(scene: Scene) -> list[str]:
    """Three human-style descriptions of what the scene shows."""
    bg, colour = scene.background, scene.colour
    if scene.kind == "move":
        phrase, start, end, _, _ = DIRECTIONS[scene.direction]
        return [
            f"A {colour} square moves from the {start} to the {end} across a {bg} background.",
            f"On a {bg} background, a {colour} square slides {phrase}.",
            f"A small {colour} block travels {phrase} over a plain {bg} screen.",
        ]
    if scene.kind == "appear":
        number = NUMBER_WORDS[scene.count]
        return [
            f"{number.capitalize()} {colour} squares appear one after another on a {bg} background.",
            f"One by one, {number} {colour} squares show up in a row on a {bg} screen.",
            f"A row of {colour} squares builds up on a {bg} background until there are {number}.",
        ]
    second = scene.second_colour
    return [
        f"A square in the middle of a {bg} background changes from {colour} to {second}.",
        f"A {colour} square in the centre turns {second} halfway through.",
        f"On a {bg} screen, a square switches its colour from {colour} to {second}.",
    ]


def _describe(
    scene: Scene, *, colour: str, direction: str = "", count: int = 0, second: str = ""
) -> str:
    """The exact caption's wording, with any attribute replaced (for the wrong candidates)."""
    bg = scene.background
    if scene.kind == "move":
        phrase = DIRECTIONS[direction or scene.direction][0]
        return f"A {colour} square moves {phrase} across a {bg} background."
    if scene.kind == "appear":
        number = NUMBER_WORDS[count or scene.count]
        return f"{number.capitalize()} {colour} squares appear in a row on a {bg} background."
    return f"In the centre of a {bg} background, a {colour} square turns {second or scene.second_colour}."


def candidates(scene: Scene, rng: random.Random) -> list[Candidate]:
    """Seven candidates: exact, and one each of the known flaws, in a shuffled order."""
    colour = scene.colour
    exact = _describe(scene, colour=colour)
    wrong_colour = _other(rng, list(COLOURS), colour, scene.second_colour)
    if scene.kind == "move":
        wrong_action = _describe(scene, colour=colour, direction=OPPOSITE[scene.direction])
        vague = "Something moves on the screen."
        broken = f"{colour} square move {DIRECTIONS[scene.direction][0]} the across {scene.background} background a."
        wrong_colour_text = _describe(scene, colour=wrong_colour)
    elif scene.kind == "appear":
        wrong_count = _other(rng, [str(n) for n in NUMBER_WORDS], str(scene.count))
        wrong_action = _describe(scene, colour=colour, count=int(wrong_count))
        vague = "Some shapes are shown."
        broken = f"{NUMBER_WORDS[scene.count]} square {colour} is appear in row a on background."
        wrong_colour_text = _describe(scene, colour=wrong_colour)
    else:
        # Wrong action: the change told backwards (from the second colour to the first).
        wrong_action = _describe(scene, colour=scene.second_colour, second=colour)
        vague = "A shape is on the screen."
        broken = f"square {colour} in centre it turning {scene.second_colour} the background of."
        wrong_colour_text = _describe(scene, colour=colour, second=wrong_colour)
    texts = {
        "exact": exact,
        "hallucinated_object": exact[:-1] + rng.choice(HALLUCINATIONS) + ".",
        "too_vague": vague,
        "broken_grammar": broken[0].upper() + broken[1:],
        "wrong_colour": wrong_colour_text,
        "wrong_action": wrong_action,
        "unrelated": rng.choice(UNRELATED),
    }
    made = [
        Candidate(candidate_id=f"demo-scene:{scene.clip_id}:{flaw}", flaw=flaw, text=text)
        for flaw, text in texts.items()
    ]
    rng.shuffle(made)  # the order on the page must not give the quality away
    return made


def corpus_lines(
    count: int = DEFAULT_SCENES, seed: int = DEFAULT_SEED
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The generic-import JSONL records (one per clip) and the intended-quality records (one per
    candidate)."""
    rng = random.Random(seed + 1)
    clips: list[dict[str, Any]] = []
    intended: list[dict[str, Any]] = []
    for scene in make_scenes(count, seed):
        made = candidates(scene, rng)
        clips.append(
            {
                "clip_id": scene.clip_id,
                "youtube_id": scene.clip_id,
                "start": 0,
                "end": SECONDS,
                "references": references(scene),
                "candidates": [
                    {
                        "id": item.candidate_id,
                        "text": item.text,
                        "system": SYSTEM[0],
                        "system_version": SYSTEM[1],
                    }
                    for item in made
                ],
            }
        )
        intended.extend(
            {
                "candidate_id": item.candidate_id,
                "clip_id": scene.clip_id,
                "flaw": item.flaw,
                **item.intended,
            }
            for item in made
        )
    return clips, intended


def _jsonl(records: list[dict[str, Any]]) -> str:
    return "".join(
        json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n" for record in records
    )


def write_corpus(
    directory: str | Path, *, count: int = DEFAULT_SCENES, seed: int = DEFAULT_SEED
) -> tuple[Path, Path]:
    """Write `scenes.jsonl` (for `import_candidates`) and `intended.jsonl` into `directory`."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    clips, intended = corpus_lines(count, seed)
    scenes_path, intended_path = folder / "scenes.jsonl", folder / "intended.jsonl"
    scenes_path.write_text(_jsonl(clips), encoding="utf-8")
    intended_path.write_text(_jsonl(intended), encoding="utf-8")
    return scenes_path, intended_path


def render_videos(
    directory: str | Path,
    *,
    count: int = DEFAULT_SCENES,
    seed: int = DEFAULT_SEED,
    overwrite: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[str], list[str]]:
    """Draw `<clip id>.mp4` for every scene into `directory` (named for `attach_videos`). Returns the
    names written and those already there."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    scenes = make_scenes(count, seed)
    written, existing = [], []
    for index, scene in enumerate(scenes):
        path = folder / f"{scene.clip_id}.mp4"
        if path.exists() and not overwrite:
            existing.append(path.name)
        else:
            partial = path.with_name(f".partial-{path.name}")
            media.draw_scene(
                partial,
                background=BACKGROUNDS[scene.background],
                boxes=scene.boxes(),
                duration=SECONDS,
                width=WIDTH,
                height=HEIGHT,
            )
            partial.replace(path)
            written.append(path.name)
        if progress is not None:
            progress(index + 1, len(scenes))
    return written, existing


def load_intended(path: str | Path) -> dict[str, dict[str, Any]]:
    """candidate id -> its intended-quality record, from an `intended.jsonl`."""
    records = (
        json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line
    )
    return {record["candidate_id"]: record for record in records}
