use tairlock::script::{CommandResult, Db, Reply, Script, string_or_none};

/// Delete a legacy-format lock only if it is still exactly this grant's. Lua: `release.lua`.
pub static RELEASE: Script = Script::new("legacy_release", include_str!("release.lua"), native);

fn native(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    let (lock, fence_key) = (&keys[0], &keys[1]);
    if string_or_none(db, lock, "lock")? == "none" {
        return Ok(Reply::Int(-1));
    }
    string_or_none(db, fence_key, "fence")?;
    if db.pttl(lock) < 0 {
        return Ok(Reply::Int(-2));
    }
    if db.get(lock)?.as_deref() != Some(args[0].as_bytes())
        || db.get(fence_key)?.as_deref() != Some(args[1].as_bytes())
    {
        return Ok(Reply::Int(0));
    }
    db.del(lock);
    Ok(Reply::Int(1))
}
