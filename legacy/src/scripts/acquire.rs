use std::time::Duration;

use tairlock::Ttl;
use tairlock::script::{CommandError, CommandResult, Db, Reply, Script, int_arg, string_or_none};

use super::native::{digits, now, px};
use crate::wire::held_for;

/// 2^53: the integers up to here are exact in a Lua number (a double).
const LUA_EXACT: u128 = 1 << 53;

/// Take a legacy-format lock if free, or written by an old client (no TTL) and expired by server
/// time. Lua: `acquire.lua`.
pub static ACQUIRE: Script = Script::new("legacy_acquire", include_str!("acquire.lua"), native);

fn native(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    let (lock, fence_key) = (&keys[0], &keys[1]);
    string_or_none(db, lock, "lock")?;
    let fence_type = string_or_none(db, fence_key, "fence")?;
    let unit = int_arg(args, 0)? as u64;
    let (now_us, now_ms) = now(db);
    let now = now_ms / unit;
    if let Some(cur) = db.get(lock)? {
        let held = digits(&cur).ok_or_else(|| {
            CommandError::new(
                "NOTLOCK",
                "lock key holds a value that is not a legacy lock timestamp",
            )
        })?;
        // The rule WatchLock follows too: a key with a TTL is held while it exists, one without
        // (an old client's) until its timestamp passes.
        let ttl = Ttl::from_pttl(db.pttl(lock));
        if let Some(left) = held_for(held, ttl, unit, Duration::from_millis(now_ms)) {
            // As the Lua computes it, in doubles: the time until the timestamp passes is capped
            // at 2^53 ms (17-19 digit timestamps in seconds would overflow u64 here, and lose
            // precision there).
            let remaining = left.as_millis().min(LUA_EXACT - u128::from(now_ms)) as i64;
            return Ok(Reply::Array(vec![
                Reply::Int(0),
                Reply::Data(cur),
                Reply::Int(remaining),
            ]));
        }
    }
    let mut last = 0;
    if fence_type == "string" {
        let raw = db.get(fence_key)?.unwrap_or_default();
        last = digits(&raw).ok_or_else(|| {
            CommandError::new(
                "NOTLOCK",
                "fence key holds a value that is not a fencing token",
            )
        })?;
    }
    let fence = (last + 1).max(now_us);
    let value = now + int_arg(args, 1)? as u64 + 1;
    let px = px(value, unit, now_ms);
    let retention = int_arg(args, 2)? as u64;
    db.set(lock, value.to_string(), Some(Duration::from_millis(px)));
    db.set(
        fence_key,
        fence.to_string(),
        Some(Duration::from_millis(px + retention)),
    );
    Ok(Reply::Array(vec![
        Reply::Int(1),
        Reply::data(value.to_string()),
        Reply::data(fence.to_string()),
        Reply::Int(db.pttl(lock)),
    ]))
}
