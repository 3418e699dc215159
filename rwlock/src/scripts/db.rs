//! What the native script bodies share: typed reads of the lock's keys, and the readers set's
//! upkeep.

use tairlock::script::{CommandError, CommandResult, Db};

/// `TYPE key` must be `none` or `want`; `what` names the key in the error, as the Lua does.
pub(crate) fn typed(db: &mut Db, key: &str, want: &str, what: &str) -> CommandResult<bool> {
    match db.key_type(key) {
        "none" => Ok(false),
        t if t == want => Ok(true),
        other => Err(CommandError::new(
            "WRONGTYPE",
            format!("{what} key holds a {other}"),
        )),
    }
}

/// The writer key's value, checked to be a lease (`NOTLOCK` otherwise); `None` when absent.
pub(crate) fn writer_lease(db: &mut Db, key: &str) -> CommandResult<Option<Vec<u8>>> {
    let value = db.get(key)?;
    match value {
        Some(v) if !v.starts_with(tairlock::scripts::LEASE_PREFIX.as_bytes()) => {
            Err(CommandError::new(
                "NOTLOCK",
                "writer key holds a value that is not a tairlock lease",
            ))
        }
        other => Ok(other),
    }
}

/// The intent key's value, checked to be a nonce (`NOTLOCK` otherwise); `None` when absent.
pub(crate) fn intent(db: &mut Db, key: &str) -> CommandResult<Option<Vec<u8>>> {
    let value = db.get(key)?;
    match value {
        Some(v) if v.is_empty() || !v.iter().all(u8::is_ascii_hexdigit) => Err(CommandError::new(
            "NOTLOCK",
            "intent key holds a value that is not a writer intent",
        )),
        other => Ok(other),
    }
}

/// `string.sub(value, -#(':' .. nonce)) == ':' .. nonce`.
pub(crate) fn ends_with_nonce(value: &[u8], nonce: &str) -> bool {
    let mine = format!(":{nonce}");
    value.ends_with(mine.as_bytes())
}

/// `ZREMRANGEBYSCORE readers -inf (now`: drop every reader whose lease has passed.
pub(crate) fn reap(db: &mut Db, readers: &str, now_ms: u64) -> CommandResult<()> {
    db.zremrangebyscore(readers, f64::NEG_INFINITY, now_ms as f64 - 0.5)?;
    Ok(())
}

/// `ZADD readers expiry nonce`, then stretch the set's TTL to cover `lease`.
pub(crate) fn add_reader(
    db: &mut Db,
    readers: &str,
    nonce: &str,
    expiry: u64,
    lease: u64,
) -> CommandResult<()> {
    db.zadd(readers, expiry as f64, nonce.as_bytes())?;
    if db.pttl(readers) < lease as i64 {
        db.pexpire(readers, std::time::Duration::from_millis(lease));
    }
    Ok(())
}

/// The time a reader's lease ending at `expiry` has left at `now_ms`, never past the readers
/// set's own expiry: the scripts' `left`, the remaining time a grant or renewal reports.
pub(crate) fn reader_left(db: &mut Db, readers: &str, expiry: u64, now_ms: u64) -> i64 {
    let left = expiry as i64 - now_ms as i64;
    match db.pttl(readers) {
        set if set >= 0 && set < left => set,
        _ => left,
    }
}

/// A fair writer's entry in the waiters hash: (lease end ms, lease ms, wake channel).
pub(crate) fn waiter_entry(raw: &[u8]) -> Option<(u64, u64, String)> {
    let text = std::str::from_utf8(raw).ok()?;
    let mut parts = text.splitn(3, ':');
    let ends = parts.next()?.parse().ok()?;
    let wl = parts.next()?.parse().ok()?;
    Some((ends, wl, parts.next()?.to_owned()))
}

/// A lease's fencing token, as Lua's `string.match(lease, '^tl1:%d+:(%d+):')`: `None` when the
/// value does not have that shape.
pub(crate) fn lease_fence(lease: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(lease).ok()?;
    let mut parts = text.strip_prefix("tl1:")?.splitn(3, ':');
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    let expiry = parts.next()?;
    let fence = parts.next()?;
    parts.next()?;
    (digits(expiry) && digits(fence))
        .then(|| fence.parse().ok())
        .flatten()
}
