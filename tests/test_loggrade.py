"""The grader: the parser against every hand-labelled corpus line, and the grader's own rules."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from analyzer import loggrade, logparse

CORPUS = Path(__file__).resolve().parent / "corpus"


def test_corpus_per_family_found_right_no_false_events_no_crashes() -> None:
    g = loggrade.grade([CORPUS / "labels"])
    fams = g.families()
    assert set(fams) == {"sglang", "vllm", "torch"}
    problems = [f"{Path(f.log).name}: {p}" for f in g.files for p in f.problems]
    for fam, t in fams.items():
        assert t["labelled"] >= 40, fam  # each family is graded on a real number of lines
        assert t["crashes"] == 0, (fam, problems)
        assert t["false_events"] == 0, (fam, problems)
        assert t["right"] >= 0.98 * t["labelled"], (fam, problems)
        assert t["found"] >= t["right"]
    assert "family torch" in g.table()


def _write(tmp: Path, log_lines: list[str], labels: list[dict], name: str = "sglang_x") -> Path:
    (tmp / "labels").mkdir(exist_ok=True)
    (tmp / f"{name}.txt").write_text("\n".join(log_lines) + "\n", encoding="utf-8")
    p = tmp / "labels" / f"{name}.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in labels), encoding="utf-8")
    return p


LEAK = "ValueError: req_to_token_pool memory leak detected! available_size=3756, total_size=3757"
OOM = "RuntimeError: CUDA error: out of memory"


def test_a_wrong_field_a_miss_and_a_false_event_are_each_counted(tmp_path) -> None:
    labels = _write(
        tmp_path,
        [LEAK, "nothing here", OOM],
        [
            {
                "line": 1,
                "event": "kv_leak_check",
                "fields": {
                    "pool": "req_to_token_pool",
                    "available_size": 1,
                    "max_total_num_tokens": 3757,
                },
            },
            {"line": 2, "event": "oom", "fields": {}},
        ],
    )
    [f] = loggrade.grade([labels]).files
    assert (f.labelled, f.found, f.right, f.false_events) == (2, 1, 0, 1)
    assert f.family == "sglang"
    assert any("line 2: oom not found" in p for p in f.problems)
    assert any("line 3: false oom" in p for p in f.problems)
    assert not loggrade.grade([labels]).perfect


def test_right_when_fields_equal_exactly_and_ts_matches(tmp_path) -> None:
    line = "[2025-02-27 04:46:39 TP0] " + LEAK
    fields = {"pool": "req_to_token_pool", "available_size": 3756, "max_total_num_tokens": 3757}
    ok = _write(
        tmp_path,
        [line],
        [{"line": 1, "event": "kv_leak_check", "fields": fields, "ts": "2025-02-27T04:46:39"}],
    )
    assert loggrade.grade([ok]).perfect
    short = dict(fields)
    del short["available_size"]  # a field the parser found but the label lacks: not right
    _write(tmp_path, [line], [{"line": 1, "event": "kv_leak_check", "fields": short}])
    assert loggrade.grade([ok]).files[0].right == 0
    _write(
        tmp_path,
        [line],
        [{"line": 1, "event": "kv_leak_check", "fields": fields, "ts": "2025-02-27T04:46:40"}],
    )
    assert loggrade.grade([ok]).files[0].right == 0


def test_bad_labels_are_errors_naming_file_and_line(tmp_path) -> None:
    p = _write(tmp_path, [OOM], [{"line": 1, "event": "oom", "fields": {}}])
    p.write_text(p.read_text() + "{not json\n", encoding="utf-8")
    with pytest.raises(loggrade.LabelError, match=r"sglang_x\.jsonl:2: not JSON"):
        loggrade.grade([p])
    p.write_text('{"line": 0, "event": "oom"}\n', encoding="utf-8")
    with pytest.raises(loggrade.LabelError, match=r"sglang_x\.jsonl:1: 'line'"):
        loggrade.grade([p])
    drift = _write(tmp_path, [OOM], [{"line": 1, "event": "oom", "fields": {}, "text": "Runtime"}])
    assert loggrade.grade([drift]).perfect
    _write(tmp_path, ["x", OOM], [{"line": 1, "event": "oom", "fields": {}, "text": "Runtime"}])
    with pytest.raises(loggrade.LabelError, match="line 1 expects a line starting 'Runtime'"):
        loggrade.grade([drift])
    orphan = tmp_path / "labels" / "nolog.jsonl"
    orphan.write_text('{"line": 1, "event": "oom"}\n', encoding="utf-8")
    with pytest.raises(loggrade.LabelError, match="no log file found"):
        loggrade.grade([orphan])
    with pytest.raises(loggrade.LabelError, match="no such labels"):
        loggrade.grade([tmp_path / "missing"])


def test_file_and_family_named_in_the_first_row(tmp_path) -> None:
    (tmp_path / "server.log").write_text(OOM + "\n", encoding="utf-8")
    p = tmp_path / "mine.jsonl"
    p.write_text(
        json.dumps(
            {"line": 1, "event": "oom", "fields": {}, "file": "server.log", "family": "torch"}
        )
        + "\n",
        encoding="utf-8",
    )
    g = loggrade.grade([p])
    assert g.perfect and g.families()["torch"]["right"] == 1


def test_a_parser_crash_is_reported_not_raised(tmp_path, monkeypatch) -> None:
    p = _write(tmp_path, [OOM], [{"line": 1, "event": "oom", "fields": {}}])

    def boom(*a, **k):
        raise RuntimeError("broken recogniser")

    monkeypatch.setattr(logparse, "parse_frame", boom)
    [f] = loggrade.grade([p]).files
    assert f.crashed == "RuntimeError: broken recogniser"
    assert loggrade.grade([p]).families()["sglang"]["crashes"] == 1


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "leakreport", "logs", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_grade_exit_codes(tmp_path) -> None:
    r = _cli("grade", str(CORPUS / "labels"))
    assert r.returncode == 0, r.stderr
    assert "family sglang" in r.stdout and "family vllm" in r.stdout and "100.0 % right" in r.stdout
    r = _cli("grade", "--json", str(CORPUS / "labels" / "torch_more.jsonl"))
    assert json.loads(r.stdout)["families"]["torch"]["right"] >= 30
    wrong = _write(tmp_path, [OOM], [{"line": 1, "event": "kv_leak_check", "fields": {}}])
    r = _cli("grade", "--show", str(wrong))
    assert r.returncode == 1 and "line 1: false oom" in r.stderr
    wrong.write_text("{broken\n", encoding="utf-8")
    r = _cli("grade", str(wrong))
    assert r.returncode == 2 and "sglang_x.jsonl:1: not JSON" in r.stderr
    r = _cli("grade", "--tz", "Nowhere/Land", str(CORPUS / "labels"))
    assert r.returncode == 2 and "Nowhere/Land" in r.stderr


def test_cli_parse_tz(tmp_path) -> None:
    f = tmp_path / "s.log"
    f.write_text("[2025-02-27 04:46:39 TP0] Decode batch. #running-req: 8\n", encoding="utf-8")
    r = _cli("parse", "--tz", "Asia/Shanghai", str(f))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ts"] == "2025-02-26T20:46:39"
    r = _cli("parse", "--tz", "Nowhere/Land", str(f))
    assert r.returncode == 2 and "Nowhere/Land" in r.stderr
