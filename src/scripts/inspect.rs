use crate::script::{CommandResult, Db, Reply, Script};

/// One read-only snapshot of a lock. Lua: `inspect.lua`.
pub static INSPECT: Script = Script::new("inspect", include_str!("inspect.lua"), native);

fn native(db: &mut Db, keys: &[String], _args: &[String]) -> CommandResult<Reply> {
    let (lock, fence_key) = (&keys[0], &keys[1]);
    let lock_type = db.key_type(lock);
    let cur = if lock_type == "string" {
        db.get(lock)?.map_or(Reply::Nil, Reply::Data)
    } else {
        Reply::Nil
    };
    let fence = if db.key_type(fence_key) == "string" {
        db.get(fence_key)?.map_or(Reply::Nil, Reply::Data)
    } else {
        Reply::Nil
    };
    Ok(Reply::Array(vec![
        Reply::data(lock_type),
        cur,
        Reply::Int(db.pttl(lock)),
        fence,
    ]))
}
