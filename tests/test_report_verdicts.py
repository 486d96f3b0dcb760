"""What the two pages say at the top, on documents made to the point: an incomplete
analysis never reads as healthy, a critical finding is not green, the fleet page counts
one kind of "leaking" everywhere, links and anchors are safe and unique."""

from __future__ import annotations

import re

from analyzer.findings import Finding, FindingsDocument, GpuSeries, HostInfo, RunInfo, host_reason
from analyzer.fleet import build
from reports.fleet import render_fleet
from reports.render import render_report

FIXED = "2026-12-01T00:00:00Z"


def _doc(hosts: list[str], findings: list[Finding] | None = None) -> FindingsDocument:
    run = RunInfo(
        bucket="b", since=None, until=None, hosts=[], generated_at=FIXED, analyzer_version="0"
    )
    doc = FindingsDocument(run=run, hosts=[HostInfo(host=h) for h in hosts])
    t = [1_764_000_000.0 + 60 * k for k in range(5)]
    used = [40 << 30] * 5
    doc.series = [GpuSeries(h, 0, "NVIDIA H100", 80 << 30, t, used, used) for h in hosts]
    doc.findings = findings or []
    return doc


def _finding(rule: str, category: str, severity: str, host: str, **evidence: object) -> Finding:
    return Finding(rule, category, severity, host, 0, None, None, None, f"{rule} on {host}",
                   dict(evidence), "Restart the server.")  # fmt: skip


def _verdict(html: str) -> tuple[str, str]:
    m = re.search(r'<p class="verdict (\w+)" id="verdict">([^<]*)</p>', html)
    assert m, "no verdict line"
    return m.group(1), m.group(2)


def test_an_incomplete_analysis_is_not_green_and_says_why_on_both_pages() -> None:
    doc = _doc(["memonly"])
    why = host_reason(
        "memonly", "idle windows cannot be told on GPU 0: leak or cache is not judged"
    )
    doc.run.incomplete = [why]
    html = render_report(doc, generated_at=FIXED)
    cls, line = _verdict(html)
    assert cls == "bad" and "incomplete" in line, line
    assert why in html and html.index('id="not-checked"') < html.index('id="hosts"')
    assert "not fully checked" in html  # the host's own row says it too
    page = render_fleet(build("2026-W48", doc), generated_at=FIXED)
    assert why in page and 'id="not-checked"' in page
    assert "No GPU leaks this week in what could be checked" in page
    doc.run.incomplete = []  # the same document, complete: green, and no block
    cls, line = _verdict(render_report(doc, generated_at=FIXED))
    assert cls == "good" and line == "No leak found on 1 GPU.", line


def test_a_critical_finding_is_not_a_green_headline() -> None:
    doc = _doc(
        ["full"], [_finding("MT001", "memory.threshold", "critical", "full", restart_now=True)]
    )
    cls, line = _verdict(render_report(doc, generated_at=FIXED))
    assert cls == "bad" and "Action needed now on 1 GPU" in line, line


def test_no_data_is_not_green() -> None:
    doc = _doc([])
    cls, line = _verdict(render_report(doc, generated_at=FIXED))
    assert cls == "bad" and line.startswith("No data in scope"), line


def test_only_http_references_become_links() -> None:
    f = _finding("GM001", "leak.gpu", "warning", "h")
    f.references = ["javascript:alert(1)", "https://example.org/a", " JaVaScRiPt:alert(2)"]
    html = render_report(_doc(["h"], [f]), generated_at=FIXED)
    hrefs = re.findall(r'href="([^"#][^"]*)"', html)
    assert hrefs == ["https://example.org/a"], hrefs
    assert "javascript:alert(1)" in html  # still shown, as text


def test_hosts_that_read_alike_get_their_own_sections() -> None:
    """``a.b`` and ``a_b`` (and two non-ASCII names) made safe read alike; each summary
    row must still lead to its own host's section."""
    hosts = ["a.b", "a_b", "gpu-α", "gpu-β"]
    doc = _doc(hosts, [_finding("GM001", "leak.gpu", "warning", h) for h in hosts])
    html = render_report(doc, generated_at=FIXED)
    ids = re.findall(r'<section class="gpu" id="([^"]+)"', html)
    assert len(ids) == len(set(ids)) == 4
    for host in hosts:
        (href,) = re.findall(rf'<a href="#([^"]+)"><strong>{re.escape(host)}</strong>', html)
        section = html[html.index(f'id="{href}"') :]
        assert re.match(rf'id="{href}">\s*<h2>.*{re.escape(host)} · GPU 0', section), host


def test_the_fleet_page_counts_one_kind_of_leaking() -> None:
    """An OOM seen only in the log is ranked as a leaking GPU: the header, the cohort and
    the week's changes count that host too."""
    doc = _doc(["logonly", "fine"], [_finding("OE001", "oom.event", "critical", "logonly")])
    view = build("2026-W48", doc)
    assert [r.host for r in view.ranking] == ["logonly"]
    assert view.affected_hosts == 1 and sum(c.affected_hosts for c in view.cohorts) == 1
    assert [(c.host, c.status) for c in view.changes] == [("logonly", "new")]
    assert "1 host leaking" in render_fleet(view, generated_at=FIXED)


def test_a_host_ram_rate_is_not_ranked_as_a_gpu_leak_rate() -> None:
    doc = _doc(
        ["rss"], [_finding("HR001", "leak.host_rss", "warning", "rss", rate_mib_per_h=246.0)]
    )
    (row,) = build("2026-W48", doc).ranking
    assert row.leak_mib_per_h is None and row.host_ram_mib_per_h == 246.0
    assert "host RAM 246 MiB/h" in render_fleet(build("2026-W48", doc), generated_at=FIXED)


def test_evidence_values_read_as_what_they_are() -> None:
    from reports.text import format_value

    assert (
        format_value("pid", 4600) == "4600" and format_value("pids", [4600, 4601]) == "4600, 4601"
    )
    assert format_value("rate_mib_per_h_before", 2203.4) == "2,203.4 MiB/h"
    assert format_value("pods", ["ns/a", "ns/b"]) == "ns/a, ns/b"
    assert format_value("growth_mib", 1234) == "1,234 MiB"  # quantities keep their separator


def test_a_host_whose_files_were_left_out_is_not_no_leak_found() -> None:
    """The top verdict was not green, but the host's own card still read "no leak found"
    when files of its folder (or of no host folder) were left out."""
    doc = _doc(["gpu/1", "b"])
    doc.run.incomplete = [
        "file left out: /bk/processes/date=2026-11-30/host=gpu%2F1/p.parquet: truncated"
    ]
    cards = _cards(render_report(doc, generated_at=FIXED))
    assert "not fully checked" in cards["gpu/1"] and "not fully checked" not in cards["b"]
    assert "no leak found" in cards["b"]
    doc.run.incomplete = ["file left out: /bk/processes: a folder that is a file (any host's)"]
    cards = _cards(render_report(doc, generated_at=FIXED))
    assert all("not fully checked" in c for c in cards.values()), cards


def _cards(html: str) -> dict[str, str]:
    """Each host's row of the hosts table: host name -> its verdict cell's text."""
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", html.split('id="hosts"', 1)[1], flags=re.S)
    out = {}
    for r in rows:
        cells = [
            re.sub(r"<[^>]+>", "", c).strip()
            for c in re.findall(r"<td[^>]*>(.*?)</td>", r, flags=re.S)
        ]
        if cells:
            out[cells[0]] = " ".join(cells)
    return out


def test_a_findings_document_with_a_wrong_field_is_named_where() -> None:
    """An unknown or missing field gave 'not a findings document (TypeError:
    Finding.__init__() got ...)' with no place; now the place and the field."""
    import json

    import pytest

    doc = _doc(["a", "b"], [_finding("GM001", "leak.gpu", "warning", "b", rate=1)] * 2)
    good = json.loads(doc.to_json())
    assert FindingsDocument.from_dict(json.loads(doc.to_json())).to_json() == doc.to_json()
    cases = {
        "findings[1]: unknown field(s) 'extra'": lambda d: d["findings"][1].update(extra=1),
        "hosts[0]: missing 1 required": lambda d: d["hosts"][0].pop("host"),
        "series: expected a list, got dict": lambda d: d.update(series={}),
        "run: unknown field(s) 'nope'": lambda d: d["run"].update(nope=1),
    }
    for said, mutate in cases.items():
        bad = json.loads(json.dumps(good))
        mutate(bad)
        with pytest.raises(ValueError) as e:
            FindingsDocument.from_json(json.dumps(bad))
        assert str(e.value).startswith(said), (said, str(e.value))


def test_data_without_gpu_samples_is_not_called_no_data() -> None:
    """A bucket of allocator-probe records alone: AP001/AP002 ran clean, yet the page said
    "No data in scope: nothing could be checked"."""
    from analyzer.findings import RuleStatus

    doc = _doc([])
    doc.run.tables = {"allocator_samples": 3}
    doc.run.rules = [
        RuleStatus("AP001", "a", "default", "clean"),
        RuleStatus("GM001", "g", "default", "skipped"),
    ]
    cls, line = _verdict(render_report(doc, generated_at=FIXED))
    assert cls == "bad" and line.startswith("No finding from the 1 rule that could run"), line
    assert "GPU memory was not checked" in line and "incomplete" not in line
    doc.run.incomplete = ["file left out: /b/gpu_samples/date=2026-11-30/host=a/f.parquet: x"]
    cls, line = _verdict(render_report(doc, generated_at=FIXED))
    assert "The analysis is incomplete: 1 thing could not be checked" in line, line


def test_the_oom_estimate_past_the_forecast_counts_from_the_peak_not_the_idle_baseline() -> None:
    """Found by a user's pass: where only GM001 fired (an OOM beyond OF001's window), the
    pages counted from the idle baseline and put the OOM late by the working set over the
    rate: 40 GiB peak, 38 GiB idle, 80 GiB total, 200 MiB/h gives 204.8 h, not 215 h."""
    from analyzer.verdicts import gpu_verdicts

    gm = _finding("GM001", "leak.gpu", "warning", "h", rate_mib_per_h=200.0,
                  last_idle_mib=38 * 1024.0, total_mib=80 * 1024.0)  # fmt: skip
    (v,) = gpu_verdicts(_doc(["h"], [gm]))
    assert (v.oom_rule, v.hours_to_oom) == ("GM001", 204.8)
    bare = _doc(["h"], [gm])
    bare.series = []  # no chart series: the idle baseline is all there is
    (v,) = gpu_verdicts(bare)
    assert v.hours_to_oom == 215.04
