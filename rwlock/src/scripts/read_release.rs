use tairlock::script::{CommandResult, Db, Reply, Script, now_ms};

use super::db::{reap, typed, waiter_entry};

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
        if keys.len() >= 3 {
            wake_first_writer(db, &keys[1], &keys[2], now)?;
        }
    }
    Ok(Reply::Int(1))
}

/// Announce on the wake channel of the first live fair writer in `queue` (read-only); a queue
/// or waiters key of another type is ignored, as the Lua does.
fn wake_first_writer(db: &mut Db, queue: &str, waiters: &str, now: u64) -> CommandResult<()> {
    if db.key_type(queue) != "zset" || db.key_type(waiters) != "hash" {
        return Ok(());
    }
    let members = db.zrange_by_score(queue, f64::NEG_INFINITY, f64::INFINITY)?;
    for (member, _) in members {
        let entry = db
            .hget(waiters, &member)?
            .and_then(|raw| waiter_entry(&raw));
        if let Some((ends, _, channel)) = entry
            && ends > now
        {
            db.publish(&channel);
            break;
        }
    }
    Ok(())
}
