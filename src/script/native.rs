//! Helpers the native bodies of every crate share: each is the Rust for one idiom their Lua
//! twins use, so that both bodies read the same.

use std::time::Duration;

use super::{CommandError, CommandResult, Db};

/// `tonumber(ARGV[i + 1])` (zero-based here) as an integer, or fail like a script.
///
/// # Errors
///
/// `ERR ARGV[n] is not an integer` when the argument is missing or not an integer.
pub fn int_arg(args: &[String], i: usize) -> CommandResult<i64> {
    args.get(i)
        .and_then(|a| a.parse::<i64>().ok())
        .ok_or_else(|| CommandError::new("ERR", format!("ARGV[{}] is not an integer", i + 1)))
}

/// `TYPE key` must be `none` or `string` (and is returned); `what` names the key in the error,
/// as the Lua does: `WRONGTYPE <what> key holds a <type>`.
///
/// # Errors
///
/// `WRONGTYPE` when the key holds a hash, a list or a sorted set.
pub fn string_or_none(db: &mut Db, key: &str, what: &str) -> CommandResult<&'static str> {
    match db.key_type(key) {
        t @ ("none" | "string") => Ok(t),
        other => Err(CommandError::new(
            "WRONGTYPE",
            format!("{what} key holds a {other}"),
        )),
    }
}

/// Microseconds since the epoch, by the store's frozen clock: `t[1] * 1000000 + t[2]` of
/// `TIME`.
pub fn now_us(db: &Db) -> u64 {
    let (secs, micros) = db.time();
    secs * 1_000_000 + micros
}

/// Milliseconds since the epoch, by the store's frozen clock (`now_us` floored to ms).
pub fn now_ms(db: &Db) -> u64 {
    now_us(db) / 1000
}

/// `string.match(v, '^%d+$')`: one or more ASCII digits and nothing else.
pub fn all_digits(v: &[u8]) -> bool {
    !v.is_empty() && v.iter().all(u8::is_ascii_digit)
}

/// A repeat's write: `PEXPIRE key (PTTL key)` when the key expires, keeping its expiry. A
/// script that found its own earlier write in place makes one, so that a `WAIT` pipelined after
/// it waits for replicas that have that write.
pub fn touch(db: &mut Db, key: &str) {
    let pttl = db.pttl(key);
    if pttl > 0 {
        db.pexpire(key, Duration::from_millis(pttl as u64));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers_read_like_their_lua() {
        let mut db = Db::new();
        db.set_time(Duration::from_micros(1_234_567_891));
        assert_eq!(now_us(&db), 1_234_567_891);
        assert_eq!(now_ms(&db), 1_234_567);
        let args = ["7".to_owned(), "x".to_owned()];
        assert_eq!(int_arg(&args, 0), Ok(7));
        assert_eq!(
            int_arg(&args, 1).unwrap_err().detail(),
            "ARGV[2] is not an integer"
        );
        assert!(int_arg(&args, 2).is_err());
        assert_eq!(string_or_none(&mut db, "k", "lock"), Ok("none"));
        db.set("k", "v", Some(Duration::from_millis(50)));
        assert_eq!(string_or_none(&mut db, "k", "lock"), Ok("string"));
        db.hset("h", b"f", "v").unwrap();
        let err = string_or_none(&mut db, "h", "fence").unwrap_err();
        assert_eq!(
            (err.code(), err.detail()),
            ("WRONGTYPE", "fence key holds a hash")
        );
        assert!(all_digits(b"0123") && !all_digits(b"") && !all_digits(b"1a"));
        db.set_time(Duration::from_micros(1_234_587_891));
        touch(&mut db, "k");
        assert_eq!(db.pttl("k"), 30);
    }
}
