"""PTB-style tokenisation as the COCO caption evaluation toolkit does it, in pure Python.

The toolkit (pycocoevalcap) pipes every caption through Stanford CoreNLP 3.4.1's `PTBTokenizer`
(`-preserveLines -lowerCase`) and then drops the tokens of a fixed punctuation list. This module
reproduces that result without Java. It is a rule-based re-implementation of the tokenizer's
observable behaviour (checked against the jar's output; see docs/metrics.md), not a port of its lexer:

- punctuation is split from words: `, ; : ? ! .` (but `1,000`, `10:30`, `3.5` stay whole), quotes,
  brackets, `$ % # * = + < >`, `&` between lowercase letters (`q&a` -> `q & a`; `AT&T` stays),
  `/` unless it sits between two letters or digits, leading/trailing hyphens, `--` and `...`;
- a word-final period stays on known abbreviations (`mr.`, `dr.`, `etc.`, `u.s.`, `p.m.`, a single
  letter `a.`) and on `no.` before a number; otherwise it is split off;
- clitics are split the Penn Treebank way: `doesn't` -> `does n't`, `can't` -> `ca n't`,
  `it's` -> `it 's`, `they're` -> `they 're`, `cannot` -> `can not`, `gonna` -> `gon na`,
  `parents'` -> `parents '`; `o'clock`, `'90s` stay whole;
- brackets become `-lrb- -rrb- -lsb- -rsb- -lcb- -rcb-`; the toolkit's punctuation list holds the
  upper-case `-LRB-` forms, so after `-lowerCase` these tokens are *kept* — a quirk reproduced here;
- then every token is lower-cased and the toolkit's punctuation tokens
  (`'' ' `` ` -LRB- -RRB- -LCB- -RCB- . ? ! , : - -- ... ;`) are removed.
"""

from __future__ import annotations

import re


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# The tokens pycocoevalcap removes after PTB tokenisation (its `PUNCTUATIONS`), compared after
# lower-casing the tokens just as the toolkit does (so the upper-case bracket names never match).
REMOVED_TOKENS = _words("'' ' `` ` -LRB- -RRB- -LCB- -RCB- . ? ! , : - -- ... ;")

# Words that keep a final period. Measured on the jar (lower-case input): each of these, written
# "the <w>. thing", kept its period; every other word of the VATEX-EVAL vocabulary lost it.
_ABBREVIATIONS = _words(
    "al apr aug ave blvd bros capt cf co col corp dec dept dr esq est etc feb fri ft gen gov "
    "hon inc jan jr jul jun lt ltd mar messrs mlle mme mon mr mrs ms mt nov oct ph prof rd rep "
    "reps rev sen sep sept sgt sr st thu tue vs wed tel univ assn sq"
)
# Kept only before a number ("no. 5", "fig. 3", "pp. 12").
_NUMBER_ABBREVIATIONS = _words("no nos fig figs pp p art op ca")
# Kept only when written with a capital (state names): "Mass.", "Wash.", "La.", "Miss.".
_CAPITALISED_ABBREVIATIONS = _words("la mass miss wash")

_BRACKETS = {"(": "-LRB-", ")": "-RRB-", "[": "-LSB-", "]": "-RSB-", "{": "-LCB-", "}": "-RCB-"}

_UNICODE_REPLACEMENTS = {
    "\u201c": ' " ',  # “
    "\u201d": ' " ',  # ”
    "\u201e": ' " ',  # „
    "\u2033": ' " ',  # ″
    "\u2018": "'",  # ‘
    "\u2019": "'",  # ’
    "\u201a": "'",  # ‚
    "\u2032": "'",  # ′
    "\u2014": " -- ",  # —
    "\u2013": " -- ",  # –
    "\u2015": " -- ",  # ―
    "\u2026": " ... ",  # …
    "\u00a0": " ",
    "\u00a3": " # ",  # the PTB tokenizer writes pounds as "#"
    "\u20ac": " $ ",  # and other currencies as "$"
    "\u00a5": " $ ",
}
_UNICODE_PATTERN = re.compile("|".join(map(re.escape, _UNICODE_REPLACEMENTS)))

_URL = re.compile(
    r"(?:(?:https?|ftp)://|www\.)[^\s\"<>]+[^\s\"<>.,;:!?)\]]|[\w.+-]+@[\w-]+(?:\.[\w-]+)+"
)
_EMOTICON = re.compile(r"(?<!\S)([:;]-?)([()])(?!\S)")
_ELLIPSIS = re.compile(r"\.\s*\.\s*\.(?:\s*\.)*")
_DOUBLE_DASH = re.compile(r"-{2,}")
_REPEATED_MARKS = re.compile(r"[?!]+")
_SPACED_SYMBOLS = re.compile(r"\*+|[;=+<>%$|\u00a7\u00b6\u00a9\u00b0~^]")
_HASH_NUMBER = re.compile(r"#(?=\d)")
_COMMA = re.compile(r"(?<!\d),|,(?!\d)")
_COLON = re.compile(r"(?<!\d):|:(?!\d)")
_AMPERSAND = re.compile(r"(?<![A-Z])&|&(?![A-Z])")
_SLASHED_WORD = re.compile(r"^[^\W_][\w.-]*(?:/[\w.-]*[^\W_])+$")
_LEADING_HYPHEN = re.compile(r"(?<!\S)-(?=[^\s-])")
_TRAILING_HYPHEN = re.compile(r"(?<=[^\s-])-(?!\S)")
_DOUBLE_QUOTES = re.compile(r'"|``|\'\'')
_BACKTICK = re.compile(r"`")
_ACRONYM = re.compile(r"^(?:[^\W\d_]\.)+$")

_WHOLE_WORD_SPLITS = {
    "cannot": ("can", "not"),
    "gonna": ("gon", "na"),
    "gotta": ("got", "ta"),
    "lemme": ("lem", "me"),
    "gimme": ("gim", "me"),
    "wanna": ("wan", "na"),
    "'tis": ("'t", "is"),
    "'twas": ("'t", "was"),
    "y'all": ("y'", "all"),
}
_NEGATION = re.compile(r"^(.+?)(n't)$", re.IGNORECASE)
_CLITIC = re.compile(r"^(.*[^'])('(?:s|re|ve|ll|d|m))$", re.IGNORECASE)
_ROCK_N_ROLL = re.compile(r"^(.+)('n')(.+)$", re.IGNORECASE)
_STANDALONE_APOSTROPHE_WORDS = frozenset(
    ["'s", "'re", "'ve", "'ll", "'d", "'m", "n't", "'cause", "'em", "'n'", "''"]
)
# Inner apostrophes the PTB tokenizer keeps (measured on the jar): o'clock, l'amour, d'arcy,
# qu'est and a few contractions of poetry and speech.
_KEPT_APOSTROPHE_WORD = re.compile(r"^(?:[ldo]|qu)'[^\W\d_]+$", re.IGNORECASE)
_KEPT_APOSTROPHE_WORDS = frozenset(["ma'am", "ne'er", "e'er", "c'mon", "li'l", "ol'", "s'mores"])
_DECADE = re.compile(r"^'\d+s?$")


def _split_period(word: str, next_word: str | None) -> list[str]:
    if not word.endswith(".") or word in {".", "..."} or len(word) < 2:
        return [word]
    if word.endswith(".."):
        # "near.." -> "near . ."
        stem = word.rstrip(".")
        return [stem, *["."] * (len(word) - len(stem))] if stem else [word]
    stem = word[:-1]
    lowered = stem.lower()
    if (
        lowered in _ABBREVIATIONS
        or (stem[:1].isupper() and lowered in _CAPITALISED_ABBREVIATIONS)
        or _ACRONYM.match(word)
        or (lowered in _NUMBER_ABBREVIATIONS and next_word is not None and next_word[:1].isdigit())
    ):
        return [word]
    return [stem, "."]


def _split_apostrophes(word: str) -> list[str]:
    lowered = word.lower()
    if lowered in _WHOLE_WORD_SPLITS:
        first = _WHOLE_WORD_SPLITS[lowered][0]
        return [word[: len(first)], word[len(first) :]]
    if "'" not in word or word == "'":
        return [word]
    if (
        _DECADE.match(word)
        or lowered in _STANDALONE_APOSTROPHE_WORDS
        or lowered in _KEPT_APOSTROPHE_WORDS
    ):
        return [word]
    match = _ROCK_N_ROLL.match(word)
    if match and match.group(1)[-1:].isalpha() and match.group(3)[:1].isalpha():
        return [match.group(1), match.group(2), match.group(3)]
    match = _NEGATION.match(word)
    if match and match.group(1)[-1:].isalpha():
        stem = match.group(1)
        # "can't" -> "ca n't", "won't" -> "wo n't": the stem keeps only what precedes "n't".
        return [stem, match.group(2)]
    match = _CLITIC.match(word)
    if match and match.group(1)[-1:].isalnum():
        return [*_split_apostrophes(match.group(1)), match.group(2)]
    if word.startswith("'") and len(word) > 1:
        return ["`", *_split_apostrophes(word[1:])]
    if word.endswith("'") and len(word) > 1:
        return [*_split_apostrophes(word[:-1]), "'"]
    if _KEPT_APOSTROPHE_WORD.match(word):
        return [word]
    if lowered.startswith("y'") and len(word) > 2:
        return [word[:2], *_split_apostrophes(word[2:])]
    # Any other inner apostrophe is a quote mark between two tokens: she'sl -> she ` sl, 5'8 -> 5 ' 8.
    left, _, right = word.partition("'")
    return [
        *(_split_apostrophes(left) if left else []),
        "'",
        *(_split_apostrophes(right) if right else []),
    ]


def ptb_tokens(text: str) -> list[str]:
    """The PTB tokens of `text`, original case, punctuation still present."""
    text = _UNICODE_PATTERN.sub(lambda match: _UNICODE_REPLACEMENTS[match.group(0)], text)
    # Tokens that later rules must not cut (URLs, emoticons, bracket names) wait in placeholders.
    protected: list[str] = []

    def protect(value: str) -> str:
        protected.append(value)
        return f" \x00{len(protected) - 1}\x00 "

    text = _URL.sub(lambda match: protect(match.group(0)), text)
    # Emoticons keep their bracket name glued to the eyes: ":)" -> ":-RRB-".
    text = _EMOTICON.sub(lambda m: protect(m.group(1) + _BRACKETS[m.group(2)]), text)
    text = _ELLIPSIS.sub(" ... ", text)
    text = _DOUBLE_DASH.sub(" -- ", text)
    text = _DOUBLE_QUOTES.sub(lambda match: protect("''"), text)
    text = _BACKTICK.sub(" ` ", text)
    text = _REPEATED_MARKS.sub(lambda m: f" {m.group(0)} ", text)
    text = _SPACED_SYMBOLS.sub(lambda m: f" {m.group(0)} ", text)
    text = _HASH_NUMBER.sub(" # ", text)
    text = _COMMA.sub(" , ", text)
    text = _COLON.sub(" : ", text)
    text = _AMPERSAND.sub(" & ", text)
    text = "".join(protect(_BRACKETS[char]) if char in _BRACKETS else char for char in text)
    text = _LEADING_HYPHEN.sub("- ", text)
    text = _TRAILING_HYPHEN.sub(" -", text)

    chunks = text.split()
    tokens: list[str] = []
    for index, chunk in enumerate(chunks):
        if chunk.startswith("\x00"):
            tokens.append(protected[int(chunk[1:-1])])
            continue
        next_chunk = chunks[index + 1] if index + 1 < len(chunks) else None
        for piece in _split_period(chunk, next_chunk):
            for word in _split_slash(piece):
                tokens.extend(_split_apostrophes(word))
    return tokens


def _split_slash(word: str) -> list[str]:
    # "and/or", "50/50", "w/o" stay whole; any other slash is a token of its own.
    if "/" not in word or _SLASHED_WORD.match(word):
        return [word]
    return word.replace("/", " / ").split()


def coco_tokenize(text: str) -> str:
    """`text` as the COCO toolkit scores it: PTB tokens, lower-cased, punctuation tokens removed,
    joined by single spaces (newlines inside a caption count as spaces)."""
    tokens = ptb_tokens(text.replace("\n", " "))
    return " ".join(token for token in (t.lower() for t in tokens) if token not in REMOVED_TOKENS)
