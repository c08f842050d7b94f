"""The Grafana dashboard (deploy/grafana/semsched.json) names only series that semsched exports.

Every PromQL expression of the dashboard (panel targets, nested rows included, and the template variables'
``label_values`` queries) is read by a small tokenizer that keeps metric names (identifiers outside ``{}`` and
``[]`` that are not functions, aggregation operators, keywords or the label lists of ``by``/``on``/...) with the
label names of their selectors. The exported series are the samples of the gateway's :class:`GatewayMetrics`
registry and the engine adapter's :class:`AdapterMetrics` (a counter ``x`` exports ``x_total``, a histogram
``x_bucket``, ``x_sum`` and ``x_count``), read from ``registry.collect()`` after one child of every labelled
family is made, so that each family shows its samples and their labels. A name that is not a series is refused,
with the series of its family as a hint (``x`` for ``x_total``).

The row "fleet" shows what several replicas share: Redis reachability, quota refusals, reloads and outlier
ejections (:data:`FLEET_SERIES`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from semsched.gateway.metrics import GatewayMetrics
from semsched.vllm.metrics import AdapterMetrics

GRAFANA = Path(__file__).resolve().parents[1] / "deploy" / "grafana"
DASHBOARD = GRAFANA / "semsched.json"

#: the series of the row "fleet" (gateway replicas sharing state, reloads, outlier ejection)
FLEET_SERIES = frozenset({
    "semsched_gateway_shared_state_up",
    "semsched_gateway_reloads_total",
    "semsched_gateway_outlier_ejections_total",
})
#: label values the row selects on
FLEET_LABEL_VALUES = {"semsched_gateway_rejections_total": {"reason": "quota"}}

#: labels Prometheus adds to every scraped series (target labels), allowed in any selector
TARGET_LABELS = frozenset({"instance", "job"})
AGGREGATIONS = frozenset({"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
                          "bottomk", "topk", "quantile", "limitk", "limit_ratio"})
#: keywords followed by a parenthesised list of label names
LABEL_LIST_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"}) | AGGREGATIONS

_TOKEN = re.compile(r"""
    (?P<space>\s+|\#[^\n]*)
  | (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
  | (?P<variable>\$\{[^}]*\}|\$\w+|\[\[\w+\]\])
  | (?P<number>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[a-zA-Z]*)
  | (?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<punct>.)
""", re.VERBOSE | re.DOTALL)


@dataclass(frozen=True)
class Selector:
    """A metric named in an expression and the label names its ``{}`` matches on."""

    metric: str
    labels: frozenset[str]


def _tokens(expr: str) -> list[tuple[str, str]]:
    return [(match.lastgroup or "", match.group()) for match in _TOKEN.finditer(expr)
            if match.lastgroup != "space"]


def _skip_group(tokens: list[tuple[str, str]], start: int, opening: str, closing: str) -> int:
    """The index after the token that closes the group opened at ``tokens[start]``."""
    depth = 0
    for index in range(start, len(tokens)):
        kind, text = tokens[index]
        if kind == "punct" and text == opening:
            depth += 1
        elif kind == "punct" and text == closing:
            depth -= 1
            if depth == 0:
                return index + 1
    raise ValueError(f"unbalanced {opening!r} in the expression")


def _matchers(tokens: list[tuple[str, str]]) -> tuple[frozenset[str], str | None]:
    """The label names of a ``{...}`` body, and the metric name of an ``__name__="..."`` matcher in it."""
    labels, name = set(), None
    for index, (kind, text) in enumerate(tokens):
        if kind == "name" and index + 1 < len(tokens) and tokens[index + 1][1] in ("=", "!", "~"):
            if text == "__name__":
                value = tokens[index + 2] if index + 2 < len(tokens) else ("", "")
                if tokens[index + 1][1] == "=" and value[0] == "string":
                    name = value[1][1:-1]
            else:
                labels.add(text)
    return frozenset(labels), name


def selectors(expr: str) -> list[Selector]:
    """Every metric an expression names, with the labels of its matchers, in order of appearance."""
    tokens = _tokens(expr)
    found: list[Selector] = []
    index = 0
    while index < len(tokens):
        kind, text = tokens[index]
        following = tokens[index + 1][1] if index + 1 < len(tokens) else ""
        if kind == "punct" and text == "[":
            index = _skip_group(tokens, index, "[", "]")  # a range or subquery: durations and variables only
        elif kind == "punct" and text == "{":  # a selector without a name before it
            end = _skip_group(tokens, index, "{", "}")
            labels, name = _matchers(tokens[index + 1:end - 1])
            if name is not None:
                found.append(Selector(name, labels))
            index = end
        elif kind == "name" and text in LABEL_LIST_KEYWORDS:
            index = _skip_group(tokens, index + 1, "(", ")") if following == "(" else index + 1
        elif kind == "name" and following != "(" and text not in KEYWORDS:
            labels = frozenset()
            index += 1
            if following == "{":
                end = _skip_group(tokens, index, "{", "}")
                labels, _ = _matchers(tokens[index + 1:end - 1])
                index = end
            found.append(Selector(text, labels))
        else:
            index += 1
    return found


def metric_names(expr: str) -> set[str]:
    """The metric names an expression uses."""
    return {selector.metric for selector in selectors(expr)}


_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(?P<selector>.*),\s*)?(?P<label>\w+)\s*\)\s*$", re.DOTALL)


def _variable_exprs(variable: dict[str, Any]) -> Iterator[str]:
    """The PromQL inside a query variable: ``label_values(SELECTOR, label)``'s selector, ``query_result(EXPR)``'s
    expression; other Grafana helpers (``label_names()``, ``metrics(...)``) name no series."""
    query = variable.get("query")
    text = query.get("query", "") if isinstance(query, dict) else (query or "")
    match = _LABEL_VALUES.match(text)
    if match and match.group("selector"):
        yield match.group("selector")
    elif text.strip().startswith("query_result("):
        yield text.strip()[len("query_result("):-1]


def expressions(document: dict[str, Any]) -> list[tuple[str, str]]:
    """``(where, expr)`` for every PromQL expression of a dashboard (or a document with ``panels``): panel
    targets at any depth of rows and the query variables."""
    found: list[tuple[str, str]] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            for target in panel.get("targets", []):
                if target.get("expr"):
                    found.append((f"panel {panel.get('title')!r} target {target.get('refId')}", target["expr"]))
            walk(panel.get("panels", []))

    walk(document.get("panels", []))
    for variable in document.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            found += [(f"variable {variable.get('name')!r}", expr) for expr in _variable_exprs(variable)]
    return found


def exported_series() -> dict[str, frozenset[str]]:
    """Every sample name the gateway and the engine adapter export, with its label names.

    A labelled family exports no sample before its first child, so each gets one (fresh registries: nothing
    outside this function sees them). ``_labelnames`` is prometheus-client's (it has no public accessor)."""
    gateway = GatewayMetrics()
    engine_registry = CollectorRegistry(auto_describe=True)
    engine = AdapterMetrics(engine_registry)
    series: dict[str, set[str]] = {}
    for owner, registry in ((gateway, gateway.registry), (engine, engine_registry)):
        for family in vars(owner).values():
            if isinstance(family, MetricWrapperBase) and family._labelnames:
                family.labels(*("x" for _ in family._labelnames))
        for metric in registry.collect():
            for sample in metric.samples:
                series.setdefault(sample.name, set()).update(sample.labels)
    return {name: frozenset(labels) for name, labels in series.items()}


SAMPLE_SUFFIXES = ("_bucket", "_sum", "_count", "_total", "_created")


def family_of(name: str) -> str:
    """The metric family a sample name belongs to: the name less a histogram's or a counter's suffix."""
    for suffix in SAMPLE_SUFFIXES:
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


def _hint(name: str, exported: dict[str, frozenset[str]]) -> str:
    """The series of the same family, for a name that is not one (``x`` for ``x_total``, a histogram's name)."""
    family = family_of(name)
    siblings = sorted(n for n in exported if family_of(n) == family and not n.endswith("_created"))
    return f" (its family exports {', '.join(siblings)})" if siblings else ""


def problems(document: dict[str, Any], exported: dict[str, frozenset[str]],
             allowed_missing: frozenset[str] = frozenset()) -> list[str]:
    """What a dashboard names that is not exported: unknown series (except ``allowed_missing``), and label names
    that the series does not have; empty when every expression is sound."""
    found = []
    for where, expr in expressions(document):
        parsed = selectors(expr)
        if not parsed:
            found.append(f"{where}: names no series: {expr}")
        for selector in parsed:
            if selector.metric not in exported:
                if selector.metric not in allowed_missing:
                    found.append(f"{where}: {selector.metric} is not a series semsched exports"
                                 f"{_hint(selector.metric, exported)}")
                continue
            unknown = selector.labels - exported[selector.metric] - TARGET_LABELS
            if unknown:
                found.append(f"{where}: {selector.metric} has no label {', '.join(sorted(unknown))}")
    return found


def _load(path: Path) -> dict[str, Any]:
    document = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


@pytest.fixture(scope="module")
def exported() -> dict[str, frozenset[str]]:
    return exported_series()


def test_the_tokenizer_keeps_metric_names_only() -> None:
    expr = ('histogram_quantile(0.99, sum by (tier, le) (rate(a_seconds_bucket{tier=~"$tier", x!="y{z}"}'
            '[$__rate_interval]))) / on (tier) group_left(b) sum(b_total offset 5m) > bool 1e3 '
            'and {__name__="c_total", job="j"} unless count without (d) (e[5m:1m])')
    assert selectors(expr) == [Selector("a_seconds_bucket", frozenset({"tier", "x"})), Selector("b_total",
                               frozenset()), Selector("c_total", frozenset({"job"})), Selector("e", frozenset())]
    assert metric_names("sum(rate(x_total[5m])) by (tier)") == {"x_total"}


def test_the_exported_series_are_the_sample_names(exported: dict[str, frozenset[str]]) -> None:
    assert {"tier", "le"} <= exported["semsched_gateway_ttft_seconds_bucket"]
    assert exported["semsched_gateway_shed_level"] == frozenset()
    assert {"reason", "mode"} == exported["semsched_preemptions_total"]
    # a counter's family name and a histogram's are not series
    assert "semsched_gateway_requests" not in exported and "semsched_ttft_seconds" not in exported


def test_the_checker_refuses_a_series_that_is_not_exported(exported: dict[str, frozenset[str]]) -> None:
    """A misspelt series, a counter without ``_total``, a histogram's family name and a label the series lacks are
    each refused."""
    bad = {"panels": [{"type": "row", "title": "r", "panels": [{"title": "p", "targets": [
        {"refId": "A", "expr": "sum(rate(semsched_gateway_request_total[5m]))"},
        {"refId": "B", "expr": "sum(rate(semsched_gateway_requests[5m]))"},
        {"refId": "C", "expr": "histogram_quantile(0.5, rate(semsched_gateway_ttft_seconds[5m]))"},
        {"refId": "D", "expr": 'semsched_queue_depth{tier="PREMIUM"}'},
        {"refId": "E", "expr": "sum(rate(semsched_gateway_requests_total[5m]))"},
    ]}]}]}
    found = problems(bad, exported)
    assert len(found) == 4, found
    assert "semsched_gateway_request_total is not a series" in found[0]
    assert "semsched_gateway_requests is not a series" in found[1]
    assert "its family exports semsched_gateway_requests_total" in found[1]
    assert "semsched_gateway_ttft_seconds is not a series" in found[2]
    assert "semsched_gateway_ttft_seconds_bucket" in found[2]
    assert "semsched_queue_depth has no label tier" in found[3]


def test_the_dashboard_names_only_exported_series(exported: dict[str, frozenset[str]]) -> None:
    dashboard = _load(DASHBOARD)
    assert dashboard["schemaVersion"] >= 39
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert variables["tier"]["type"] == "query"
    assert [where for where, _ in expressions(dashboard)].count("variable 'tier'") == 1
    assert problems(dashboard, exported) == []


def test_every_panel_queries_the_datasource_variable() -> None:
    def walk(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in panels:
            yield panel
            yield from walk(panel.get("panels", []))

    for document in (_load(DASHBOARD),):
        for panel in walk(document["panels"]):
            if panel["type"] != "row":
                assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
                assert panel["targets"], panel["title"]
                assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"]), panel["title"]


def test_the_panel_ids_are_unique() -> None:
    ids = [panel["id"] for panel in _load(DASHBOARD)["panels"]]
    assert len(ids) == len(set(ids))


def test_the_fleet_row_shows_the_replicas_shared_state_quotas_reloads_and_ejections() -> None:
    dashboard = _load(DASHBOARD)
    assert "fleet" in [panel["title"] for panel in dashboard["panels"] if panel["type"] == "row"]
    named = {name for _, expr in expressions(dashboard) for name in metric_names(expr)}
    assert named >= FLEET_SERIES
    for series, labels in FLEET_LABEL_VALUES.items():
        assert any(series in expr and all(f'{label}="{value}"' in expr for label, value in labels.items())
                   for _, expr in expressions(dashboard))
