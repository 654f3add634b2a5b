"""The standard caption metrics against the published reference implementation (pycocoevalcap, a
development dependency) and the correlation statistics against scipy.

No database: these are the pure modules under training_bridge/metrics/.
"""

from __future__ import annotations

import math
import random
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from tests.metrics.vatex_eval_data import load_vatex_eval, vatex_eval_subset
from training_bridge.metrics.bleu import bleu_scores
from training_bridge.metrics.cider import cider_scores
from training_bridge.metrics.correlation import correlations, rater_averaged_correlations
from training_bridge.metrics.meteor import (
    JAR_ENVIRONMENT_VARIABLE,
    MeteorScorer,
    MeteorUnavailable,
    find_meteor_runtime,
)
from training_bridge.metrics.rouge import lcs_length, rouge_l_score, rouge_l_scores
from training_bridge.metrics.standard import (
    MetricUnavailable,
    metric_unavailable_reasons,
    standard_metric_scores,
    tokenize_corpus,
)
from training_bridge.metrics.tokenizer import coco_tokenize, ptb_tokens

pycocoevalcap = pytest.importorskip("pycocoevalcap")
from pycocoevalcap.bleu.bleu import Bleu  # noqa: E402
from pycocoevalcap.cider.cider import Cider  # noqa: E402
from pycocoevalcap.rouge.rouge import Rouge  # noqa: E402
from pycocoevalcap.tokenizer import ptbtokenizer  # noqa: E402

FIXED_EXAMPLES = 200


def _coco_inputs(candidates: list[str], references: list[list[str]]):  # type: ignore[no-untyped-def]
    gts = {index: group for index, group in enumerate(references)}
    res = {index: [candidate] for index, candidate in enumerate(candidates)}
    return gts, res


@pytest.fixture(scope="module")
def fixed_examples() -> tuple[list[str], list[list[str]]]:
    """200 VATEX-EVAL candidates (the first 200 of the file) with their nine references, tokenised."""
    subset = vatex_eval_subset(FIXED_EXAMPLES)
    return tokenize_corpus(subset.candidates, subset.references)


# --- tokenisation -------------------------------------------------------------------------------

# Cases beyond VATEX-EVAL's mostly pre-tokenised text, with the jar's output (checked live below).
TOKENIZER_CASES = {
    "He doesn't know; it's John's car (the red one).": "he does n't know it 's john 's car -lrb- the red one -rrb-",
    "\"Hello,\" she said. 'Quoted' text `here' and ``there''.": "hello she said quoted text here and there",
    "I can't, won't, cannot, gonna, y'all, o'clock, '90s.": "i ca n't wo n't can not gon na y' all o'clock '90s",
    "The U.S. army and Mr. Smith at 3 p.m. etc.": "the u.s. army and mr. smith at 3 p.m. etc.",
    "It costs $5.50 or 5% of 1,000 and 3/4 of a pie; and/or this/that.": "it costs $ 5.50 or 5 % of 1,000 and 3/4 of a pie and/or this/that",
    "Wait... what?! Really?? ok.": "wait what ?! really ?? ok",
    "A t-shirt -- and a re-run - plus -dash and dash- too.": "a t-shirt and a re-run plus dash and dash too",
    "q&a r&b AT&T at 10:30 in the 1990s, a man.a woman": "q & a r & b at&t at 10:30 in the 1990s a man.a woman",
    "the parents' car and a woman ' s lap": "the parents car and a woman s lap",
    "emoji café — dash … “smart” ‘quotes’": "emoji café dash smart quotes",
}


@pytest.mark.parametrize(("text", "expected"), list(TOKENIZER_CASES.items()))
def test_coco_tokenize_known_cases(text: str, expected: str) -> None:
    assert coco_tokenize(text) == expected


def test_bracket_tokens_survive_like_in_the_toolkit() -> None:
    # The toolkit removes "-LRB-" but the jar writes "-lrb-" under -lowerCase, so it stays.
    tokens = ptb_tokens("a (b) [c] {d}")
    assert " ".join(tokens) == "a -LRB- b -RRB- -LSB- c -RSB- -LCB- d -RCB-"
    assert coco_tokenize("a (b)") == "a -lrb- b -rrb-"


def _jar_tokenize(lines: list[str], tmp_path: Path) -> list[str]:
    """pycocoevalcap's own PTBTokenizer (the Stanford jar), line by line, punctuation removed."""
    jar_dir = Path(ptbtokenizer.__file__).parent
    source = tmp_path / "lines.txt"
    source.write_text("\n".join(lines), encoding="utf-8")
    output = subprocess.run(
        [
            "java",
            "-cp",
            str(jar_dir / ptbtokenizer.STANFORD_CORENLP_3_4_1_JAR),
            "edu.stanford.nlp.process.PTBTokenizer",
            "-preserveLines",
            "-lowerCase",
            str(source),
        ],
        capture_output=True,
        check=True,
    ).stdout.decode("utf-8")
    return [
        " ".join(word for word in line.rstrip().split(" ") if word not in ptbtokenizer.PUNCTUATIONS)
        for line in output.split("\n")[: len(lines)]
    ]


@pytest.mark.skipif(shutil.which("java") is None, reason="the Stanford jar needs Java")
def test_tokenizer_agrees_with_the_stanford_jar_on_every_vatex_eval_text(tmp_path: Path) -> None:
    data = load_vatex_eval()
    texts = sorted({text for group in data.references for text in group} | set(data.candidates))
    assert len(texts) == 34558
    expected = _jar_tokenize(texts, tmp_path)
    ours = [coco_tokenize(text) for text in texts]
    mismatches = [(text, a, b) for text, a, b in zip(texts, ours, expected, strict=True) if a != b]
    assert mismatches == []


@pytest.mark.skipif(shutil.which("java") is None, reason="the Stanford jar needs Java")
def test_tokenizer_agrees_with_the_stanford_jar_on_the_known_cases(tmp_path: Path) -> None:
    assert _jar_tokenize(list(TOKENIZER_CASES), tmp_path) == list(TOKENIZER_CASES.values())


# --- BLEU, ROUGE-L, CIDEr against pycocoevalcap -------------------------------------------------


@pytest.mark.parametrize("reference_count", [1, 9])
def test_bleu_matches_pycocoevalcap(fixed_examples, reference_count: int) -> None:  # type: ignore[no-untyped-def]
    candidates, references = fixed_examples
    references = [group[:reference_count] for group in references]
    expected_corpus, expected_sentence = Bleu(4).compute_score(
        *_coco_inputs(candidates, references), verbose=0
    )
    result = bleu_scores(candidates, references)
    assert np.abs(np.array(result.corpus) - np.array(expected_corpus)).max() < 1e-6
    assert result.sentence.shape == (FIXED_EXAMPLES, 4)
    assert np.abs(result.sentence - np.array(expected_sentence).T).max() < 1e-6
    # Not trivially zero: the fixed set has real spread in every order.
    assert result.sentence[:, 0].std() > 0.05 and result.sentence[:, 3].max() > 0.3


@pytest.mark.parametrize("reference_count", [1, 9])
def test_rouge_l_matches_pycocoevalcap(fixed_examples, reference_count: int) -> None:  # type: ignore[no-untyped-def]
    candidates, references = fixed_examples
    references = [group[:reference_count] for group in references]
    expected_mean, expected = Rouge().compute_score(*_coco_inputs(candidates, references))
    ours = rouge_l_scores(candidates, references)
    assert np.abs(ours - expected).max() < 1e-6
    assert abs(ours.mean() - expected_mean) < 1e-6
    assert ours.std() > 0.05


@pytest.mark.parametrize("reference_count", [1, 9])
def test_cider_matches_pycocoevalcap(fixed_examples, reference_count: int) -> None:  # type: ignore[no-untyped-def]
    candidates, references = fixed_examples
    references = [group[:reference_count] for group in references]
    expected_mean, expected = Cider().compute_score(*_coco_inputs(candidates, references))
    ours = cider_scores(candidates, references)
    assert np.abs(ours - expected).max() < 1e-4
    assert abs(ours.mean() - expected_mean) < 1e-4
    assert ours.max() > 1.0


def test_cider_idf_comes_from_the_scored_corpus() -> None:
    refs = [["a dog runs on the grass"], ["a cat sleeps on a sofa"], ["a dog sleeps"]]
    alone = cider_scores(["a dog runs"], refs[:1])
    together = cider_scores(["a dog runs", "a cat", "a dog"], refs)
    # With one item every n-gram has IDF log(1) - log(1) = 0, so CIDEr is 0.
    assert alone.tolist() == [0.0]
    assert together[0] > 0


def test_bleu_add_one_smoothing_by_hand() -> None:
    # candidate "the cat sat" vs reference "the cat is here": 1-grams 2/3, 2-grams 1/2,
    # 3-grams 0/1, 4-grams 0/0. Lin & Och: p2 = (1+1)/(2+1), p3 = (0+1)/(1+1), p4 = (0+1)/(0+1).
    # Brevity penalty exp(1 - 4/3).
    result = bleu_scores(["the cat sat"], [["the cat is here"]], smoothing="add_one")
    penalty = math.exp(1 - 4 / 3)
    p = [2 / 3, 2 / 3, 1 / 2, 1 / 1]
    expected = [penalty * math.exp(sum(math.log(x) for x in p[:n]) / n) for n in range(1, 5)]
    assert result.sentence[0].tolist() == pytest.approx(expected, abs=1e-12)


def test_bleu_coco_smoothing_keeps_zero_match_candidates_ordered() -> None:
    # No 4-gram matches at all: BLEU-4 is tiny but not 0, and ordered by the lower orders.
    result = bleu_scores(
        ["a man plays the red guitar", "a dog eats food"],
        [["a man plays a blue guitar on stage"], ["a man plays a blue guitar on stage"]],
    )
    first, second = result.sentence[:, 3]
    assert 0 < second < first < 1e-3


def test_lcs_length_matches_dynamic_programming() -> None:
    generator = random.Random(7)

    def reference_lcs(a: list[str], b: list[str]) -> int:
        table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
        for i in range(1, len(a) + 1):
            for j in range(1, len(b) + 1):
                table[i][j] = (
                    table[i - 1][j - 1] + 1
                    if a[i - 1] == b[j - 1]
                    else max(table[i - 1][j], table[i][j - 1])
                )
        return table[-1][-1]

    for _ in range(300):
        a = [generator.choice("abcde") for _ in range(generator.randint(0, 25))]
        b = [generator.choice("abcde") for _ in range(generator.randint(0, 25))]
        assert lcs_length(a, b) == reference_lcs(a, b)


def test_rouge_l_maximises_precision_and_recall_separately() -> None:
    # Best precision from the long reference, best recall from the short one.
    score = rouge_l_score("a b c", ["a b c x y z w", "a z"])
    precision, recall, beta = 1.0, 1 / 2, 1.2
    expected = (1 + beta**2) * precision * recall / (recall + beta**2 * precision)
    assert score == pytest.approx(expected)


# --- METEOR ---------------------------------------------------------------------------------------


def test_meteor_is_unavailable_without_java(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(MeteorUnavailable, match="java"):
        find_meteor_runtime()
    assert metric_unavailable_reasons(["bleu4", "meteor"]) == {
        "meteor": "METEOR needs Java, and no `java` executable is on the PATH"
    }
    with pytest.raises(MetricUnavailable, match="meteor"):
        standard_metric_scores(["a dog"], [["a dog runs"]], metrics=["bleu4", "meteor"])
    # Asked to skip, the result simply has no METEOR column — never a column of zeros.
    scores = standard_metric_scores(
        ["a dog"], [["a dog runs"]], metrics=["bleu4", "meteor"], skip_unavailable=True
    )
    assert list(scores) == ["bleu4"]


def test_meteor_is_unavailable_with_a_missing_jar(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(JAR_ENVIRONMENT_VARIABLE, str(tmp_path / "meteor-1.5.jar"))
    with pytest.raises(MeteorUnavailable, match="does not exist"):
        find_meteor_runtime()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("java") is None, reason="METEOR needs Java")
def test_meteor_matches_pycocoevalcap(fixed_examples) -> None:  # type: ignore[no-untyped-def]
    from pycocoevalcap.meteor.meteor import Meteor

    candidates, references = fixed_examples
    candidates, references = candidates[:40], references[:40]
    _, expected = Meteor().compute_score(*_coco_inputs(candidates, references))
    with MeteorScorer() as scorer:
        ours = scorer.scores(candidates, references)
        again = scorer.scores(candidates[:3], references[:3])  # the process is reused
    assert np.abs(ours - np.array(expected)).max() < 1e-9
    assert again.tolist() == ours[:3].tolist()
    assert ours.std() > 0.02


# --- the entry point ------------------------------------------------------------------------------


def test_standard_metric_scores_returns_one_array_per_metric(fixed_examples) -> None:  # type: ignore[no-untyped-def]
    subset = vatex_eval_subset(FIXED_EXAMPLES)
    scores = standard_metric_scores(
        subset.candidates,
        subset.references,
        metrics=["bleu1", "bleu4", "rougeL", "cider"],
    )
    assert list(scores) == ["bleu1", "bleu4", "rougeL", "cider"]
    candidates, references = fixed_examples
    assert np.array_equal(scores["bleu4"], bleu_scores(candidates, references).sentence[:, 3])
    assert np.array_equal(scores["cider"], cider_scores(candidates, references))
    assert all(array.shape == (FIXED_EXAMPLES,) for array in scores.values())


def test_standard_metric_scores_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="unknown metric"):
        standard_metric_scores(["a"], [["a"]], metrics=["spice"])
    with pytest.raises(ValueError, match="no reference"):
        standard_metric_scores(["a", "b"], [["a"], []], metrics=["bleu4"])
    with pytest.raises(ValueError, match="one list of references"):
        standard_metric_scores(["a"], [], metrics=["bleu4"])


# --- correlations against scipy -------------------------------------------------------------------


def test_correlations_match_scipy_on_metric_and_human_vectors(fixed_examples) -> None:  # type: ignore[no-untyped-def]
    candidates, references = fixed_examples
    predicted = cider_scores(candidates, references)
    human = vatex_eval_subset(FIXED_EXAMPLES).rater_scores.mean(axis=1)  # many ties
    ours = correlations(predicted, human)
    assert ours == {
        "kendall_b": pytest.approx(stats.kendalltau(predicted, human, variant="b").statistic),
        "kendall_c": pytest.approx(stats.kendalltau(predicted, human, variant="c").statistic),
        "spearman": pytest.approx(stats.spearmanr(predicted, human).statistic),
        "pearson": pytest.approx(stats.pearsonr(predicted, human).statistic),
    }
    assert ours["kendall_b"] != pytest.approx(ours["kendall_c"])  # ties make b and c differ


def test_correlations_report_a_constant_vector_as_nan() -> None:
    result = correlations([1.0, 1.0, 1.0], [1.0, 2.0, 3.0])
    assert all(math.isnan(value) for value in result.values())


def test_rater_averaged_correlations_follow_the_emscore_protocol() -> None:
    predicted = np.array([0.123456, 0.5, 0.123449, 0.9, 0.3])
    raters = np.array([[1, 2, 1], [4, 4, 5], [2, 1, 1], [5, 5, 4], [3, 3, 3]], dtype=float)
    rounded = np.around(predicted, 4)  # 0.1235 and 0.1234: still distinct after rounding
    expected_tau = np.mean([stats.kendalltau(rounded, raters[:, j]).statistic for j in range(3)])
    expected_rho = np.mean([stats.spearmanr(rounded, raters[:, j]).statistic for j in range(3)])
    result = rater_averaged_correlations(predicted, raters)
    assert result["kendall_b"] == round(expected_tau, 4)
    assert result["spearman"] == round(expected_rho, 4)
    with pytest.raises(ValueError, match="every rater column"):
        rater_averaged_correlations(predicted, np.where(raters == 5, np.nan, raters))
