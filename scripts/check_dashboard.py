#!/usr/bin/env python3
"""Check that a Grafana dashboard only queries metrics a leasehold scrape has.

usage: check_dashboard.py METRICS_FILE DASHBOARD_JSON [--list]

METRICS_FILE is a Prometheus text exposition (a saved GET /metrics).
Every PromQL expression in the dashboard (panel targets, nested row panels,
annotations, and query-variable definitions such as
label_values(metric, label)) is tokenised; each metric name it selects must be
in the scrape:
  * a name seen on a sample line, or
  * derived from a `# TYPE` family: histogram -> _bucket/_sum/_count,
    summary -> name/_sum/_count, counter -> name and name_total.
The bare name of a histogram is NOT accepted (classic histograms have no such
series). Label names used in matchers and in by/without/on/ignoring/group_*
clauses must appear on at least one referenced metric's samples (job and
instance are added by Prometheus at scrape time, le exists on _bucket series).
A metric listed only by `# TYPE` without samples gets no label check.

Only the standard library: it runs before any venv exists.
Exit status: 0 when everything is present, 1 on a problem, 2 on bad usage.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field

TARGET_LABELS = {"job", "instance"}

_TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<var>\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*|\[\[[A-Za-z0-9_:.]+\]\])
  | (?P<duration>(?:\d+(?:ms|s|m|h|d|w|y))+)(?![A-Za-z0-9_.])
  | (?P<number>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<op>=~|!~|!=|==|<=|>=|[-+*/%^<>=,(){}\[\]@:])
    """,
    re.VERBOSE,
)

_GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_KEYWORDS = _GROUPING | {"offset", "bool", "and", "or", "unless", "atan2", "inf", "nan"}
# Aggregations may put the grouping clause first: `sum by (x) (expr)`.
_AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
                 "count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}


@dataclass
class Usage:
    metrics: set[str] = field(default_factory=set)
    labels: set[str] = field(default_factory=set)


class PromQLError(ValueError):
    pass


def tokenize(expr: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    while pos < len(expr):
        m = _TOKEN_RE.match(expr, pos)
        if not m:
            raise PromQLError(f"cannot tokenise at {expr[pos:pos + 20]!r}")
        pos = m.end()
        kind = m.lastgroup
        if kind not in ("ws", "comment"):
            tokens.append((kind, m.group()))
    return tokens


def _unquote(s: str) -> str:
    return s[1:-1]


def _matchers(tokens, i, usage: Usage) -> int:
    """Parse `{...}` starting at tokens[i] == '{'; return the index after '}'."""
    i += 1
    while i < len(tokens) and tokens[i] != ("op", "}"):
        kind, val = tokens[i]
        if kind == "ident":
            label = val
            if i + 2 < len(tokens) and tokens[i + 1][1] in ("=", "!=", "=~", "!~"):
                if label == "__name__" and tokens[i + 1][1] == "=" and tokens[i + 2][0] == "string":
                    usage.metrics.add(_unquote(tokens[i + 2][1]))
                else:
                    usage.labels.add(label)
                i += 3
                continue
            raise PromQLError(f"bad label matcher near {label!r}")
        if kind == "string":  # PromQL 3 quoted metric name: {"name", ...}
            usage.metrics.add(_unquote(val))
        i += 1
    if i >= len(tokens):
        raise PromQLError("unclosed '{'")
    return i + 1


def parse_promql(expr: str) -> Usage:
    """Return the metric names and label names an expression refers to."""
    tokens = tokenize(expr)
    usage = Usage()
    i, n = 0, len(tokens)
    while i < n:
        kind, val = tokens[i]
        nxt = tokens[i + 1] if i + 1 < n else (None, None)
        if kind == "ident":
            low = val.lower()
            if low in _GROUPING:
                i += 1
                if nxt == ("op", "("):
                    i += 1
                    while i < n and tokens[i] != ("op", ")"):
                        if tokens[i][0] == "ident":
                            usage.labels.add(tokens[i][1])
                        i += 1
                    i += 1
                continue
            if low in _KEYWORDS or nxt == ("op", "("):
                i += 1  # keyword, or function / aggregation call
                continue
            if low in _AGGREGATIONS and nxt[0] == "ident" and nxt[1].lower() in ("by", "without"):
                i += 1
                continue
            usage.metrics.add(val)
            i += 1
            if i < n and tokens[i] == ("op", "{"):
                i = _matchers(tokens, i, usage)
            continue
        if (kind, val) == ("op", "{"):
            i = _matchers(tokens, i, usage)
            continue
        if (kind, val) == ("op", "["):  # range or subquery: durations only
            depth = 0
            while i < n:
                if tokens[i] == ("op", "["):
                    depth += 1
                elif tokens[i] == ("op", "]"):
                    depth -= 1
                    if depth == 0:
                        break
                i += 1
            i += 1
            continue
        i += 1
    return usage


# ---------------------------------------------------------------- scrape --

_SAMPLE_RE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+\S+")
_LABEL_RE = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"(?:[^"\\]|\\.)*"')


@dataclass
class Scrape:
    types: dict[str, str] = field(default_factory=dict)
    sample_labels: dict[str, set[str]] = field(default_factory=dict)

    def names(self) -> set[str]:
        out = set(self.sample_labels)
        for fam, typ in self.types.items():
            if typ == "histogram":
                out |= {fam + "_bucket", fam + "_sum", fam + "_count"}
            elif typ == "summary":
                out |= {fam, fam + "_sum", fam + "_count"}
            elif typ == "counter":
                out |= {fam} if fam.endswith("_total") else {fam, fam + "_total"}
            else:
                out.add(fam)
        return out


def parse_scrape(text: str) -> Scrape:
    scrape = Scrape()
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split()
            if len(parts) >= 4 and parts[1] == "TYPE":
                scrape.types[parts[2]] = parts[3]
            continue
        m = _SAMPLE_RE.match(line)
        if not m:
            raise ValueError(f"not a Prometheus sample line: {line[:80]!r}")
        labels = {lm.group(1) for lm in _LABEL_RE.finditer(m.group(2) or "")}
        scrape.sample_labels.setdefault(m.group(1), set()).update(labels)
    return scrape


# ------------------------------------------------------------- dashboard --

def dashboard_queries(dash) -> list[tuple[str, str]]:
    """(where, PromQL) for every query in the dashboard JSON."""
    found: list[tuple[str, str]] = []

    def walk(node, where):
        if isinstance(node, dict):
            title = node.get("title") or node.get("name")
            here = f"{where}/{title}" if title else where
            expr = node.get("expr")
            if isinstance(expr, str) and expr.strip():
                found.append((here, expr))
            for key, value in node.items():
                if key != "expr":
                    walk(value, here)
        elif isinstance(node, list):
            for item in node:
                walk(item, where)

    for key in ("panels", "rows", "annotations"):
        walk(dash.get(key, []), key)

    for var in dash.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        q = var.get("query")
        if isinstance(q, dict):
            q = q.get("query", "")
        q = (q or "").strip()
        where = f"templating/{var.get('name')}"
        m = re.fullmatch(r"label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)", q, re.S)
        if m:
            found.append((where, m.group(1)))
            continue
        if re.fullmatch(r"label_values\(\s*[A-Za-z_][A-Za-z0-9_]*\s*\)", q) or not q:
            continue  # no metric involved
        m = re.fullmatch(r"query_result\((.*)\)", q, re.S)
        found.append((where, m.group(1) if m else q))
    return found


def check(scrape: Scrape, dash) -> tuple[list[str], set[str], int]:
    known = scrape.names()
    problems: list[str] = []
    used: set[str] = set()
    queries = dashboard_queries(dash)
    for where, expr in queries:
        try:
            usage = parse_promql(expr)
        except PromQLError as e:
            problems.append(f"{where}: cannot parse {expr!r}: {e}")
            continue
        if not usage.metrics:
            problems.append(f"{where}: no metric name found in {expr!r}")
        used |= usage.metrics
        for name in sorted(usage.metrics - known):
            hint = ""
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            if scrape.types.get(name) == "histogram":
                hint = " (a histogram: query name_bucket, name_sum or name_count)"
            elif name.endswith("_bucket") and scrape.types.get(base) == "summary":
                hint = (f" ({base} is exported as a summary; a histogram needs buckets, e.g. "
                        "metrics-exporter-prometheus set_buckets_for_metric)")
            problems.append(f"{where}: metric {name!r} is not in the scrape{hint}")
        with_samples = [m for m in usage.metrics if m in scrape.sample_labels]
        if with_samples:
            have = set(TARGET_LABELS) | {"__name__"}
            for m in with_samples:
                have |= scrape.sample_labels[m]
            for label in sorted(usage.labels - have):
                problems.append(
                    f"{where}: label {label!r} is on none of {sorted(with_samples)} in the scrape"
                )
    return problems, used, len(queries)


def main(argv: list[str]) -> int:
    args = [a for a in argv[1:] if not a.startswith("--")]
    if len(args) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    metrics_path, dash_path = args
    with open(metrics_path, encoding="utf-8") as f:
        scrape = parse_scrape(f.read())
    with open(dash_path, encoding="utf-8") as f:
        dash = json.load(f)
    problems, used, count = check(scrape, dash)
    if "--list" in argv:
        for name in sorted(used):
            print(name)
    for p in problems:
        print(f"check_dashboard: {p}", file=sys.stderr)
    if problems:
        print(f"check_dashboard: FAIL: {len(problems)} problem(s) in {dash_path} against {metrics_path}",
              file=sys.stderr)
        return 1
    print(f"check_dashboard: ok: {count} queries, {len(used)} metric names, all in {metrics_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
