use tairlock::script::{CommandResult, Db, Reply, Script, int_arg, now_ms};

use super::db::{add_reader, reader_left, reap, typed};

/// Move a live reader's lease. Lua: `read_renew.lua`.
pub static READ_RENEW: Script =
    Script::new("rw_read_renew", include_str!("read_renew.lua"), native);

fn native(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    let r = &keys[0];
    if !typed(db, r, "zset", "readers")? {
        return Ok(Reply::Array(vec![Reply::Int(-1)]));
    }
    let now = now_ms(db);
    reap(db, r, now)?;
    if db.zscore(r, args[0].as_bytes())?.is_none() {
        return Ok(Reply::Array(vec![Reply::Int(-1)]));
    }
    let lease = int_arg(args, 1)? as u64;
    let expiry = now + lease;
    add_reader(db, r, &args[0], expiry, lease)?;
    Ok(Reply::Array(vec![
        Reply::Int(1),
        Reply::Int(expiry as i64),
        Reply::Int(reader_left(db, r, expiry, now)),
    ]))
}
