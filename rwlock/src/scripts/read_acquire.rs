use tairlock::script::{CommandResult, Db, Reply, Script, int_arg, now_ms};

use super::db::{add_reader, intent, reader_left, reap, typed, writer_lease};

/// Admit one reader unless a writer holds (or, honouring intent, waits for) the lock. Lua:
/// `read_acquire.lua`.
pub static READ_ACQUIRE: Script =
    Script::new("rw_read_acquire", include_str!("read_acquire.lua"), native);

fn native(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    let (w, r, wi) = (&keys[0], &keys[1], &keys[2]);
    let nonce = &args[0];
    typed(db, w, "string", "writer")?;
    typed(db, r, "zset", "readers")?;
    typed(db, wi, "string", "intent")?;
    let writer = writer_lease(db, w)?;
    let intent = intent(db, wi)?;
    let now = now_ms(db);
    reap(db, r, now)?;
    if let Some(score) = db.zscore(r, nonce.as_bytes())? {
        // A repeat: the lease its first call made, with the time that lease has left.
        let expiry = score as u64;
        return Ok(Reply::Array(vec![
            Reply::Int(1),
            Reply::Int(expiry as i64),
            Reply::Int(db.zcard(r)? as i64),
            Reply::Int(reader_left(db, r, expiry, now)),
        ]));
    }
    if writer.is_some() {
        return Ok(Reply::Array(vec![
            Reply::Int(0),
            Reply::data("writer"),
            Reply::Int(db.pttl(w)),
        ]));
    }
    if intent.is_some() && args[2] == "1" {
        return Ok(Reply::Array(vec![
            Reply::Int(0),
            Reply::data("intent"),
            Reply::Int(db.pttl(wi)),
        ]));
    }
    let lease = int_arg(args, 1)? as u64;
    let expiry = now + lease;
    add_reader(db, r, nonce, expiry, lease)?;
    Ok(Reply::Array(vec![
        Reply::Int(1),
        Reply::Int(expiry as i64),
        Reply::Int(db.zcard(r)? as i64),
        Reply::Int(reader_left(db, r, expiry, now)),
    ]))
}
