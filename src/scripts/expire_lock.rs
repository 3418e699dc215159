use std::time::Duration;

use super::format::{LEASE_PREFIX, format_lease, not_a_lease, read_fence};
use crate::script::{CommandResult, Db, Reply, Script, int_arg, now_us, string_or_none, touch};

/// Take the lock if it is not held. Lua: `expire_lock.lua`.
pub static EXPIRE_LOCK: Script = Script::new(
    "expire_lock",
    concat!(include_str!("prelude.lua"), include_str!("expire_lock.lua")),
    native,
);

fn native(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    let (lock, fence_key) = (&keys[0], &keys[1]);
    let ttl = int_arg(args, 0)? as u64;
    let nonce = &args[1];
    let retention = int_arg(args, 2)? as u64;
    string_or_none(db, lock, "lock")?;
    let last = read_fence(db, fence_key)?.unwrap_or(0);
    if let Some(cur) = db.get(lock)? {
        if !cur.starts_with(LEASE_PREFIX.as_bytes()) {
            return Err(not_a_lease());
        }
        let mine = format!(":{nonce}");
        if cur.ends_with(mine.as_bytes()) {
            // A repeat: the first grant with the time it has left; re-apply the expiry, a
            // write WAIT can count (as the Lua does).
            let pttl = db.pttl(lock);
            touch(db, lock);
            return Ok(Reply::Array(vec![
                Reply::Int(1),
                Reply::Data(cur),
                Reply::Int(pttl),
            ]));
        }
        let pttl = db.pttl(lock);
        return Ok(Reply::Array(vec![
            Reply::Int(0),
            Reply::Data(cur),
            Reply::Int(pttl),
        ]));
    }
    let now = now_us(db);
    let fence = (last + 1).max(now);
    let lease = format_lease(now / 1000 + ttl, fence, nonce);
    db.set(lock, lease.clone(), Some(Duration::from_millis(ttl)));
    db.set(
        fence_key,
        fence.to_string(),
        Some(Duration::from_millis(ttl + retention)),
    );
    let pttl = db.pttl(lock);
    Ok(Reply::Array(vec![
        Reply::Int(1),
        Reply::data(lease),
        Reply::Int(pttl),
    ]))
}
