use super::format::{LEASE_PREFIX, not_a_lease};
use crate::script::{CommandResult, Db, Reply, Script, string_or_none};

/// Delete the lock whoever holds it, if it is one of ours. Lua: `force_unlock.lua`.
pub static FORCE_UNLOCK: Script =
    Script::new("force_unlock", include_str!("force_unlock.lua"), native);

fn native(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    let lock = &keys[0];
    if string_or_none(db, lock, "lock")? == "none" {
        return Ok(Reply::Int(-1));
    }
    let cur = db.get(lock)?.unwrap_or_default();
    if !cur.starts_with(LEASE_PREFIX.as_bytes()) {
        return Err(not_a_lease());
    }
    let grant = match keys.get(1) {
        Some(key) if string_or_none(db, key, "grant")? == "string" => {
            Some((key, super::fair::grant_record(db, key)?))
        }
        _ => None,
    };
    db.del(lock);
    if let Some((key, (nonce, channel))) = grant
        && cur.ends_with(format!(":{nonce}").as_bytes())
    {
        db.del(key);
        let revoked = format!("revoked:{}", String::from_utf8_lossy(&cur));
        db.publish_message(&channel, &revoked);
    }
    if let Some(channel) = args.first() {
        db.publish(channel);
    }
    Ok(Reply::Int(1))
}
