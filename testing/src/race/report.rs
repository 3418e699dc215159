//! The race's table and JSON. The table's `late_dl` is the JSON's `late_deadlines`.

use std::fmt::Write as _;

use super::Row;

const COLUMNS: [&str; 11] = [
    "algorithm",
    "scenario",
    "acquisitions",
    "overlaps",
    "foreign_del",
    "stale_writes",
    "stuck",
    "late_dl",
    "handoff_p50",
    "crashes",
    "verdict",
];

/// The rows as an aligned text table.
pub fn table(rows: &[Row]) -> String {
    let cells: Vec<[String; 11]> = rows
        .iter()
        .map(|r| {
            [
                r.algorithm.clone(),
                r.scenario.clone(),
                r.acquisitions.to_string(),
                r.overlaps.to_string(),
                r.foreign_deletions.to_string(),
                r.stale_writes_accepted.to_string(),
                r.stuck_locks.to_string(),
                r.late_deadlines.to_string(),
                r.handoff_p50_us.map_or_else(
                    || "-".to_owned(),
                    |us| format!("{:.2}ms", us as f64 / 1000.0),
                ),
                r.crashes.to_string(),
                r.verdict.clone(),
            ]
        })
        .collect();
    let mut widths = COLUMNS.map(str::len);
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cols: &[String]| {
        for (i, (c, w)) in cols.iter().zip(widths).enumerate() {
            if i < 2 || i == cols.len() - 1 {
                let _ = write!(out, "{c:<w$}  ");
            } else {
                let _ = write!(out, "{c:>w$}  ");
            }
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
    };
    line(&mut out, &COLUMNS.map(str::to_owned));
    line(&mut out, &widths.map(|w| "-".repeat(w)));
    for row in &cells {
        line(&mut out, row);
    }
    out
}

/// The rows as a JSON array.
pub fn json(rows: &[Row]) -> String {
    serde_json::to_string_pretty(rows).expect("rows serialise")
}
