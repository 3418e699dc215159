use std::time::Duration;

use tairlock::script::{CommandResult, Db, Reply, Script, int_arg, now_us};
use tairlock::scripts::{format_lease, read_fence};

use super::db::{ends_with_nonce, intent, lease_fence, typed, waiter_entry, writer_lease};

/// A fair writer's release (or a fair waiter leaving), granting the freed write lock to the
/// first live queued writer. Lua: `fair_write_release.lua`.
pub static FAIR_WRITE_RELEASE: Script = Script::new(
    "rw_fair_write_release",
    concat!(
        include_str!("prelude.lua"),
        include_str!("fair_write_release.lua")
    ),
    native,
);

fn leave(db: &mut Db, keys: &[String], who: &[u8]) -> CommandResult<()> {
    db.zrem(&keys[3], who)?;
    db.hdel(&keys[4], who)?;
    Ok(())
}

/// The first live queued writer (nonce, waiter lease ms, wake channel); dead ones are dropped.
fn head(db: &mut Db, keys: &[String], now: u64) -> CommandResult<Option<(Vec<u8>, u64, String)>> {
    loop {
        let Some((first, _)) = db
            .zrange_by_score(&keys[3], f64::NEG_INFINITY, f64::INFINITY)?
            .into_iter()
            .next()
        else {
            return Ok(None);
        };
        let entry = db
            .hget(&keys[4], &first)?
            .and_then(|raw| waiter_entry(&raw));
        if let Some((ends, wl, channel)) = entry
            && ends > now
        {
            return Ok(Some((first, wl, channel)));
        }
        leave(db, keys, &first)?;
    }
}

/// Move a fair intent to the first live queued writer, or drop it; true if kept.
fn pass_intent(db: &mut Db, keys: &[String], now: u64, intent_ms: i64) -> CommandResult<bool> {
    if let Some((first, _, _)) = head(db, keys, now)?
        && intent_ms > 0
    {
        db.set(
            &keys[1],
            first,
            Some(Duration::from_millis(intent_ms as u64)),
        );
        return Ok(true);
    }
    db.del(&keys[1]);
    Ok(false)
}

fn native(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    let (w, wi, fence_key) = (&keys[0], &keys[1], &keys[2]);
    typed(db, w, "string", "writer")?;
    typed(db, wi, "string", "intent")?;
    typed(db, fence_key, "string", "fence")?;
    typed(db, &keys[3], "zset", "queue")?;
    typed(db, &keys[4], "hash", "waiters")?;
    let last = read_fence(db, fence_key)?.unwrap_or(0);
    let writer = writer_lease(db, w)?;
    let intent = intent(db, wi)?;
    let fair_intent = match &intent {
        Some(i) => db.hget(&keys[4], i)?.is_some(),
        None => false,
    };
    let intent_ms = int_arg(args, 5)?;
    let now_us = now_us(db);
    let now = now_us / 1000;
    let pair = |a, b| Ok(Reply::Array(vec![Reply::Int(a), Reply::Int(b)]));
    let mut was_first = false;
    let (ours, withdrew) = if args[1] == "nonce" {
        was_first = writer.is_none()
            && head(db, keys, now)?.is_some_and(|(first, _, _)| first == args[0].as_bytes());
        leave(db, keys, args[0].as_bytes())?;
        // Lua: `^tl1:%d+:(%d+):`, and no bound without ARGV[7].
        let seen = |lease: &[u8]| match args.get(6) {
            None => true,
            Some(bound) => lease_fence(lease)
                .zip(bound.parse::<u64>().ok())
                .is_some_and(|(fence, bound)| fence <= bound),
        };
        (
            writer
                .as_ref()
                .is_some_and(|v| ends_with_nonce(v, &args[0]) && seen(v)),
            intent.as_deref() == Some(args[0].as_bytes()),
        )
    } else {
        (writer.as_deref() == Some(args[0].as_bytes()), false)
    };
    let moves = withdrew || fair_intent;
    if !ours {
        if moves && !pass_intent(db, keys, now, intent_ms)? {
            db.publish(&args[3]);
        }
        if was_first && let Some((_, _, channel)) = head(db, keys, now)? {
            db.publish(&channel);
        }
        return if writer.is_some() {
            pair(0, 0)
        } else {
            pair(-1, 0)
        };
    }
    db.del(w);
    let retention = int_arg(args, 2)? as u64;
    // A plain writer's intent: it goes first, as for plain writers.
    let plain_intent = intent.is_some() && !moves;
    let first = match plain_intent {
        true => None,
        false => head(db, keys, now)?,
    };
    if let Some((first, wl, channel)) = first {
        let fence = (last + 1).max(now_us);
        let lease = format_lease(now + wl, fence, &String::from_utf8_lossy(&first));
        db.set(w, lease, Some(Duration::from_millis(wl)));
        db.set(
            fence_key,
            fence.to_string(),
            Some(Duration::from_millis(wl + retention)),
        );
        leave(db, keys, &first)?;
        if moves {
            pass_intent(db, keys, now, intent_ms)?;
        }
        db.publish(&channel);
        return pair(1, 1);
    }
    if moves {
        db.del(wi);
    }
    db.publish(&args[3]);
    pair(1, 0)
}
