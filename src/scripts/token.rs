//! The token lock's scripts: [`TOKEN_ACQUIRE`], [`TOKEN_RELEASE`] and [`TOKEN_RENEW`], native
//! bodies mirroring the Lua line for line. The key layout is in [`token`](crate::token); its
//! snapshot is the expire lock's [`INSPECT`](super::INSPECT), which reads any string key and its
//! fence key.

use std::time::Duration;

use super::format::read_fence;
use crate::script::{CommandResult, Db, Reply, Script, int_arg, now_us, string_or_none};

/// Take a token lock (`SET key token NX PX ttl`) and move its fencing token; safe to repeat with
/// the same token. Lua: `token_acquire.lua`.
pub static TOKEN_ACQUIRE: Script = Script::new(
    "token_acquire",
    concat!(
        include_str!("prelude.lua"),
        include_str!("token_acquire.lua")
    ),
    acquire,
);

/// Delete a token lock only if it holds exactly this token, and announce it. Lua:
/// `token_release.lua`.
pub static TOKEN_RELEASE: Script = Script::new(
    "token_release",
    concat!(
        include_str!("prelude.lua"),
        include_str!("token_release.lua")
    ),
    release,
);

/// Move a token lock's expiry if it holds exactly this token. Lua: `token_renew.lua`.
pub static TOKEN_RENEW: Script = Script::new(
    "token_renew",
    concat!(include_str!("prelude.lua"), include_str!("token_renew.lua")),
    renew,
);

fn acquire(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    let (lock, fence_key) = (&keys[0], &keys[1]);
    string_or_none(db, lock, "lock")?;
    let fence_type = string_or_none(db, fence_key, "fence")?;
    let last = read_fence(db, fence_key)?.unwrap_or(0);
    let token = args[0].as_bytes();
    let cur = db.get(lock)?;
    if cur.as_deref().is_some_and(|cur| cur != token) {
        return Ok(Reply::Array(vec![Reply::Int(0), Reply::Int(db.pttl(lock))]));
    }
    if cur.is_some() && fence_type == "string" {
        // A repeat: the lock, and the fencing token its first application issued, are ours.
        return Ok(Reply::Array(vec![
            Reply::Int(1),
            Reply::Int(db.pttl(lock)),
            Reply::Int(last as i64),
        ]));
    }
    let fence = (last + 1).max(now_us(db));
    if cur.is_none() {
        let ttl = int_arg(args, 1)? as u64;
        db.set(lock, token.to_vec(), Some(Duration::from_millis(ttl)));
    }
    let retention = int_arg(args, 2)? as u64;
    let pttl = db.pttl(lock);
    db.set(
        fence_key,
        fence.to_string(),
        Some(Duration::from_millis(pttl as u64 + retention)),
    );
    Ok(Reply::Array(vec![
        Reply::Int(1),
        Reply::Int(pttl),
        Reply::Int(fence as i64),
    ]))
}

fn release(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    let lock = &keys[0];
    string_or_none(db, lock, "lock")?;
    let Some(cur) = db.get(lock)? else {
        return Ok(Reply::Int(-1));
    };
    if cur != args[0].as_bytes() {
        return Ok(Reply::Int(0));
    }
    db.del(lock);
    if let Some(channel) = args.get(1) {
        db.publish(channel);
    }
    Ok(Reply::Int(1))
}

fn renew(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    let (lock, fence_key) = (&keys[0], &keys[1]);
    string_or_none(db, lock, "lock")?;
    let fence_type = string_or_none(db, fence_key, "fence")?;
    read_fence(db, fence_key)?;
    let Some(cur) = db.get(lock)? else {
        return Ok(Reply::Array(vec![Reply::Int(-1)]));
    };
    if cur != args[0].as_bytes() {
        return Ok(Reply::Array(vec![Reply::Int(0)]));
    }
    let ttl = int_arg(args, 1)? as u64;
    db.pexpire(lock, Duration::from_millis(ttl));
    if fence_type == "string" {
        let retention = int_arg(args, 2)? as u64;
        db.pexpire(fence_key, Duration::from_millis(ttl + retention));
    }
    Ok(Reply::Array(vec![Reply::Int(1), Reply::Int(db.pttl(lock))]))
}
