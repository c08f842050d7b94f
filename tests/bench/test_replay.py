"""``semsched.bench`` against the fake OpenAI server: counts, token times, failures, tier fields, files."""

from __future__ import annotations

import contextlib
import csv
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from semsched.bench import BenchOptions, build_report, run_replay
from semsched.bench.report import BenchReport, write_report
from semsched.core.request import Request, RequestState
from semsched.metrics import request_metrics, write_requests_csv
from semsched.sim.runner import run_policy
from semsched.workloads import Workload, build_workload
from tests.fake_openai import fake_openai_app, running_app

# short outputs and prompts keep each run well under a second
WORKLOAD = "azure-conv:max_output_tokens=12;max_prompt_tokens=40"


def workload(rate: float = 40.0, duration_s: float = 0.5, seed: int = 0) -> Workload:
    return build_workload(WORKLOAD, rate_per_s=rate, duration_s=duration_s, seed=seed)


def bench(url: str, requests: list[Request] | None = None, **options: Any) -> BenchReport:
    sent = workload().to_requests() if requests is None else requests
    return build_report(run_replay(BenchOptions(url=url, **options), sent))


def bodies(app: FastAPI) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = app.state.calls
    return calls


def test_counts_per_class_add_up_to_the_requests_sent(app: FastAPI, url: str) -> None:
    requests = workload(rate=20.0, duration_s=1.0).to_requests()
    report = bench(url, requests)
    summary = report.summary
    assert summary.overall.num_requests == len(requests) == len(bodies(app)) == len(report.requests)
    assert len(summary.by_priority) >= 2  # the default tier table draws several classes
    assert sum(c.num_requests for c in summary.by_priority.values()) == len(requests)
    assert set(summary.by_priority) == {r.priority for r in requests}
    assert summary.overall.num_finished == len(requests)
    assert summary.overall.ttft_s.count == len(requests) and summary.overall.itl_s.count > 0


def test_every_request_gets_exactly_its_output_length(app: FastAPI, url: str) -> None:
    report = bench(url)
    for request in report.requests:
        assert request.state is RequestState.FINISHED
        assert request_metrics(request).output_tokens == request.target_output_tokens
    asked = sorted(body["max_tokens"] for body in bodies(app))
    assert asked == sorted(r.target_output_tokens for r in report.requests)
    assert all(b["min_tokens"] == b["max_tokens"] and b["ignore_eos"] is True for b in bodies(app))


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
@pytest.mark.parametrize("stream", [True, False])
def test_both_endpoints_streamed_or_not(url: str, endpoint: str, stream: bool) -> None:
    requests = workload().to_requests()[:4]
    report = bench(url, requests, endpoint=endpoint, stream=stream)
    received = [request_metrics(r).output_tokens for r in report.requests]
    assert received == [r.target_output_tokens for r in requests]
    assert report.summary.overall.num_finished == len(requests)


@pytest.mark.parametrize("status", [429, 503])
def test_a_refusal_for_load_is_a_rejection_with_its_reason(app: FastAPI, url: str, status: int) -> None:
    app.state.status_code = status
    report = bench(url)
    overall = report.summary.overall
    assert overall.num_rejected == overall.num_requests == len(bodies(app)) > 0
    assert overall.num_dropped == overall.num_finished == 0
    assert dict(overall.rejections_by_reason) == {f"http {status}": overall.num_requests}
    reasons = [r.finish_reason or "" for r in report.requests]
    assert all(reason.startswith(f"http {status}: ") for reason in reasons)


def test_a_server_error_is_an_error_not_a_rejection(app: FastAPI, url: str) -> None:
    app.state.status_code = 500
    overall = bench(url).summary.overall
    assert overall.num_dropped == overall.num_requests > 0 and overall.num_rejected == 0
    assert dict(overall.rejections_by_reason) == {"http 500": overall.num_requests}


def test_a_cut_stream_is_a_broken_stream_with_the_tokens_it_gave(app: FastAPI, url: str) -> None:
    app.state.fail_after_tokens = 2
    report = bench(url)
    overall = report.summary.overall
    assert overall.num_dropped == overall.num_requests > 0
    assert dict(overall.rejections_by_reason) == {"stream broken": overall.num_requests}
    assert all(request_metrics(r).output_tokens == 2 for r in report.requests)


def test_a_timeout_ends_the_request(app: FastAPI, url: str) -> None:
    app.state.first_token_delay_s = 5.0
    report = bench(url, workload().to_requests()[:2], timeout_s=0.2)
    assert dict(report.summary.overall.rejections_by_reason) == {"timeout": 2}


def test_no_request_is_lost_when_the_server_dies_mid_run() -> None:
    app = fake_openai_app(token_delay_s=0.05)
    requests = workload().to_requests()
    with contextlib.ExitStack() as stack:
        options = BenchOptions(url=stack.enter_context(running_app(app)))
        threading.Timer(0.3, stack.close).start()  # stops the server while requests stream and arrive
        report = build_report(run_replay(options, requests))
    overall = report.summary.overall
    assert overall.num_requests == len(requests)
    assert overall.num_finished + overall.num_rejected + overall.num_dropped == len(requests)
    assert overall.num_dropped > 0
    assert set(overall.rejections_by_reason) <= {"stream broken", "connection error"}
    assert all(r.state.is_terminal for r in report.requests)


@pytest.mark.parametrize("tier_fields", ["all", "xargs", "none"])
def test_tier_fields_reach_the_server_as_asked(app: FastAPI, url: str, tier_fields: str) -> None:
    requests = workload().to_requests()
    bench(url, requests, tier_fields=tier_fields)
    by_prompt = {body["prompt"].split(":")[0]: body for body in bodies(app)}
    for request in requests:
        body = by_prompt[request.request_id]
        headers = body["_headers"]
        if tier_fields == "none":
            assert "priority" not in body and "vllm_xargs" not in body and "x-semsched-tier" not in headers
            continue
        assert headers["x-semsched-tier"] == request.tier
        assert body["vllm_xargs"]["tier"] == request.tier
        if request.ttft_slo_s is not None:
            assert body["vllm_xargs"]["ttft_slo_ms"] == pytest.approx(request.ttft_slo_s * 1000)
        if tier_fields == "all":
            assert body["priority"] == request.priority
        else:
            assert "priority" not in body


def test_requests_csv_has_the_simulators_columns(url: str, tmp_path: Path) -> None:
    load = workload()
    report = bench(url, load.to_requests())
    write_report(tmp_path, report, {"workload": WORKLOAD})
    simulated = run_policy(load, "fcfs").requests
    write_requests_csv(tmp_path / "simulated.csv", [request_metrics(r) for r in simulated], "fcfs")
    with (tmp_path / "requests.csv").open() as bench_csv, (tmp_path / "simulated.csv").open() as sim_csv:
        bench_rows, sim_rows = list(csv.DictReader(bench_csv)), list(csv.DictReader(sim_csv))
    assert list(bench_rows[0]) == list(sim_rows[0])
    assert len(bench_rows) == len(report.requests)
    assert {row["state"] for row in bench_rows} == {"finished"}
    document = json.loads((tmp_path / "bench.json").read_text())
    assert document["results"]["bench"]["overall"]["num_requests"] == len(report.requests)
    assert document["meta"]["client"]["num_sent"] == len(report.requests)
