"""FOIL benchmarks: a correct caption beside a foil that differs from it in one visual noun; a
metric is right when it scores the correct caption strictly higher (a tie counts as wrong).

Two benchmarks, kept apart because only one of them has published figures:

- **ActivityNet-FOIL as published** (Shi et al. 2022, the EMScore paper; FOIL: Shekhar et al.
  2017), protocol ``foil``: a video's paragraph is a list of sentences, each on its own time
  segment; every sentence is scored on its segment (against the references whose segments overlap
  it, in the reference-based setting), a paragraph's score is the mean of its sentences', and a
  *video* is right when its correct paragraph scores strictly higher than its foil paragraph.
  Accuracy = right videos / videos. This is the rule of the EMScore authors' evaluation script
  (``ActivityNet-FOIL_demo.py`` of github.com/ShiYaya/emscore: per-sentence scores averaged over each
  video's sentences, then ``right > foil`` per video). The official files are converted into a
  clip import and a paragraph file by `training_bridge.rigel.activitynet_foil`; the paper's
  accuracies (Rigel paper, Table 2) are shown beside this benchmark only.
- **Noun-swap foils**, protocol ``noun-swap``: Lepus's own benchmark, generated from a campaign's
  references (below). It is not ActivityNet-FOIL and no published figure belongs beside it.

Generation of noun-swap foils (deterministic: the same corpus and seed give the same foils):

- the correct caption of a clip is its first reference; the references the reference-based setting
  scores against are the clip's other references (none: the pair is reference-free only);
- the corpus nouns are the words of `VISUAL_NOUNS` that occur in any caption of the benchmark
  (references and candidates);
- the swapped noun is one of the caption's corpus nouns, and its replacement another corpus noun
  of the same number (singular/plural) that no reference of the clip contains; both are chosen by
  `random.Random("<seed>:<clip id>")`, so one clip's foil does not depend on the others; an
  indefinite article before the swapped noun follows the replacement ("an egg" -> "a dog");
- a clip whose caption has no corpus noun, or no possible replacement, gets no pair (counted).

A user-supplied FOIL file is JSON Lines, each line either one pair
``{"clip": "<clip id>", "caption": "...", "foil": "...", "references": ["...", ...]}``
(``references`` optional; absent: the clip's references other than the caption), or one
paragraph ``{"video": "<id>", "benchmark": "activitynet-foil", "segments": [<pair>, ...]}``
whose segments are pairs on the segment clips of one video. A file holds pairs or paragraphs,
not both.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from training_bridge.rigel.data import json_objects

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


ACTIVITYNET_FOIL = "activitynet-foil"  # the `benchmark` a converted paragraph file names
NOUN_SWAP = "noun-swap"


@dataclass(frozen=True)
class Paragraph:
    """One video of a paragraph benchmark: its segment pairs are `FoilSet.pairs[first:last]`."""

    video: str
    first: int
    last: int


@dataclass
class FoilSet:
    pairs: list[FoilPair]
    seed: int | None = None
    source: str = "generated"  # or "file"
    corpus_nouns: list[str] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> clips
    # Paragraph benchmarks (ActivityNet-FOIL): the videos, each a run of consecutive pairs; empty
    # for a benchmark of single pairs.
    paragraphs: list[Paragraph] = field(default_factory=list)
    benchmark: str = NOUN_SWAP  # NOUN_SWAP, ACTIVITYNET_FOIL, "pairs" or "paragraphs" (a user's)


def corpus_nouns(texts: Iterable[str]) -> list[str]:
    """The visual nouns that occur in these captions, sorted."""
    found = set()
    for text in texts:
        for word in _WORD.findall(text.lower()):
            if word in VISUAL_NOUNS:
                found.add(word)
    return sorted(found)


_ARTICLE_BEFORE = re.compile(r"\b([Aa]n?)(\s+)$")


def indefinite_article(word: str) -> str:
    """ "an" before a vowel letter, else "a" (enough for `VISUAL_NOUNS`, none of which starts with a
    silent h or a "you" sound)."""
    return "an" if word[:1].lower() in "aeiou" else "a"


def _replace_word(text: str, start: int, end: int, replacement: str) -> str:
    """`text` with the word at [start, end) replaced, its capital kept, and an indefinite article
    right before it made to fit the replacement ("an egg" -> "a dog")."""
    original = text[start:end]
    if original[:1].isupper():
        replacement = replacement[:1].upper() + replacement[1:]
    head = text[:start]
    article = _ARTICLE_BEFORE.search(head)
    if article is not None:
        fitted = indefinite_article(replacement)
        if article.group(1)[:1].isupper():
            fitted = fitted.capitalize()
        head = head[: article.start(1)] + fitted + article.group(2)
    return head + replacement + text[end:]


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


def _parse_pair(
    raw: Any,
    *,
    where: str,
    clip_references: Mapping[str, Sequence[str]],
    allow_same: bool = False,
) -> FoilPair:
    """One pair; `allow_same`: a paragraph's sentence may equal its foil (ActivityNet-FOIL foils
    one sentence of a paragraph and keeps the others)."""
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
    if values["caption"] == values["foil"] and not allow_same:
        raise FoilFormatError(f"{where}: the foil equals the caption")
    references = raw.get("references")
    if references is None:
        references = [text for text in clip_references[values["clip"]] if text != values["caption"]]
    elif not isinstance(references, list) or not all(isinstance(r, str) for r in references):
        raise FoilFormatError(f"{where}: references must be a list of strings")
    return FoilPair(values["clip"], values["caption"], values["foil"], tuple(references))


def parse_foil_file(
    lines: Iterable[str], *, clip_references: Mapping[str, Sequence[str]]
) -> FoilSet:
    """Pairs or paragraphs of a user-supplied FOIL JSONL file (format in the module docstring); a
    pair without `references` takes its clip's references other than its caption."""
    pairs: list[FoilPair] = []
    paragraphs: list[Paragraph] = []
    benchmarks: set[str] = set()
    videos: set[str] = set()
    kinds: set[str] = set()
    for where, raw in json_objects(lines, "FOIL file line", FoilFormatError, expected="an object"):
        kind = "paragraphs" if "segments" in raw else "pairs"
        kinds.add(kind)
        if len(kinds) > 1:
            raise FoilFormatError(f"{where}: a FOIL file holds pairs or paragraphs, not both")
        if kind == "pairs":
            pairs.append(_parse_pair(raw, where=where, clip_references=clip_references))
            continue
        video = raw.get("video")
        if not isinstance(video, str) or not video.strip():
            raise FoilFormatError(f"{where}: 'video' must be a non-empty string")
        if video in videos:
            raise FoilFormatError(f"{where}: video {video!r} appears twice")
        videos.add(video)
        segments = raw["segments"]
        if not isinstance(segments, list) or not segments:
            raise FoilFormatError(f"{where}: 'segments' must be a non-empty list of pairs")
        benchmarks.add(str(raw.get("benchmark") or ""))
        first = len(pairs)
        for index, segment in enumerate(segments):
            pairs.append(
                _parse_pair(
                    segment,
                    where=f"{where}, segment {index}",
                    clip_references=clip_references,
                    allow_same=True,
                )
            )
        if all(pair.caption == pair.foil for pair in pairs[first:]):
            raise FoilFormatError(f"{where}: no sentence of the paragraph differs from its foil")
        paragraphs.append(Paragraph(video.strip(), first, len(pairs)))
    if not pairs:
        raise FoilFormatError("the FOIL file holds no pair")
    if not paragraphs:
        benchmark = "pairs"
    elif benchmarks == {ACTIVITYNET_FOIL}:
        benchmark = ACTIVITYNET_FOIL
    else:
        benchmark = "paragraphs"
    return FoilSet(
        pairs=pairs, seed=None, source="file", paragraphs=paragraphs, benchmark=benchmark
    )


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


def paragraph_accuracy(
    caption_scores: Sequence[float] | Any,
    foil_scores: Sequence[float] | Any,
    paragraphs: Sequence[Paragraph],
) -> float | None:
    """Share (%) of videos whose correct paragraph (the mean of its sentences' scores) scores
    strictly higher than its foil paragraph; None for no video. Score i belongs to pair i."""
    if len(caption_scores) != len(foil_scores):
        raise ValueError("one foil score per caption score")
    if not paragraphs:
        return None
    right = 0
    for paragraph in paragraphs:
        span = slice(paragraph.first, paragraph.last)
        captions, foils = list(caption_scores[span]), list(foil_scores[span])
        if not captions or len(captions) != paragraph.last - paragraph.first:
            raise ValueError(f"no score for every sentence of video {paragraph.video}")
        if sum(captions) / len(captions) > sum(foils) / len(foils):
            right += 1
    return round(100.0 * right / len(paragraphs), 4)
