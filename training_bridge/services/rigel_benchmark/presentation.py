"""An evaluation's result as rows for a page and as plain text for the command."""

from __future__ import annotations

from typing import Any

from training_bridge.services.rigel_benchmark.plan import FOIL_SETTINGS

STATISTIC_LABELS = (
    ("kendall_b", "tau_b"),
    ("spearman", "rho"),
    ("kendall_c", "tau_c"),
    ("pearson", "Pearson"),
)


def result_tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The correlation blocks as rows for a page or a text table: one block per protocol, the
    runs first, then the standard metrics, then the paper's figure (VATEX-EVAL)."""
    labels = result.get("labels", {})
    paper = (result.get("paper") or {}).get("vatex_eval", {})
    tables = []
    blocks = result.get("protocols") or {}
    for protocol in result.get("protocol_order") or list(blocks):
        block = blocks[protocol]
        rows = []
        for name in block.get("order") or list(block.get("rows", {})):
            row = block["rows"][name]
            label = labels.get(name, name)
            if row.get("protocol_mismatch"):
                label += f" [MISMATCH: trained {row['protocol_mismatch']}]"
            rows.append(
                {
                    "key": name,
                    "label": label,
                    "values": [row.get(key) for key, _ in STATISTIC_LABELS],
                    "unavailable": row.get("unavailable"),
                }
            )
        if protocol in paper:
            rows.append(
                {
                    "key": "paper",
                    "label": "paper: Rigel (Qwen3-VL-2B), Table 2",
                    "values": [paper[protocol].get(key) for key, _ in STATISTIC_LABELS],
                    "unavailable": None,
                }
            )
        tables.append({"protocol": protocol, "rows": rows, "notes": block.get("notes", [])})
    return tables


def foil_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """FOIL accuracy: one row per metric, one column per setting."""
    foil = result.get("foil")
    if not foil:
        return []
    labels = result.get("labels", {})
    names: list[str] = []
    for setting in FOIL_SETTINGS:
        block = foil["settings"].get(setting, {})
        for name in block.get("order") or list(block.get("rows", {})):
            if name not in names:
                names.append(name)
    rows = []
    for name in names:
        cells = []
        for setting in FOIL_SETTINGS:
            row = foil["settings"].get(setting, {}).get("rows", {}).get(name, {})
            cells.append(row.get("accuracy"))
        rows.append({"key": name, "label": labels.get(name, name), "values": cells})
    published = [
        (foil["settings"].get(setting, {}).get("published") or {}).get("accuracy")
        for setting in FOIL_SETTINGS
    ]
    if any(value is not None for value in published):
        rows.append(
            {
                "key": "paper",
                "label": "Rigel paper, Table 2 (published)",
                "values": published,
                "published": True,
            }
        )
    return rows


def result_text(result: dict[str, Any]) -> str:
    """The evaluation as plain text (the command's output without --json)."""

    def cell(value: Any) -> str:
        return f"{value:>8.2f}" if isinstance(value, (int, float)) else f"{'n/a':>8}"

    lines = [
        f"campaign {result['campaign']}: {result.get('candidates', '-')} candidates on "
        f"{result.get('clips', '-')} clips; correlation {result['correlation']}"
        + (
            f" over rater slots {', '.join(result['rater_slots'])}"
            if result.get("rater_slots")
            else ""
        )
    ]
    if result.get("protocol_mismatch"):
        lines.append(
            f"PROTOCOL MISMATCH ALLOWED: {len(result['protocol_mismatch'])} run/protocol pair(s) "
            "scored with a run trained in the other setting (marked [MISMATCH]); those rows are "
            "not comparable with the paper's"
        )
    header = f"{'metric':<34}" + "".join(f"{label:>8}" for _, label in STATISTIC_LABELS)
    for table in result_tables(result):
        lines += ["", f"[{table['protocol']}]  (x100)", header]
        for row in table["rows"]:
            if row["unavailable"]:
                lines.append(f"{row['label']:<34}  unavailable: {row['unavailable']}")
            else:
                lines.append(f"{row['label']:<34}" + "".join(cell(v) for v in row["values"]))
        lines += [f"  note: {note}" for note in table["notes"]]
    foil = result.get("foil")
    if foil:
        lines += [
            "",
            f"[{foil.get('benchmark_label', 'foil')}]  accuracy %, "
            + (f"{foil['videos']} videos, " if foil.get("videos") else "")
            + f"{foil['pairs']} pairs ({foil['source']}"
            + (f", seed {foil['seed']}" if foil.get("seed") is not None else "")
            + ")",
            f"{'metric':<34}" + "".join(f"{s:>16}" for s in FOIL_SETTINGS),
        ]
        for row in foil_rows(result):
            lines.append(
                f"{row['label']:<34}"
                + "".join(
                    f"{v:>16.2f}" if isinstance(v, (int, float)) else f"{'n/a':>16}"
                    for v in row["values"]
                )
            )
        for setting in FOIL_SETTINGS:
            lines += [f"  note: {note}" for note in foil["settings"][setting]["notes"]]
    lines.append(f"({result.get('seconds', 0):.1f} s)")
    return "\n".join(lines)
