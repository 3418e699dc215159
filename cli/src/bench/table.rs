//! The human-readable table and the progress bar.

use std::io::Write as _;

use super::common::BenchRow;

/// The rows as an aligned table.
pub fn table(rows: &[BenchRow]) -> String {
    let f =
        |v: Option<f64>, prec: usize| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.prec$}"));
    let mut out = format!(
        "{:<24} {:>6} {:>12} {:>10} {:>10} {:>9} {:>9}  note\n",
        "scenario", "store", "ops/s", "p50 µs", "p99 µs", "ratio", "cmds/op"
    );
    for r in rows {
        out.push_str(&format!(
            "{:<24} {:>6} {:>12} {:>10} {:>10} {:>9} {:>9}  {}\n",
            r.scenario,
            r.store,
            f(r.ops_per_sec, 0),
            f(r.p50_us, 1),
            f(r.p99_us, 1),
            f(r.ratio_to_floor, 2),
            f(r.commands_per_op, 2),
            r.note
        ));
    }
    out
}

/// A progress bar on stderr.
pub fn progress_bar(i: usize, n: usize, name: &str) {
    let width = 24;
    let done = width * i / n.max(1);
    eprint!(
        "\r[{}{}] {}/{} {:<26}",
        "#".repeat(done),
        ".".repeat(width - done),
        i + 1,
        n,
        name
    );
    let _ = std::io::stderr().flush();
}
