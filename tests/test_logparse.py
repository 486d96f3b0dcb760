"""`leakreport logs parse` against every block of the real corpus."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer import logparse

CORPUS = Path(__file__).resolve().parent / "corpus"


# Events each corpus block must yield (block named by the start of its source line).
# Reviewed by hand against the text; a block absent here must yield nothing.
EXPECTED = {
    "sglang_logs.txt": {
        "sgl-project/sglang#11970": {"kv_leak_check": 1},
        "infinigence/Semi-PD#17": {"kv_leak_check": 2},
        "sgl-project/sglang PR#13023": {"batch_stats": 8},
        "sgl-project/sglang PR#25960 (2026-05; MALFORMED": {"batch_stats": 3},
        "sgl-project/sglang#6082": {"oom": 1},
        "sgl-project/sglang PR#18039": {"kv_capacity": 6},
        "sgl-project/sglang#29575": {"kv_capacity": 1},
        "GitHub repository file containing a full SGLang": {
            "server_args": 1,
            "fast_image_processor": 1,
        },
        "GitHub repository file quoting": {"server_args": 1},
        "alibaba/Logics-Parsing#7": {"fast_image_processor": 1},
        "sgl-project/sglang#444": {"batch_stats": 1},
        "sgl-project/sglang#3909": {"batch_stats": 9},
        "sgl-project/sglang PR#22166": {"batch_stats": 4},
        "sgl-project/sglang PR#25960 (2026-05, NPU": {"batch_stats": 1},
    },
    "vllm_logs.txt": {
        "vllm-project/vllm#1935": {"batch_stats": 5},
        "vllm-project/vllm#2136": {"batch_stats": 2},
        "vllm-project/vllm#6689": {"batch_stats": 3},
        "vllm-project/vllm#12314": {"batch_stats": 6},
        "vllm-project/vllm#19680": {"batch_stats": 1},
        "vllm-project/vllm PR#37307": {"batch_stats": 5},
        "vllm-project/vllm#43295": {"batch_stats": 5},
        "noonghunna/club-3090#93": {"batch_stats": 2},
        "vllm-project/vllm#22173": {"oom": 1},
        "vllm-project/vllm#10517": {"kv_capacity": 4},
        "vllm-project/vllm#15204": {"engine_version": 1},
        "noonghunna/club-3090#1087": {"kv_capacity": 2},
        "vllm-project/vllm#32105": {"kv_capacity": 1},
    },
    "torch_oom.txt": {
        "zihaosheng/VLM-RL#12": {"oom": 1},
        "open-compass/VLMEvalKit#1021": {"oom": 1},
        "xorbitsai/inference#3230": {"oom": 1},
        "vllm-project/vllm#15598": {"oom": 1},
        "kchengiva/Shift-GCN#34": {"oom": 1},
        "pytorch/pytorch#37250 (message fragment": {"oom": 1},
        "vllm-project/vllm#783": {"oom": 1},
        "studio-dots-ai/dots.ocr#196": {"oom": 1},
        "vllm-project/vllm#12030": {"oom": 1},
    },
}


def blocks(name: str) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for line in (CORPUS / name).read_text(encoding="utf-8").splitlines():
        if line.startswith("# source:"):
            out.append((line[len("# source: ") :], []))
        elif out:
            out[-1][1].append(line)
    return out


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_block_yields_its_events(name: str) -> None:
    expected = EXPECTED[name]
    seen = set()
    for source, lines in blocks(name):
        key = next((k for k in expected if source.startswith(k)), None)
        got = Counter(logparse.parse_frame(pl.Series(lines, dtype=pl.String))["event"].to_list())
        assert dict(got) == (expected[key] if key else {}), source
        seen.add(key)
    assert seen >= set(expected), f"blocks not found: {set(expected) - seen}"


def _events(name: str) -> list[dict]:
    return list(logparse.events(logparse.parse_frame(logparse.read_lines(CORPUS / name))))


def test_fields_by_key_across_generations() -> None:
    ev = _events("sglang_logs.txt") + _events("vllm_logs.txt")
    batch = [e for e in ev if e["event"] == "batch_stats"]
    sg_new = next(e for e in batch if e["ts"] == "2025-11-11T04:28:30")
    assert sg_new["engine"] == "sglang"
    assert sg_new["fields"] == {
        "running_reqs": 2,
        "queue_reqs": 0,
        "kv_usage_ratio": 0.04,
        "gen_throughput": 86.14,
        "num_tokens": 7171,
    }
    v0 = next(e for e in batch if e["ts"] == "--12-05T19:20:57")
    assert v0["engine"] == "vllm" and v0["fields"]["queue_reqs"] == 507  # "Pending"
    assert v0["fields"]["kv_usage_ratio"] == pytest.approx(0.986)  # percent in the log, ratio out
    v1 = next(e for e in batch if e["ts"] == "--06-16T10:03:14")
    assert v1["fields"]["queue_reqs"] == 4  # "Waiting"
    old = next(
        e for e in batch if "running_reqs" in e["fields"] and e["fields"]["running_reqs"] == 9
    )
    assert old["fields"].keys() == {"running_reqs"}  # "new fill batch." era: #running_req
    leak = next(e for e in ev if e["event"] == "kv_leak_check")
    assert (
        leak["fields"]["available_size"] == 644 and leak["fields"]["max_total_num_tokens"] == 270331
    )
    assert leak["fields"]["pool"] == "token_to_kv_pool_allocator"
    args = [e for e in ev if e["event"] == "server_args"]
    assert args[0]["fields"] == {
        "mem_fraction_static": 0.908,
        "disable_fast_image_processor": False,
        "model_path": "zai-org/GLM-5-FP8",
        "tp_size": 8,
    }
    assert args[1]["fields"]["mem_fraction_static"] == 0.87  # old, truncated dump: by key
    assert [e["fields"]["version"] for e in ev if e["event"] == "engine_version"] == ["0.8.1"]


def test_oom_fields_every_generation() -> None:
    ooms = [e["fields"] for e in _events("torch_oom.txt")]
    old = ooms[0]  # "(GPU 0; 23.54 GiB total capacity; ...; 572.50 MiB free; ...)"
    assert old["tried_bytes"] == 258 * 2**20 and old["gpu"] == 0
    assert old["free_bytes"] == round(572.5 * 2**20) and old["total_bytes"] == round(23.54 * 2**30)
    new = ooms[1]
    assert new["tried_bytes"] == round(124.68 * 2**30) and new["free_bytes"] == round(19.05 * 2**30)
    assert next(o for o in ooms if o.get("gpu") == 6)["free_bytes"] == 448 * 1024  # KiB


def test_cli_jsonl_and_garbage(tmp_path) -> None:
    f = tmp_path / "mixed.log"
    f.write_bytes(
        b"\x00\xff garbage \xfe\n"
        b"[2025-02-27 04:46:39 TP0] Decode batch. #running-req: 8, #token: 62531, token usage: 0.12, gen throughput (token/s): 186.64, #queue-req: 0\n"
        + b"x"
        * 100_000
        + b"\n"
        b"partial line without newline Decode batch, #running-req: 3"
    )
    r = subprocess.run(
        [sys.executable, "-m", "leakreport", "logs", "parse", str(f)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert [(e["line"], e["event"]) for e in rows] == [(2, "batch_stats"), (4, "batch_stats")]
    assert rows[0]["fields"]["running_reqs"] == 8 and rows[1]["fields"]["running_reqs"] == 3


@settings(max_examples=50, deadline=None)
@given(st.lists(st.text(max_size=200), max_size=30))
def test_never_raises_on_arbitrary_text(lines: list[str]) -> None:
    frame = logparse.parse_frame(pl.Series(lines, dtype=pl.String))
    for e in logparse.events(frame):
        assert e["event"] in logparse.EVENT_TYPES
