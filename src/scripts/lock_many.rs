use std::time::Duration;

use super::format::{LEASE_PREFIX, format_lease, not_a_lease, read_fence};
use crate::script::{Reply, Script, int_arg};
use crate::script::{now_us, string_or_none, touch};
use crate::store::memory::{CommandError, CommandResult, Db};

/// Take several locks at once, all or none. Lua: `lock_many.lua`.
pub static LOCK_MANY: Script = Script::new("lock_many", include_str!("lock_many.lua"), native);

fn native(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    if !keys.len().is_multiple_of(2) {
        return Err(CommandError::new("ERR", "KEYS must be lock, fence pairs"));
    }
    let ttl = int_arg(args, 0)? as u64;
    let mine = format!(":{}", args[1]);
    let retention = int_arg(args, 2)? as u64;
    let mut found = Vec::with_capacity(keys.len() / 2);
    for pair in keys.chunks(2) {
        string_or_none(db, &pair[0], "lock")?;
        string_or_none(db, &pair[1], "fence")?;
        let last = read_fence(db, &pair[1])?.unwrap_or(0);
        let cur = db.get(&pair[0])?;
        if cur
            .as_ref()
            .is_some_and(|c| !c.starts_with(LEASE_PREFIX.as_bytes()))
        {
            return Err(not_a_lease());
        }
        found.push((last, cur));
    }
    for (i, (_, cur)) in found.iter().enumerate() {
        if let Some(cur) = cur
            && !cur.ends_with(mine.as_bytes())
        {
            let pttl = db.pttl(&keys[2 * i]);
            return Ok(Reply::Array(vec![
                Reply::Int(0),
                Reply::Int(i as i64 + 1),
                Reply::Data(cur.clone()),
                Reply::Int(pttl),
            ]));
        }
    }
    let now = now_us(db);
    let mut out = vec![Reply::Int(1)];
    for ((last, cur), pair) in found.into_iter().zip(keys.chunks(2)) {
        if let Some(cur) = cur {
            // A repeat: the first grant with the time it has left; re-apply the expiry, as the
            // Lua does.
            let pttl = db.pttl(&pair[0]);
            touch(db, &pair[0]);
            out.push(Reply::Data(cur));
            out.push(Reply::Int(pttl));
            continue;
        }
        let fence = (last + 1).max(now);
        let lease = format_lease(now / 1000 + ttl, fence, &args[1]);
        db.set(&pair[0], lease.clone(), Some(Duration::from_millis(ttl)));
        db.set(
            &pair[1],
            fence.to_string(),
            Some(Duration::from_millis(ttl + retention)),
        );
        out.push(Reply::data(lease));
        out.push(Reply::Int(db.pttl(&pair[0])));
    }
    Ok(Reply::Array(out))
}
