"""`cli.py bench-load` on the small model: two clients at once, one turn each, speculation off and on
against a real `cli.py serve`; the report's figures add up and the answers are identical (not speed)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.models import ROOT, SMALL
from utils.bench.load_report import percentile, summarize_level

pytestmark = pytest.mark.timeout(900)


def test_two_clients_one_turn_each_add_up_and_answer_alike(tmp_path):
    out = tmp_path / "load"
    done = subprocess.run(
        [sys.executable, str(ROOT / "cli.py"), "bench-load", "--clients", "2", "--target", SMALL, "--pair", "suffix",
         "--turns", "1", "--max-tokens", "12", "--repeat", "1", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=840)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((out / "results.json").read_text())
    [level] = data["levels"]
    assert level["clients"] == 2 and [r["mode"] for r in level["rounds"]] == ["off", "on"]
    for round_ in level["rounds"]:
        assert sorted(a["client"] for a in round_["answers"]) == [0, 1]  # both clients, one turn each
        assert {a["workload"] for a in round_["answers"]} == {"edit-stack", "edit-parse"}  # one workload each
        for answer in round_["answers"]:
            assert 1 <= answer["tokens"] <= 12 and answer["text"]
            assert 0 < answer["first_token_s"] <= answer["seconds"] <= round_["seconds"]
    summary = summarize_level(level)
    for mode in ("off", "on"):
        [round_] = [r for r in level["rounds"] if r["mode"] == mode]
        figures = summary["modes"][mode]
        assert figures["tokens"] == sum(a["tokens"] for a in round_["answers"])
        assert figures["tokens_per_s"] == pytest.approx(figures["tokens"] / round_["seconds"])
        per_token = [a["per_token_s"] for a in round_["answers"] if a["per_token_s"] is not None]
        assert figures["per_token_p95_s"] == max(per_token) and set(figures["clients"]) == {0, 1}
    assert summary["speed_ratio"] == pytest.approx(summary["modes"]["on"]["tokens_per_s"]
                                                   / summary["modes"]["off"]["tokens_per_s"])
    assert (summary["compared"], summary["identical"]) == (2, 2)  # greedy: speculation changes no character
    report = (out / "report.md").read_text()
    assert "| 2 |" in report and "2/2" in report and f"{summary['speed_ratio']:.2f}x" in report
    assert done.stdout.strip().startswith("# Speculation under load")


def test_percentiles_by_nearest_rank():
    values = [0.01 * n for n in range(1, 21)]
    assert percentile(values, 0.5) == pytest.approx(0.10)
    assert percentile(values, 0.95) == pytest.approx(0.19)
    assert percentile([0.3], 0.95) == 0.3 and percentile([], 0.5) is None
