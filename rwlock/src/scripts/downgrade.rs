use tairlock::script::{CommandResult, Db, Reply, Script, int_arg, now_ms};

use super::db::{add_reader, reader_left, reap, typed, writer_lease};

/// Turn a held write lock into a read lock in one step; a repeat after it happened answers the
/// same. Lua: `downgrade.lua`.
pub static DOWNGRADE: Script = Script::new("rw_downgrade", include_str!("downgrade.lua"), native);

fn native(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    let (w, r) = (&keys[0], &keys[1]);
    typed(db, w, "string", "writer")?;
    let readers = typed(db, r, "zset", "readers")?;
    let writer = writer_lease(db, w)?;
    let now = now_ms(db);
    if writer.as_deref() != Some(args[0].as_bytes()) {
        // Done already? The reader this downgrade adds is in, live (nothing is reaped).
        if readers
            && let Some(mine) = db.zscore(r, args[1].as_bytes())?
            && mine >= now as f64
        {
            let live = db.zrange_by_score(r, now as f64, f64::INFINITY)?.len();
            let expiry = mine as u64;
            return Ok(Reply::Array(vec![
                Reply::Int(1),
                Reply::Int(expiry as i64),
                Reply::Int(live as i64),
                Reply::Int(reader_left(db, r, expiry, now)),
            ]));
        }
        let code = if writer.is_some() { 0 } else { -1 };
        return Ok(Reply::Array(vec![Reply::Int(code)]));
    }
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
        Reply::Int(reader_left(db, r, expiry, now)),
    ]))
}
