"""`evaluate_rigel`: finished training runs scored on an imported benchmark campaign (e.g.
VATEX-EVAL) the way the paper reports them (Table 2), with the standard metrics in the same table.

- Correlation protocols ``reference-free``, ``1-ref``, ``all-refs`` (`rigel.benchmark`): every
  candidate of the campaign scored by each run; the correlations are computed by
  `training_bridge.metrics.benchmark.correlation_row` on the campaign's `BenchmarkSet` (the one
  `evaluate_metrics` builds), so Rigel's row and the standard metrics' rows come from the same code:
  with ``correlation="emscore"`` (the default) the per-rater protocol of the EMScore paper (scores
  rounded to 4 decimals, Kendall tau_b / tau_c, Spearman and Pearson against each imported rater
  slot, averaged), with ``"default"`` against each candidate's aggregate score.
- ``foil``: ActivityNet-FOIL as published (`rigel.foil`): a user's FOIL file, normally the
  paragraph file `convert_activitynet_foil` writes (each sentence scored on its segment clip, a
  paragraph's score the mean of its sentences', a video right when its correct paragraph scores
  strictly higher), or plain pairs; for each run and each standard metric, reference-free and
  reference-based. The paper's ActivityNet-FOIL accuracies stand beside a converted
  ActivityNet-FOIL file only.
- ``noun-swap``: Lepus's own benchmark, foils generated from the campaign's references (one noun
  swapped), scored the same way pair by pair, with no published figure beside it.

A model per protocol: a run is scored only under the protocols of the setting it was trained in
(reference-free runs under ``reference-free`` and FOIL's reference-free setting, reference-based
runs under ``1-ref``, ``all-refs`` and FOIL's reference-based setting), as the paper gives each
setting its own prompt and model (Section 3: R empty in the reference-free setting; Appendix G, one
prompt per setting). A protocol that no given run was trained for is refused, naming the runs and
the way out (`train --reference-free`); ``allow_protocol_mismatch`` scores every run under every
protocol anyway and labels each mismatched row, note and the result (``protocol_mismatch``).

Leakage is refused: a benchmark clip in a run's train or validation split (the data it was trained
and selected on) fails the evaluation, naming how many. torch is imported only inside the
functions that score (web processes create jobs; a `training` worker runs them).
"""

from __future__ import annotations

from training_bridge.services.rigel_benchmark.campaign import campaign_data
from training_bridge.services.rigel_benchmark.evaluation import rigel_benchmark_evaluate
from training_bridge.services.rigel_benchmark.job import (
    FOIL_MAX_BYTES,
    RIGEL_EVALUATION_TASK,
    rigel_evaluation_create,
    rigel_evaluation_execute,
)
from training_bridge.services.rigel_benchmark.plan import (
    CORRELATIONS,
    FOIL_SETTINGS,
    PROTOCOL_CHOICES,
    Progress,
    RigelEvaluationError,
    check_foil_inputs,
    parse_protocols,
    runs_for,
)
from training_bridge.services.rigel_benchmark.presentation import (
    foil_rows,
    result_tables,
    result_text,
)

__all__ = [
    "CORRELATIONS",
    "FOIL_MAX_BYTES",
    "FOIL_SETTINGS",
    "PROTOCOL_CHOICES",
    "RIGEL_EVALUATION_TASK",
    "Progress",
    "RigelEvaluationError",
    "campaign_data",
    "check_foil_inputs",
    "foil_rows",
    "parse_protocols",
    "result_tables",
    "result_text",
    "rigel_benchmark_evaluate",
    "rigel_evaluation_create",
    "rigel_evaluation_execute",
    "runs_for",
]
