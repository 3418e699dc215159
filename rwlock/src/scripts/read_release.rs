use tairlock::script::{CommandResult, Db, Reply, Script, now_ms};

use super::db::{reap, typed};

/// Remove one reader; announce when the last live one left. Lua: `read_release.lua`.
pub static READ_RELEASE: Script =
    Script::new("rw_read_release", include_str!("read_release.lua"), native);

fn native(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    let r = &keys[0];
    if !typed(db, r, "zset", "readers")? {
        return Ok(Reply::Int(-1));
    }
    let now = now_ms(db);
    reap(db, r, now)?;
    if !db.zrem(r, args[0].as_bytes())? {
        return Ok(Reply::Int(-1));
    }
    if !db.exists(r) {
        db.publish(&args[1]);
    }
    Ok(Reply::Int(1))
}
