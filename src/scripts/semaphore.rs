//! The semaphore's scripts: [`SEM_ACQUIRE`], [`SEM_RENEW`], [`SEM_RELEASE`], [`SEM_INSPECT`]
//! and [`SEM_SET_LIMIT`], native bodies mirroring the Lua line for line. The key layout is in
//! [`semaphore`](crate::semaphore).

use std::time::Duration;

use super::format::read_fence;
use crate::script::now_us;
use crate::script::{Reply, Script, int_arg};
use crate::store::memory::{CommandError, CommandResult, Db};

/// Take permits for one holder if they fit under the caller's limit. Lua: `sem_acquire.lua`.
pub static SEM_ACQUIRE: Script = Script::new(
    "sem_acquire",
    concat!(include_str!("prelude.lua"), include_str!("sem_acquire.lua")),
    acquire,
);

/// Move one live holder's lease. Lua: `sem_renew.lua`.
pub static SEM_RENEW: Script = Script::new(
    "sem_renew",
    concat!(include_str!("prelude.lua"), include_str!("sem_renew.lua")),
    renew,
);

/// Give one holder's permits back and announce it. Lua: `sem_release.lua`.
pub static SEM_RELEASE: Script = Script::new(
    "sem_release",
    concat!(include_str!("prelude.lua"), include_str!("sem_release.lua")),
    release,
);

/// A read-only snapshot of the live holders. Lua: `sem_inspect.lua`.
pub static SEM_INSPECT: Script = Script::new(
    "sem_inspect",
    concat!(include_str!("prelude.lua"), include_str!("sem_inspect.lua")),
    inspect,
);

/// Change the limit stored with a semaphore. Lua: `sem_set_limit.lua`.
pub static SEM_SET_LIMIT: Script = Script::new(
    "sem_set_limit",
    concat!(
        include_str!("prelude.lua"),
        include_str!("sem_set_limit.lua")
    ),
    set_limit,
);

/// The limit a limit key (a string, `key_type`) holds, or NOTLOCK when it is not one.
fn stored_limit(db: &mut Db, key: &str, key_type: &str) -> CommandResult<Option<u64>> {
    if key_type != "string" {
        return Ok(None);
    }
    let raw = db.get(key)?.unwrap_or_default();
    let limit = std::str::from_utf8(&raw)
        .ok()
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|t| t.parse::<u64>().ok())
        .filter(|l| *l <= u64::from(u32::MAX));
    match limit {
        Some(limit) => Ok(Some(limit)),
        None => Err(CommandError::new(
            "NOTLOCK",
            "limit key holds a value that is not a semaphore limit",
        )),
    }
}

/// `TYPE key` must be `none` or `want`; `what` names the key in the error, as the Lua does.
fn check(db: &mut Db, key: &str, want: &str, what: &str) -> CommandResult<&'static str> {
    match db.key_type(key) {
        t @ "none" => Ok(t),
        t if t == want => Ok(t),
        other => Err(CommandError::new(
            "WRONGTYPE",
            format!("{what} key holds a {other}"),
        )),
    }
}

/// A holding's value, `<permits>:<fence>` (and a fair waiter's, `<place ends ms>:<permits>`).
fn holding(raw: &[u8]) -> Option<(u64, u64)> {
    let text = std::str::from_utf8(raw).ok()?;
    let (permits, fence) = text.split_once(':')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(permits) || !digits(fence) {
        return None;
    }
    Some((permits.parse().ok()?, fence.parse().ok()?))
}

fn now_ms(db: &Db) -> u64 {
    now_us(db) / 1000
}

/// `PEXPIRE key ms` unless it outlives that already.
fn stretch(db: &mut Db, key: &str, ms: u64) {
    if db.pttl(key) < ms as i64 {
        db.pexpire(key, Duration::from_millis(ms));
    }
}

fn in_use(db: &mut Db, holdings: &str) -> CommandResult<u64> {
    Ok(db
        .hgetall(holdings)?
        .iter()
        .filter_map(|(_, v)| holding(v))
        .map(|(permits, _)| permits)
        .sum())
}

fn acquire(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    let (holders, holdings, fence_key) = (&keys[0], &keys[1], &keys[2]);
    check(db, holders, "zset", "holders")?;
    check(db, holdings, "hash", "holdings")?;
    check(db, fence_key, "string", "fence")?;
    let fair = matches!(args.get(5).map(String::as_str), Some("wait" | "once"));
    if fair {
        check(db, &keys[3], "zset", "queue")?;
        check(db, &keys[4], "hash", "waiters")?;
    }
    let limit_key = &keys[5];
    let limit_type = check(db, limit_key, "string", "limit")?;
    let stored = stored_limit(db, limit_key, limit_type)?;
    let last = read_fence(db, fence_key)?.unwrap_or(0);
    if db
        .hgetall(holdings)?
        .iter()
        .any(|(_, v)| holding(v).is_none())
    {
        return Err(CommandError::new(
            "NOTLOCK",
            "holdings key holds a value that is not a permit holding",
        ));
    }
    let nonce = args[0].as_bytes();
    let permits = int_arg(args, 1)? as u64;
    let limit = int_arg(args, 2)? as u64;
    let ttl = int_arg(args, 3)? as u64;
    let retention = int_arg(args, 4)? as u64;
    if let Some(stored) = stored
        && stored != limit
    {
        return Err(CommandError::new(
            "LIMIT",
            format!("semaphore limit is {stored}, not {limit}"),
        ));
    }
    // The limit is stored with the semaphore, and kept as long as its fence state.
    let keep_limit = |db: &mut Db| match stored {
        Some(_) => stretch(db, limit_key, ttl + retention),
        None => db.set(
            limit_key,
            limit.to_string(),
            Some(Duration::from_millis(ttl + retention)),
        ),
    };
    let now_us = now_us(db);
    let now = now_us / 1000;
    for (who, _) in db.zrange_by_score(holders, f64::NEG_INFINITY, now as f64 - 0.5)? {
        db.zrem(holders, &who)?;
        db.hdel(holdings, &who)?;
    }
    let expiry = now + ttl;
    let mine = db.hget(holdings, nonce)?;
    if let Some(mine) = mine
        && db.zscore(holders, nonce)?.is_some()
    {
        db.zadd(holders, expiry as f64, nonce)?;
        stretch(db, holders, ttl);
        stretch(db, holdings, ttl);
        keep_limit(db);
        let (held, fence) = holding(&mine).unwrap_or_default();
        return Ok(Reply::Array(vec![
            Reply::Int(1),
            Reply::Int(expiry as i64),
            Reply::Int(fence as i64),
            Reply::Int(in_use(db, holdings)? as i64),
            Reply::Int(held as i64),
            Reply::Int((expiry - now) as i64),
        ]));
    }
    let used = in_use(db, holdings)?;
    let (mut ahead, mut head_ends) = (0u64, None::<u64>);
    if fair {
        let queue = db.zrange_by_score(&keys[3], f64::NEG_INFINITY, f64::INFINITY)?;
        for (who, _) in queue {
            let info = db.hget(&keys[4], &who)?.and_then(|raw| holding(&raw));
            match info {
                Some((ends, _)) if ends >= now && who == nonce => break,
                Some((ends, wants)) if ends >= now => {
                    ahead += wants;
                    head_ends.get_or_insert(ends);
                }
                _ => {
                    db.zrem(&keys[3], &who)?;
                    db.hdel(&keys[4], &who)?;
                }
            }
        }
    }
    if used + ahead + permits > limit {
        if args.get(5).map(String::as_str) == Some("wait") {
            let wl = int_arg(args, 6)? as u64;
            if db.zscore(&keys[3], nonce)?.is_none() {
                db.zadd(&keys[3], now_us as f64, nonce)?;
            }
            db.hset(&keys[4], nonce, format!("{}:{permits}", now + wl))?;
            stretch(db, &keys[3], wl);
            stretch(db, &keys[4], wl);
            keep_limit(db);
        }
        let first = db
            .zrange_by_score(holders, f64::NEG_INFINITY, f64::INFINITY)?
            .into_iter()
            .next();
        let mut wait = first.map_or(0, |(_, score)| score as i64 - now as i64);
        if used + permits <= limit
            && let Some(ends) = head_ends
        {
            wait = ends as i64 - now as i64;
        }
        return Ok(Reply::Array(vec![
            Reply::Int(0),
            Reply::Int(wait),
            Reply::Int(used as i64),
        ]));
    }
    let fence = (last + 1).max(now_us);
    if fair {
        db.zrem(&keys[3], nonce)?;
        db.hdel(&keys[4], nonce)?;
    }
    db.zadd(holders, expiry as f64, nonce)?;
    db.hset(holdings, nonce, format!("{permits}:{fence}"))?;
    stretch(db, holders, ttl);
    stretch(db, holdings, ttl);
    let keep = db.pttl(fence_key).max((ttl + retention) as i64);
    db.set(
        fence_key,
        fence.to_string(),
        Some(Duration::from_millis(keep as u64)),
    );
    keep_limit(db);
    Ok(Reply::Array(vec![
        Reply::Int(1),
        Reply::Int(expiry as i64),
        Reply::Int(fence as i64),
        Reply::Int((used + permits) as i64),
        Reply::Int(permits as i64),
        Reply::Int((expiry - now) as i64),
    ]))
}

fn renew(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    let (holders, holdings, fence_key) = (&keys[0], &keys[1], &keys[2]);
    check(db, holders, "zset", "holders")?;
    check(db, holdings, "hash", "holdings")?;
    let fence_type = check(db, fence_key, "string", "fence")?;
    let limit_type = check(db, &keys[3], "string", "limit")?;
    let now = now_ms(db);
    let nonce = args[0].as_bytes();
    let live = db.zscore(holders, nonce)?.is_some_and(|s| s >= now as f64);
    if !live || db.hget(holdings, nonce)?.is_none() {
        return Ok(Reply::Array(vec![Reply::Int(-1)]));
    }
    let ttl = int_arg(args, 1)? as u64;
    let expiry = now + ttl;
    db.zadd(holders, expiry as f64, nonce)?;
    stretch(db, holders, ttl);
    stretch(db, holdings, ttl);
    let keep = ttl + int_arg(args, 2)? as u64;
    if fence_type == "string" {
        stretch(db, fence_key, keep);
    }
    if limit_type == "string" {
        stretch(db, &keys[3], keep);
    }
    Ok(Reply::Array(vec![
        Reply::Int(1),
        Reply::Int(expiry as i64),
        Reply::Int((expiry - now) as i64),
    ]))
}

fn release(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    let (holders, holdings) = (&keys[0], &keys[1]);
    check(db, holders, "zset", "holders")?;
    check(db, holdings, "hash", "holdings")?;
    check(db, &keys[2], "zset", "queue")?;
    check(db, &keys[3], "hash", "waiters")?;
    let now = now_ms(db);
    let nonce = args[0].as_bytes();
    let live = db.zscore(holders, nonce)?.is_some_and(|s| s >= now as f64);
    db.zrem(holders, nonce)?;
    let had = db.hdel(holdings, nonce)?;
    let left = db.zrem(&keys[2], nonce)?;
    db.hdel(&keys[3], nonce)?;
    let released = live && had;
    if !(released || left) {
        return Ok(Reply::Int(-1));
    }
    db.publish(&args[1]);
    Ok(Reply::Int(if released { 1 } else { -1 }))
}

fn inspect(db: &mut Db, keys: &[String], _args: &[String]) -> CommandResult<Reply> {
    let (holders, holdings, fence_key) = (&keys[0], &keys[1], &keys[2]);
    let zt = db.key_type(holders);
    let ht = db.key_type(holdings);
    let last = if db.key_type(fence_key) == "string" {
        db.get(fence_key)?.map_or(Reply::Nil, Reply::Data)
    } else {
        Reply::Nil
    };
    let lt = db.key_type(&keys[3]);
    let limit = if lt == "string" {
        db.get(&keys[3])?.map_or(Reply::Nil, Reply::Data)
    } else {
        Reply::Nil
    };
    let now = now_ms(db);
    let mut out = vec![
        Reply::data(zt),
        Reply::data(ht),
        last,
        Reply::data(lt),
        limit,
    ];
    if zt == "zset" && ht == "hash" {
        for (who, score) in db.zrange_by_score(holders, now as f64, f64::INFINITY)? {
            let info = db.hget(holdings, &who)?.and_then(|raw| holding(&raw));
            if let Some((permits, fence)) = info {
                out.push(Reply::Array(vec![
                    Reply::Data(who),
                    Reply::Int(permits as i64),
                    Reply::data(fence.to_string()),
                    Reply::Int(score as i64 - now as i64),
                ]));
            }
        }
    }
    Ok(Reply::Array(out))
}

fn set_limit(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    let (fence_key, limit_key) = (&keys[0], &keys[1]);
    check(db, fence_key, "string", "fence")?;
    let limit_type = check(db, limit_key, "string", "limit")?;
    let previous = stored_limit(db, limit_key, limit_type)?.unwrap_or(0);
    let mut keep = int_arg(args, 1)?;
    for key in [fence_key, limit_key] {
        keep = keep.max(db.pttl(key));
    }
    db.set(
        limit_key,
        args[0].clone(),
        Some(Duration::from_millis(keep as u64)),
    );
    Ok(Reply::Int(previous as i64))
}
