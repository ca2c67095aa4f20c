//! The goal lines of issues 6, 3, 14, 15 and 16: each goal met, missed or
//! not measured, with the figure it was judged on.

use std::fmt::Write as _;

use crate::opts::Opts;
use crate::scenario::Kind;
use crate::stats::mb;
use crate::summary::Figures;

/// The figures the goals are judged on, from every part of the run.
pub(crate) struct Inputs<'a> {
    pub(crate) opts: &'a Opts,
    pub(crate) figures: Figures,
    /// The paced phases' offered rate.
    pub(crate) paced_rate: Option<f64>,
    pub(crate) peak_rss: Option<u64>,
    pub(crate) non_typed: u64,
    /// A baseline build ran (`LOAD_BASELINE_BIN`).
    pub(crate) baseline: bool,
    pub(crate) fair_p50: Option<f64>,
    /// The server-side hand-off: p50 ms, p99 ms, hand-offs.
    pub(crate) handoff_goal: Option<(f64, f64, usize)>,
}

/// Writes the goals section into `summary`; false if a goal was missed.
pub(crate) fn write(summary: &mut String, inputs: Inputs<'_>) -> bool {
    let Inputs {
        opts,
        figures:
            Figures {
                ratio_acquire,
                added_p99,
                added_p50,
                base_acquire,
            },
        paced_rate,
        peak_rss,
        non_typed,
        baseline,
        fair_p50,
        handoff_goal,
    } = inputs;
    let mut goals_ok = true;
    let _ = writeln!(summary, "\n## Goals (issues 6, 3, 14, 15, 16)\n");
    let mut goal = |ok: Option<bool>, text: String| {
        let mark = match ok {
            Some(true) => "met    ",
            Some(false) => {
                goals_ok = false;
                "MISSED "
            }
            None => "n/a    ",
        };
        let _ = writeln!(summary, "- {mark} {text}");
    };
    let finite = |x: f64| x.is_finite().then_some(x);
    goal(
        finite(ratio_acquire).map(|r| r >= 0.5),
        format!("acquire throughput ≥ 0.5 × raw EVALSHA: {ratio_acquire:.2} ×"),
    );
    let closed = added_p99.get(&Kind::Acquire).copied().unwrap_or(f64::NAN);
    goal(finite(closed).map(|a| a <= 1.0), format!("p99 added latency ≤ 1 ms at C={}, closed loop (each side at its own saturation): {closed:.3} ms", opts.concurrency));
    let paced = added_p99.get(&Kind::Paced).copied().unwrap_or(f64::NAN);
    goal(
        finite(paced).map(|a| a <= 1.0),
        format!(
            "p99 added latency ≤ 1 ms at C={}, same offered load ({:.0}/s): {paced:.3} ms (p50 added: {:.3} ms)",
            opts.concurrency,
            paced_rate.unwrap_or(f64::NAN),
            added_p50.get(&Kind::Paced).copied().unwrap_or(f64::NAN),
        ),
    );
    goal(
        peak_rss.map(|k| (k as f64) < 50.0 * 1024.0),
        format!("peak RSS < 50 MB: {}", mb(peak_rss)),
    );
    goal(
        Some(non_typed == 0),
        format!("zero non-typed errors: {non_typed}"),
    );
    if baseline && opts.wants("acquire") {
        match base_acquire {
            // One or two rounds cannot tell 5 % on shared cores.
            Some((r, lo, hi)) => goal(
                (opts.rounds >= 3).then_some(r >= 0.95),
                format!("uncontended exclusive acquire within 5 % of the baseline (issues 14, 15): new/baseline {r:.3} (rounds {lo:.3}..{hi:.3}){}", if opts.rounds < 3 { "; judged from 3 rounds up" } else { "" }),
            ),
            None => goal(None, "acquire against the baseline not run".into()),
        }
    }
    if opts.wants("fair") {
        goal(
            fair_p50.filter(|p| p.is_finite()).map(|p| p < 2.0),
            format!(
                "fair hand-off p50 < 2 ms on loopback, waiters on two instances (issue 16): {:.3} ms",
                fair_p50.unwrap_or(f64::NAN)
            ),
        );
    }
    match handoff_goal {
        Some((p50, p99, n)) => {
            goal(
                Some(n >= 1000 && p50 < 2.0),
                format!("hand-off p50 < 2 ms over ≥ 1000 hand-offs: {p50:.3} ms over {n}"),
            );
            goal(
                Some(n >= 1000 && p99 < 10.0),
                format!("hand-off p99 < 10 ms: {p99:.3} ms"),
            );
        }
        None => goal(None, "hand-off not run".into()),
    }
    goals_ok
}
