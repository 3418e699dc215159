use tairlock::script::int_arg;
use tairlock::store::memory::{CommandResult, Db};
use tairlock::{Reply, Script};

use super::{add_reader, now_ms, reap, typed, writer_lease};

/// Turn a held write lock into a read lock in one step. Lua: `downgrade.lua`.
pub static DOWNGRADE: Script = Script::new("rw_downgrade", include_str!("downgrade.lua"), native);

fn native(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    let (w, r) = (&keys[0], &keys[1]);
    let held = typed(db, w, "string", "writer")?;
    typed(db, r, "zset", "readers")?;
    if !held {
        return Ok(Reply::Array(vec![Reply::Int(-1)]));
    }
    let writer = writer_lease(db, w)?.unwrap_or_default();
    if writer != args[0].as_bytes() {
        return Ok(Reply::Array(vec![Reply::Int(0)]));
    }
    let now = now_ms(db);
    reap(db, r, now)?;
    let lease = int_arg(args, 2)? as u64;
    let expiry = now + lease;
    add_reader(db, r, &args[1], expiry, lease)?;
    db.del(w);
    db.publish(&args[3]);
    Ok(Reply::Array(vec![
        Reply::Int(1),
        Reply::Int(expiry as i64),
        Reply::Int(db.zcard(r)? as i64),
    ]))
}
