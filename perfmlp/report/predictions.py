"""The reader of the blind predictions a sweep writes beside its traces
(perfmlp.sweep --predict: `predictions.json`; --predict-also: another
machine file's, `predictions-<name>.json`), and whether a prediction was
blind: made no later than its run started."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

from ..safeio import read_json

PREDICTIONS = "predictions.json"  # perfmlp/sweep writes it
MORE_PREDICTIONS = "predictions-*.json"   # sweep --predict-also: another machine file's, e.g. another GPU's


def read_predictions(folder: Path | None, name: str = PREDICTIONS) -> tuple[dict | None, str]:
    """(the predictions file's content, one line about it)."""
    if folder is None:
        return None, "no trace folder"
    path = Path(folder) / name
    if not path.exists():
        return None, f"no {name} beside the traces"
    try:
        data = read_json(path.read_text())
        assert isinstance(data, dict) and isinstance(data.get("runs"), dict)
        return data, f"{path}"
    except (OSError, ValueError, AssertionError):
        return None, f"{path}: unreadable, ignored"


def more_predictions(folder: Path | None) -> list[Path]:
    """Other machine files' predictions beside the traces, by name."""
    return sorted(Path(folder).glob(MORE_PREDICTIONS)) if folder is not None else []


def _time(text: str | None) -> dt.datetime | None:
    try:
        t = dt.datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def blind_status(pred: dict | None, start: str | None) -> str:
    """"blind" when the prediction was made no later than the run's start
    (the manifest's start has whole seconds: the prediction's time is
    compared truncated to the second), else why not."""
    if pred is None:
        return "not blind (no prediction)"
    p, s = _time(pred.get("predicted_at")), _time(start)
    if p is None or s is None:
        return "not blind (no time)"
    return "blind" if p.replace(microsecond=0) <= s else "not blind (predicted after the run started)"


def run_entries(preds: dict | None, runs, starts: dict) -> list[tuple[dict | None, str]]:
    """Each run's entry in a predictions file (None: none) and its blind_status (`starts`: run id -> start)."""
    got = (preds or {}).get("runs", {})
    return [(got.get(r.run_id), blind_status(got.get(r.run_id), starts.get(r.run_id))) for r in runs]
