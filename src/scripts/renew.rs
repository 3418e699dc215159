use std::time::Duration;

use super::format::{LEASE_PREFIX, fence_token, not_a_fence, not_a_lease};
use crate::script::{
    CommandResult, Db, Reply, Script, all_digits, int_arg, now_us, string_or_none, touch,
};

/// Move the expiry of a held lease and rotate its nonce. Lua: `renew.lua`.
pub static RENEW: Script = Script::new(
    "renew",
    concat!(include_str!("prelude.lua"), include_str!("renew.lua")),
    native,
);

fn native(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    let (lock, fence_key) = (&keys[0], &keys[1]);
    if string_or_none(db, lock, "lock")? == "none" {
        return Ok(Reply::Array(vec![Reply::Int(-1)]));
    }
    let mut last = None;
    if string_or_none(db, fence_key, "fence")? == "string" {
        let raw = db.get(fence_key)?.unwrap_or_default();
        if fence_token(&raw).is_none() {
            return Err(not_a_fence());
        }
        last = Some(String::from_utf8(raw).expect("digits are utf-8"));
    }
    let cur = db.get(lock)?.unwrap_or_default();
    if !cur.starts_with(LEASE_PREFIX.as_bytes()) {
        return Err(not_a_lease());
    }
    if cur != args[0].as_bytes() {
        let mine = format!(":{}", args[2]);
        if cur.ends_with(mine.as_bytes()) {
            // A repeat: the first renewal with the time it has left; re-apply the expiry, a
            // write WAIT can count (as the Lua does).
            let pttl = db.pttl(lock);
            touch(db, lock);
            return Ok(Reply::Array(vec![
                Reply::Int(1),
                Reply::Data(cur),
                Reply::Int(pttl),
            ]));
        }
        return Ok(Reply::Array(vec![Reply::Int(0)]));
    }
    // `string.match(cur, '^tl1:%d+:(%d+):')`; the fence is carried over as the same digits.
    let cur = String::from_utf8_lossy(&cur).into_owned();
    let fence = lease_fence(&cur).ok_or_else(not_a_lease)?.to_owned();
    let ttl = int_arg(args, 1)? as u64;
    let retention = int_arg(args, 3)? as u64;
    let lease = format!(
        "{LEASE_PREFIX}{}:{fence}:{}",
        now_us(db) / 1000 + ttl,
        args[2]
    );
    db.set(lock, lease.clone(), Some(Duration::from_millis(ttl)));
    let number = |digits: &str| digits.parse::<f64>().unwrap_or(f64::INFINITY);
    let keep = match last {
        Some(last) if number(&last) >= number(&fence) => last,
        _ => fence,
    };
    db.set(
        fence_key,
        keep,
        Some(Duration::from_millis(ttl + retention)),
    );
    let pttl = db.pttl(lock);
    Ok(Reply::Array(vec![
        Reply::Int(1),
        Reply::data(lease),
        Reply::Int(pttl),
    ]))
}

/// The fence digits of a stored lease, as `string.match(cur, '^tl1:%d+:(%d+):')` finds them.
fn lease_fence(cur: &str) -> Option<&str> {
    let (expiry, rest) = cur.strip_prefix(LEASE_PREFIX)?.split_once(':')?;
    let (fence, _nonce) = rest.split_once(':')?;
    (all_digits(expiry.as_bytes()) && all_digits(fence.as_bytes())).then_some(fence)
}
