"""Tests for check_dashboard.py: run with `python3 -m unittest discover -s scripts -p 'test_*.py'`."""

import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import check_dashboard as cd  # noqa: E402

FIXTURE = os.path.join(HERE, "testdata", "metrics-sample.prom")
DASHBOARD = os.path.join(HERE, "..", "dashboards", "leasehold.json")

SCRAPE = """\
# HELP lh_ops_total ops
# TYPE lh_ops_total counter
lh_ops_total{verb="acquire",outcome="acquired"} 1
# HELP lh_op_seconds latency
# TYPE lh_op_seconds histogram
lh_op_seconds_bucket{verb="acquire",le="0.1"} 1
lh_op_seconds_bucket{verb="acquire",le="+Inf"} 1
lh_op_seconds_sum{verb="acquire"} 0.01
lh_op_seconds_count{verb="acquire"} 1
# HELP lh_waiters waiters
# TYPE lh_waiters gauge
lh_waiters 0
# TYPE lh_described_only gauge
"""


def dash(*exprs, var_query=None):
    d = {"panels": [{"type": "row", "title": "r", "panels": [
        {"title": f"p{i}", "targets": [{"expr": e}]} for i, e in enumerate(exprs)]}]}
    if var_query is not None:
        d["templating"] = {"list": [{"name": "v", "type": "query", "query": var_query}]}
    return d


def problems(*exprs, var_query=None):
    return cd.check(cd.parse_scrape(SCRAPE), dash(*exprs, var_query=var_query))[0]


class ParsePromQL(unittest.TestCase):
    def test_names_and_labels(self):
        u = cd.parse_promql(
            'histogram_quantile(0.99, sum by (verb, le) (rate(a_bucket{instance=~"$instance", verb!="x"}[$__rate_interval])))'
            ' / ignoring(outcome) group_left sum(rate(b_total[5m] offset 1h)) and on() vector(1)'
        )
        self.assertEqual(u.metrics, {"a_bucket", "b_total"})
        self.assertEqual(u.labels, {"verb", "le", "instance", "outcome"})

    def test_subquery_name_matcher_and_trailing_by(self):
        u = cd.parse_promql('max_over_time(rate({__name__="c_total", x="1"}[1m])[10m:30s]) > bool 0 '
                            '+ sum(d) without (y) + count(e) by (z)')
        self.assertEqual(u.metrics, {"c_total", "d", "e"})
        self.assertEqual(u.labels, {"x", "y", "z"})

    def test_strings_are_not_names(self):
        u = cd.parse_promql('label_replace(f, "dst", "$1", "src", "(.*)")')
        self.assertEqual(u.metrics, {"f"})


class Check(unittest.TestCase):
    def test_good(self):
        self.assertEqual(problems(
            'sum by (verb, outcome) (rate(lh_ops_total[5m]))',
            'histogram_quantile(0.5, sum by (le, verb) (rate(lh_op_seconds_bucket{job="x"}[5m])))',
            'lh_op_seconds_sum / lh_op_seconds_count', 'lh_waiters', 'lh_described_only{foo="bar"}',
            var_query={"query": "label_values(lh_waiters, instance)"}), [])

    def test_missing_metric(self):
        p = problems('rate(lh_nope_total[5m])')
        self.assertEqual(len(p), 1)
        self.assertIn("lh_nope_total", p[0])

    def test_bare_histogram_name_rejected(self):
        p = problems('rate(lh_op_seconds[5m])')
        self.assertEqual(len(p), 1)
        self.assertIn("histogram", p[0])

    def test_counter_family_without_total(self):
        s = cd.parse_scrape("# TYPE om_events counter\n")
        self.assertIn("om_events_total", s.names())

    def test_label_typo(self):
        p = problems('sum by (verbb) (rate(lh_ops_total[5m]))')
        self.assertEqual(len(p), 1)
        self.assertIn("verbb", p[0])

    def test_variable_query_checked(self):
        p = problems('lh_waiters', var_query="label_values(lh_gone, instance)")
        self.assertEqual(len(p), 1)
        self.assertIn("lh_gone", p[0])

    def test_expression_without_metric(self):
        self.assertEqual(len(problems('vector(1)')), 1)


class RepoDashboard(unittest.TestCase):
    def test_dashboard_against_contract_fixture(self):
        with open(FIXTURE, encoding="utf-8") as f:
            scrape = cd.parse_scrape(f.read())
        with open(DASHBOARD, encoding="utf-8") as f:
            d = json.load(f)
        found, used, count = cd.check(scrape, d)
        self.assertEqual(found, [])
        self.assertGreaterEqual(count, 10)
        for required in ("leasehold_lease_operations_total", "leasehold_waiters",
                         "leasehold_lease_operation_duration_seconds_bucket",
                         "leasehold_store_command_duration_seconds_bucket",
                         "leasehold_store_pool_connections", "leasehold_http_requests_total"):
            self.assertIn(required, used)

    def test_dashboard_structure(self):
        with open(DASHBOARD, encoding="utf-8") as f:
            d = json.load(f)
        self.assertEqual(d["uid"], "leasehold")
        ids = [p["id"] for p in d["panels"]]
        self.assertEqual(len(ids), len(set(ids)), "panel ids must be unique")
        for p in d["panels"]:
            self.assertIn("gridPos", p)
            for t in p.get("targets", []):
                self.assertEqual(t["datasource"]["uid"], "${datasource}", p["title"])
                self.assertTrue(t.get("refId"), p["title"])
                self.assertIn("[$__rate_interval]" if "rate(" in t["expr"] else "", t["expr"])


if __name__ == "__main__":
    unittest.main()
