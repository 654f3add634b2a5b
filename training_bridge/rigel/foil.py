"""The FOIL protocol (ActivityNet-FOIL, Shi et al. 2022; FOIL, Shekhar et al. 2017): a correct
caption beside a foil that differs from it in one visual noun; a metric is right on a pair when it
scores the correct caption higher (a tie counts as wrong). Accuracy = right pairs / pairs.

Generation (deterministic: the same corpus and seed give the same foils):

- the correct caption of a clip is its first reference; the references the reference-based setting
  scores against are the clip's other references (none: the pair is reference-free only);
- the corpus nouns are the words of `VISUAL_NOUNS` that occur in any caption of the benchmark
  (references and candidates);
- the swapped noun is one of the caption's corpus nouns, and its replacement another corpus noun
  of the same number (singular/plural) that no reference of the clip contains; both are chosen by
  `random.Random("<seed>:<clip id>")`, so one clip's foil does not depend on the others;
- a clip whose caption has no corpus noun, or no possible replacement, gets no pair (counted).

A user-supplied FOIL file is JSON Lines, one pair a line:
``{"clip": "<clip id>", "caption": "...", "foil": "...", "references": ["...", ...]}``
where ``references`` is optional (absent: the clip's references other than the caption).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

# Concrete, depictable nouns of everyday video captions (people, animals, objects, places), each
# with its plural. The list is fixed so that generation does not depend on a tagger's version.
_NOUN_PAIRS = (
    ("man", "men"), ("woman", "women"), ("person", "people"), ("boy", "boys"),
    ("girl", "girls"), ("child", "children"), ("kid", "kids"), ("baby", "babies"),
    ("player", "players"), ("dog", "dogs"), ("cat", "cats"), ("horse", "horses"),
    ("bird", "birds"), ("fish", "fish"), ("cow", "cows"), ("ball", "balls"),
    ("guitar", "guitars"), ("piano", "pianos"), ("drum", "drums"), ("violin", "violins"),
    ("car", "cars"), ("bike", "bikes"), ("bicycle", "bicycles"), ("motorcycle", "motorcycles"),
    ("boat", "boats"), ("truck", "trucks"), ("bus", "buses"), ("train", "trains"),
    ("kitchen", "kitchens"), ("street", "streets"), ("road", "roads"), ("field", "fields"),
    ("room", "rooms"), ("stage", "stages"), ("pool", "pools"), ("beach", "beaches"),
    ("table", "tables"), ("chair", "chairs"), ("knife", "knives"), ("bowl", "bowls"),
    ("plate", "plates"), ("cup", "cups"), ("bottle", "bottles"), ("phone", "phones"),
    ("camera", "cameras"), ("book", "books"), ("paper", "papers"), ("hat", "hats"),
    ("shirt", "shirts"), ("tree", "trees"), ("snow", "snow"), ("water", "water"),
    ("food", "food"), ("bread", "bread"), ("egg", "eggs"), ("tomato", "tomatoes"),
    ("potato", "potatoes"), ("onion", "onions"), ("cake", "cakes"), ("pan", "pans"),
    ("pot", "pots"), ("oven", "ovens"), ("door", "doors"), ("window", "windows"),
    ("wall", "walls"), ("floor", "floors"), ("bed", "beds"), ("mirror", "mirrors"),
    ("hair", "hair"), ("hand", "hands"), ("face", "faces"), ("shoe", "shoes"),
    ("box", "boxes"), ("bag", "bags"), ("rope", "ropes"), ("board", "boards"),
    ("skateboard", "skateboards"), ("surfboard", "surfboards"), ("wave", "waves"),
    ("gym", "gyms"), ("park", "parks"), ("house", "houses"), ("building", "buildings"),
    ("tire", "tires"), ("wheel", "wheels"), ("microphone", "microphones"), ("sofa", "sofas"),
    ("computer", "computers"), ("keyboard", "keyboards"), ("screen", "screens"),
    ("flower", "flowers"), ("garden", "gardens"), ("mountain", "mountains"), ("river", "rivers"),
    ("lake", "lakes"), ("sink", "sinks"), ("towel", "towels"), ("brush", "brushes"),
)  # fmt: skip
VISUAL_NOUNS: dict[str, str] = {}  # word -> "singular" / "plural"
for _singular, _plural in _NOUN_PAIRS:
    VISUAL_NOUNS[_singular] = "singular"
    if _plural != _singular:
        VISUAL_NOUNS[_plural] = "plural"
    else:
        VISUAL_NOUNS[_plural] = "mass"  # the same form in both numbers: swaps with its kind

_WORD = re.compile(r"[A-Za-z]+")


class FoilFormatError(ValueError):
    """A user-supplied FOIL file line is not a valid pair (the message names the line)."""


@dataclass(frozen=True)
class FoilPair:
    clip_id: str
    caption: str
    foil: str
    references: tuple[str, ...] = ()
    original: str = ""  # the swapped noun ("" for a user-supplied pair)
    replacement: str = ""

    def swap(self) -> dict[str, object]:
        """The pair as recorded in the output (the swap list)."""
        data = asdict(self)
        data["references"] = len(self.references)
        return data


@dataclass
class FoilSet:
    pairs: list[FoilPair]
    seed: int | None = None
    source: str = "generated"  # or "file"
    corpus_nouns: list[str] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> clips


def corpus_nouns(texts: Iterable[str]) -> list[str]:
    """The visual nouns that occur in these captions, sorted."""
    found = set()
    for text in texts:
        for word in _WORD.findall(text.lower()):
            if word in VISUAL_NOUNS:
                found.add(word)
    return sorted(found)


def _replace_word(text: str, start: int, end: int, replacement: str) -> str:
    original = text[start:end]
    if original[:1].isupper():
        replacement = replacement[:1].upper() + replacement[1:]
    return text[:start] + replacement + text[end:]


def make_foil(
    caption: str,
    *,
    nouns: Sequence[str],
    forbidden: Iterable[str],
    rng: random.Random,
) -> tuple[str, str, str] | None:
    """(foil, original noun, replacement) or None when no swap is possible."""
    banned = {word for text in forbidden for word in _WORD.findall(text.lower())}
    known = set(nouns)
    spots = [match for match in _WORD.finditer(caption) if match.group(0).lower() in known]
    rng.shuffle(spots)
    for match in spots:
        word = match.group(0).lower()
        number = VISUAL_NOUNS[word]
        options = [
            noun
            for noun in nouns
            if noun != word and VISUAL_NOUNS[noun] == number and noun not in banned
        ]
        if options:
            replacement = options[rng.randrange(len(options))]
            return (
                _replace_word(caption, match.start(), match.end(), replacement),
                word,
                replacement,
            )
    return None


def generate_foils(
    clips: Mapping[str, Sequence[str]], *, corpus: Iterable[str], seed: int = 0
) -> FoilSet:
    """One pair per clip: {clip id: its references in order} -> the foil set. `corpus`: every
    caption of the benchmark (the nouns a foil may take)."""
    nouns = corpus_nouns(corpus)
    pairs: list[FoilPair] = []
    skipped: dict[str, int] = {}
    for clip_id in sorted(clips):
        references = list(clips[clip_id])
        if not references:
            skipped["no reference"] = skipped.get("no reference", 0) + 1
            continue
        caption, others = references[0], tuple(references[1:])
        made = make_foil(
            caption, nouns=nouns, forbidden=references, rng=random.Random(f"{seed}:{clip_id}")
        )
        if made is None:
            skipped["no swappable visual noun"] = skipped.get("no swappable visual noun", 0) + 1
            continue
        foil, original, replacement = made
        pairs.append(FoilPair(clip_id, caption, foil, others, original, replacement))
    return FoilSet(pairs=pairs, seed=seed, source="generated", corpus_nouns=nouns, skipped=skipped)


def parse_foil_file(
    lines: Iterable[str], *, clip_references: Mapping[str, Sequence[str]]
) -> FoilSet:
    """Pairs of a user-supplied FOIL JSONL file (format in the module docstring); a pair without
    `references` takes its clip's references other than its caption."""
    pairs: list[FoilPair] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"FOIL file line {number}"
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as error:
            raise FoilFormatError(f"{where}: not JSON ({error.msg})") from error
        if not isinstance(raw, dict):
            raise FoilFormatError(f"{where}: expected an object")
        values = {}
        for name in ("clip", "caption", "foil"):
            value = raw.get(name)
            if not isinstance(value, str) or not value.strip():
                raise FoilFormatError(f"{where}: {name!r} must be a non-empty string")
            values[name] = value.strip()
        if values["clip"] not in clip_references:
            raise FoilFormatError(f"{where}: unknown clip {values['clip']!r}")
        if values["caption"] == values["foil"]:
            raise FoilFormatError(f"{where}: the foil equals the caption")
        references = raw.get("references")
        if references is None:
            references = [
                text for text in clip_references[values["clip"]] if text != values["caption"]
            ]
        elif not isinstance(references, list) or not all(isinstance(r, str) for r in references):
            raise FoilFormatError(f"{where}: references must be a list of strings")
        pairs.append(FoilPair(values["clip"], values["caption"], values["foil"], tuple(references)))
    if not pairs:
        raise FoilFormatError("the FOIL file holds no pair")
    return FoilSet(pairs=pairs, seed=None, source="file")


def foil_accuracy(
    caption_scores: Sequence[float] | Any, foil_scores: Sequence[float] | Any
) -> float | None:
    """Share (%) of pairs whose caption scores strictly higher than its foil; None for no pair."""
    if len(caption_scores) != len(foil_scores):
        raise ValueError("one foil score per caption score")
    if not len(caption_scores):
        return None
    right = sum(1 for c, f in zip(caption_scores, foil_scores, strict=True) if c > f)
    return round(100.0 * right / len(caption_scores), 4)
