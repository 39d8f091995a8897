"""benchmarks/blind_repredict.py: every committed blind row names a
calibration that is committed, and its summary counts what it says."""
import csv
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("blind_repredict", ROOT / "benchmarks" / "blind_repredict.py")
B = importlib.util.module_from_spec(spec)
spec.loader.exec_module(B)


def test_every_blind_row_names_a_committed_calibration():
    with open(B.ROWS, newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows and all((ROOT / "reports" / "calibrations" / r["calibration"]).is_file() for r in rows)


def test_the_summary_splits_by_pace_and_counts_coverage():
    rows = [{"measured_s": "1.0"}, {"measured_s": "2.0"}, {"measured_s": "4.0"}]
    preds = [{"predicted_s": 1.1, "host_paced": False, "interval_s": [0.9, 1.2]},    # |error| 10%, inside
             {"predicted_s": 1.0, "host_paced": True, "interval_s": [1.5, 1.9]},     # 50%, outside
             {"predicted_s": 4.0, "host_paced": False, "interval_s": None}]          # 0%, no interval
    s = B.summary(rows, preds)
    assert s["gpu-paced"] == (2, pytest.approx(0.05), pytest.approx(0.1))   # median of 10% and 0%
    assert s["host-paced"] == (1, 0.5, 0.5)
    assert s["coverage"] == (2, 0.5) and s["coverage, gpu-paced"] == (1, 1.0)
    assert "| gpu-paced" in B.table({"now": s})


def test_a_row_is_predicted_from_its_own_calibration():
    with open(B.ROWS, newline="") as f:
        row = next(csv.DictReader(f))
    p = B.predict_row(row, {}, draws=0)
    assert p["predicted_s"] > 0 and p["interval_s"] is None and isinstance(p["host_paced"], bool)
