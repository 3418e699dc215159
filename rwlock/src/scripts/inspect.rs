use tairlock::script::{CommandResult, Db, Reply, Script, now_ms};

/// One read-only snapshot of a reader/writer lock. Lua: `inspect.lua`.
pub static INSPECT: Script = Script::new("rw_inspect", include_str!("inspect.lua"), native);

fn string_value(db: &mut Db, key: &str) -> CommandResult<(Reply, Reply)> {
    let kt = db.key_type(key);
    let value = if kt == "string" {
        db.get(key)?.map_or(Reply::Nil, Reply::Data)
    } else {
        Reply::Nil
    };
    Ok((Reply::data(kt), value))
}

fn native(db: &mut Db, keys: &[String], _args: &[String]) -> CommandResult<Reply> {
    let now = now_ms(db);
    let (wt, w) = string_value(db, &keys[0])?;
    let rt = db.key_type(&keys[1]);
    let mut readers = Vec::new();
    if rt == "zset" {
        for (member, score) in db.zrange_by_score(&keys[1], now as f64, f64::INFINITY)? {
            readers.push(Reply::Data(member));
            readers.push(Reply::data((score as i64).to_string()));
        }
    }
    let (it, i) = string_value(db, &keys[2])?;
    let (ft, f) = string_value(db, &keys[3])?;
    let mut out = vec![
        Reply::Int(now as i64),
        wt,
        w,
        Reply::Int(db.pttl(&keys[0])),
        Reply::data(rt),
        Reply::Array(readers),
        it,
        i,
        Reply::Int(db.pttl(&keys[2])),
        ft,
        f,
    ];
    if keys.len() >= 6 {
        let qt = db.key_type(&keys[4]);
        let mut queue = Vec::new();
        if qt == "zset" {
            let hashed = db.key_type(&keys[5]) == "hash";
            for (member, _) in db.zrange_by_score(&keys[4], f64::NEG_INFINITY, f64::INFINITY)? {
                let entry = if hashed {
                    db.hget(&keys[5], &member)?.map_or(Reply::Nil, Reply::Data)
                } else {
                    Reply::Nil
                };
                queue.push(Reply::Data(member));
                queue.push(entry);
            }
        }
        out.push(Reply::data(qt));
        out.push(Reply::Array(queue));
    }
    Ok(Reply::Array(out))
}
