use tairlock::script::{CommandResult, Db, Reply, Script, now_ms};

use super::db::typed;

/// Live readers, and the writer's and intent's remaining time; read-only. Lua: `count.lua`.
pub static COUNT: Script = Script::new("rw_count", include_str!("count.lua"), native);

fn native(db: &mut Db, keys: &[String], _args: &[String]) -> CommandResult<Reply> {
    let (w, r, wi) = (&keys[0], &keys[1], &keys[2]);
    let mut readers = 0;
    if typed(db, r, "zset", "readers")? {
        let now = now_ms(db);
        readers = db.zrange_by_score(r, now as f64, f64::INFINITY)?.len() as i64;
    }
    Ok(Reply::Array(vec![
        Reply::Int(readers),
        Reply::Int(db.pttl(w)),
        Reply::Int(db.pttl(wi)),
    ]))
}
