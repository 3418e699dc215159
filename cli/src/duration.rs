//! Durations on the command line: `250ms`, `1.5s`, `2m`, `1h`, and compound forms such as
//! `1h30m` or `1m30s`; a bare number is seconds.

use std::time::Duration;

/// The longest duration accepted: a day.
pub const MAX: Duration = Duration::from_secs(86_400);

const HINT: &str = "expected e.g. 250ms, 1.5s, 2m, 1h30m";

/// Parse a duration greater than zero and at most [`MAX`].
///
/// # Errors
///
/// A message for the user: a bad number or unit, zero, or more than a day.
pub fn parse(s: &str) -> Result<Duration, String> {
    let d = parse_any(s)?;
    if d.is_zero() {
        return Err(format!(
            "duration {:?} is out of range (must be greater than zero and at most a day)",
            s.trim()
        ));
    }
    Ok(d)
}

/// Like [`parse`], but zero is allowed (`--wait 0`: a single attempt).
///
/// # Errors
///
/// As [`parse`], except for zero.
pub fn parse_or_zero(s: &str) -> Result<Duration, String> {
    parse_any(s)
}

/// A duration for people: to the millisecond under a minute (`1.25s`), else its two largest
/// units (`3m20s`, `2h5m`, `412d7h`).
pub fn show(d: Duration) -> String {
    let secs = d.as_secs();
    if secs < 60 {
        return format!("{:?}", Duration::from_millis(d.as_millis() as u64));
    }
    let units = [
        (secs / 86_400, "d"),
        (secs / 3600 % 24, "h"),
        (secs / 60 % 60, "m"),
        (secs % 60, "s"),
    ];
    let first = units.iter().position(|(n, _)| *n > 0).unwrap_or(3);
    units[first..]
        .iter()
        .take(2)
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect()
}

fn parse_any(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err(format!("empty duration: {HINT}"));
    }
    // A bare number is seconds.
    if s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return seconds(number(s, s)?, s);
    }
    let mut total = 0.0;
    let mut rest = s;
    let mut last_rank = usize::MAX;
    while !rest.is_empty() {
        let split = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("bad duration {s:?}: the last number has no unit; {HINT}"))?;
        let (num, tail) = rest.split_at(split);
        if num.is_empty() {
            return Err(format!("bad duration {s:?}: {HINT}"));
        }
        let end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(end);
        let (scale, rank) = match unit {
            "h" => (3600.0, 0),
            "m" => (60.0, 1),
            "s" => (1.0, 2),
            "ms" => (1e-3, 3),
            "us" | "µs" => (1e-6, 4),
            _ => {
                return Err(format!(
                    "bad duration unit {unit:?} in {s:?}: use h, m, s, ms or us"
                ));
            }
        };
        if last_rank != usize::MAX && rank <= last_rank {
            return Err(format!(
                "bad duration {s:?}: units must go from larger to smaller, each once (e.g. 1h30m)"
            ));
        }
        last_rank = rank;
        total += number(num, s)? * scale;
        rest = tail;
    }
    seconds(total, s)
}

fn number(num: &str, whole: &str) -> Result<f64, String> {
    num.parse::<f64>()
        .map_err(|_| format!("bad duration {whole:?}: {HINT}"))
}

fn seconds(secs: f64, whole: &str) -> Result<Duration, String> {
    if !secs.is_finite() || secs < 0.0 || secs > MAX.as_secs_f64() {
        return Err(format!(
            "duration {whole:?} is out of range (at most a day)"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_and_compound_forms_parse() {
        let ms = Duration::from_millis;
        assert_eq!(parse("250ms"), Ok(ms(250)));
        assert_eq!(parse("1.5s"), Ok(ms(1500)));
        assert_eq!(parse("2"), Ok(ms(2000)));
        assert_eq!(parse("2m"), Ok(ms(120_000)));
        assert_eq!(parse("1h"), Ok(ms(3_600_000)));
        assert_eq!(parse("1h30m"), Ok(ms(5_400_000)));
        assert_eq!(parse("1m30s"), Ok(ms(90_000)));
        assert_eq!(parse("1s250ms"), Ok(ms(1250)));
        assert_eq!(parse("100us"), Ok(Duration::from_micros(100)));
        assert_eq!(parse("24h"), Ok(MAX));
    }

    #[test]
    fn bad_durations_are_refused_with_a_message() {
        for bad in [
            "", "x", "5x", "1h30", "30m1h", "1s1s", "25h", "ms", "1..2s", "0", "0s",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(parse("0ms").unwrap_err().contains("out of range"));
        assert!(parse("30m1h").unwrap_err().contains("larger to smaller"));
    }

    #[test]
    fn durations_show_their_two_largest_units() {
        assert_eq!(show(Duration::from_millis(1250)), "1.25s");
        assert_eq!(show(Duration::from_secs(200)), "3m20s");
        assert_eq!(show(Duration::from_secs(7200 + 300 + 9)), "2h5m");
        assert_eq!(show(Duration::from_secs(3600)), "1h");
        assert_eq!(
            show(Duration::from_secs(412 * 86_400 + 7 * 3600 + 5)),
            "412d7h"
        );
    }

    #[test]
    fn zero_is_a_wait_of_one_attempt() {
        assert_eq!(parse_or_zero("0"), Ok(Duration::ZERO));
        assert_eq!(parse_or_zero("0s"), Ok(Duration::ZERO));
        assert!(parse_or_zero("-1s").is_err());
    }
}
