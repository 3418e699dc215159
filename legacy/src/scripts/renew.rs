use std::time::Duration;

use tairlock::script::{CommandResult, Db, Reply, Script, int_arg, string_or_none};

use super::native::{now, px};

/// Extend a legacy-format lock this grant still holds exactly. Lua: `renew.lua`.
pub static RENEW: Script = Script::new("legacy_renew", include_str!("renew.lua"), native);

fn native(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    let (lock, fence_key) = (&keys[0], &keys[1]);
    if string_or_none(db, lock, "lock")? == "none" {
        return Ok(Reply::Array(vec![Reply::Int(-1)]));
    }
    string_or_none(db, fence_key, "fence")?;
    if db.pttl(lock) < 0 {
        return Ok(Reply::Array(vec![Reply::Int(-2)]));
    }
    if db.get(lock)?.as_deref() != Some(args[0].as_bytes())
        || db.get(fence_key)?.as_deref() != Some(args[1].as_bytes())
    {
        return Ok(Reply::Array(vec![Reply::Int(0)]));
    }
    let unit = int_arg(args, 2)? as u64;
    let (_, now_ms) = now(db);
    let value = now_ms / unit + int_arg(args, 3)? as u64 + 1;
    let px = px(value, unit, now_ms);
    let retention = int_arg(args, 4)? as u64;
    db.set(lock, value.to_string(), Some(Duration::from_millis(px)));
    db.pexpire(fence_key, Duration::from_millis(px + retention));
    Ok(Reply::Array(vec![
        Reply::Int(1),
        Reply::data(value.to_string()),
        Reply::Int(db.pttl(lock)),
    ]))
}
