use super::format::{LEASE_PREFIX, not_a_lease};
use crate::script::{CommandResult, Db, Reply, Script, string_or_none};

/// Delete the lock only if it holds exactly this lease. Lua: `expire_unlock.lua`.
pub static EXPIRE_UNLOCK: Script = Script::new(
    "expire_unlock",
    concat!(
        include_str!("prelude.lua"),
        include_str!("expire_unlock.lua")
    ),
    native,
);

fn native(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    let lock = &keys[0];
    if string_or_none(db, lock, "lock")? == "none" {
        return Ok(Reply::Int(-1));
    }
    let cur = db.get(lock)?.unwrap_or_default();
    if !cur.starts_with(LEASE_PREFIX.as_bytes()) {
        return Err(not_a_lease());
    }
    if cur == args[0].as_bytes() {
        db.del(lock);
        if let Some(channel) = args.get(1) {
            db.publish(channel);
        }
        return Ok(Reply::Int(1));
    }
    Ok(Reply::Int(0))
}
