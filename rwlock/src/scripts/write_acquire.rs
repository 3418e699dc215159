use std::time::Duration;

use tairlock::script::{CommandResult, Db, Reply, Script, int_arg, now_us};
use tairlock::scripts::{format_lease, read_fence};

use super::db::{ends_with_nonce, intent, reap, typed, writer_lease};

/// Take the write lock if nobody reads or writes, or announce this writer's intent (or, under
/// reader preference, only that idle shared read holds should go). Lua: `write_acquire.lua`.
pub static WRITE_ACQUIRE: Script = Script::new(
    "rw_write_acquire",
    include_str!("write_acquire.lua"),
    native,
);

fn native(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    let (w, r, wi, fence_key) = (&keys[0], &keys[1], &keys[2], &keys[3]);
    let nonce = &args[0];
    typed(db, w, "string", "writer")?;
    typed(db, r, "zset", "readers")?;
    typed(db, wi, "string", "intent")?;
    let last = read_fence(db, fence_key)?.unwrap_or(0);
    let writer = writer_lease(db, w)?;
    let intent = intent(db, wi)?;
    let mut readers = 0;
    let (blocker, remaining) = match writer {
        Some(cur) => {
            if ends_with_nonce(&cur, nonce) {
                // A repeat: the lease its first call wrote, with the time it has left.
                return Ok(Reply::Array(vec![
                    Reply::Int(1),
                    Reply::Data(cur),
                    Reply::Int(db.pttl(w)),
                ]));
            }
            ("writer", db.pttl(w))
        }
        None => {
            let now_us = now_us(db);
            let now = now_us / 1000;
            reap(db, r, now)?;
            readers = db.zcard(r)? as i64;
            if intent.as_deref().is_some_and(|i| i != nonce.as_bytes()) {
                return Ok(Reply::Array(vec![
                    Reply::Int(0),
                    Reply::data("intent"),
                    Reply::Int(db.pttl(wi)),
                    Reply::Int(readers),
                ]));
            }
            if readers == 0 {
                let ttl = int_arg(args, 1)? as u64;
                let retention = int_arg(args, 3)? as u64;
                let fence = (last + 1).max(now_us);
                let lease = format_lease(now + ttl, fence, nonce);
                db.set(w, lease.clone(), Some(Duration::from_millis(ttl)));
                db.set(
                    fence_key,
                    fence.to_string(),
                    Some(Duration::from_millis(ttl + retention)),
                );
                if intent.is_some() {
                    db.del(wi);
                }
                return Ok(Reply::Array(vec![
                    Reply::Int(1),
                    Reply::data(lease),
                    Reply::Int(db.pttl(w)),
                ]));
            }
            ("readers", db.pttl(r))
        }
    };
    let intent_ms = int_arg(args, 2)?;
    if intent_ms > 0 && intent.as_deref().is_none_or(|i| i == nonce.as_bytes()) {
        db.set(
            wi,
            nonce.as_bytes(),
            Some(Duration::from_millis(intent_ms as u64)),
        );
        if intent.is_none()
            && blocker == "readers"
            && let Some(channel) = args.get(4)
        {
            db.publish(channel);
        }
    } else if args.get(6).is_some_and(|a| a == "1")
        && blocker == "readers"
        && let Some(channel) = args.get(4)
    {
        // Reader preference: no intent, only the hint to give back idle holds.
        db.publish(channel);
    }
    Ok(Reply::Array(vec![
        Reply::Int(0),
        Reply::data(blocker),
        Reply::Int(remaining),
        Reply::Int(readers),
    ]))
}
