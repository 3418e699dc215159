use std::time::Duration;

use super::format::{LEASE_PREFIX, fence_token};
use crate::script::{CommandError, CommandResult, Db, Reply, Script, int_arg, now_ms};

/// Renew several held leases in one call, each with its own outcome. Lua: `renew_many.lua`.
pub static RENEW_MANY: Script = Script::new("renew_many", include_str!("renew_many.lua"), native);

/// One lease's outcome in a [`RENEW_MANY`] reply: `code, expiry ms, pttl, fence pttl`.
fn outcome(out: &mut Vec<Reply>, code: i64, expiry: i64, pttl: i64, fence_pttl: i64) {
    out.extend([
        Reply::Int(code),
        Reply::Int(expiry),
        Reply::Int(pttl),
        Reply::Int(fence_pttl),
    ]);
}

fn native(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    if !keys.len().is_multiple_of(2) || args.len() != 1 + 4 * (keys.len() / 2) {
        return Err(CommandError::new(
            "ERR",
            "KEYS must be lock, fence pairs and ARGV a lease, length, nonce, refresh for each",
        ));
    }
    let retention = int_arg(args, 0)? as u64;
    let now = now_ms(db);
    let mut out = Vec::with_capacity(keys.len() / 2 * 4);
    for (i, pair) in keys.chunks(2).enumerate() {
        let (lock, fence_key) = (&pair[0], &pair[1]);
        let (lease, nonce) = (&args[4 * i + 1], &args[4 * i + 3]);
        // `redis.pcall('GET', ...)`: another type is an error reply, not a failure of the batch.
        let cur = match db.get(lock) {
            Ok(None) => {
                outcome(&mut out, -1, 0, 0, 0);
                continue;
            }
            Ok(Some(cur)) if cur.starts_with(LEASE_PREFIX.as_bytes()) => cur,
            _ => {
                outcome(&mut out, -2, 0, 0, 0);
                continue;
            }
        };
        let cur = String::from_utf8_lossy(&cur).into_owned();
        let Some((expiry, fence)) = lease_parts(&cur) else {
            outcome(&mut out, -2, 0, 0, 0);
            continue;
        };
        if cur == *lease {
            let ttl = int_arg(args, 4 * i + 2)? as u64;
            // The fence key is read and written only when asked; then to outlive the renewed
            // lease by 1.5 retentions (as the Lua does).
            let refresh = args[4 * i + 4] == "1";
            let last = if refresh {
                match db.get(fence_key) {
                    Ok(None) => None,
                    Ok(Some(raw)) if fence_token(&raw).is_some() => {
                        Some(String::from_utf8(raw).expect("digits are utf-8"))
                    }
                    _ => {
                        outcome(&mut out, -2, 0, 0, 0);
                        continue;
                    }
                }
            } else {
                None
            };
            let fence = fence.to_owned();
            let renewed = format!("{LEASE_PREFIX}{}:{fence}:{nonce}", now + ttl);
            db.set(lock, renewed, Some(Duration::from_millis(ttl)));
            let mut fence_pttl = 0;
            if refresh {
                let number = |digits: &str| digits.parse::<f64>().unwrap_or(f64::INFINITY);
                let keep = match last {
                    Some(last) if number(&last) >= number(&fence) => last,
                    _ => fence,
                };
                fence_pttl = ttl + retention + retention / 2;
                db.set(fence_key, keep, Some(Duration::from_millis(fence_pttl)));
            }
            outcome(
                &mut out,
                1,
                (now + ttl) as i64,
                ttl as i64,
                fence_pttl as i64,
            );
        } else if cur.ends_with(&format!(":{nonce}")) {
            // A repeat whose reply was lost: the lease it made, with the time it has left.
            let expiry = expiry.parse().unwrap_or(i64::MAX);
            let pttl = db.pttl(lock);
            outcome(&mut out, 1, expiry, pttl, 0);
        } else {
            outcome(&mut out, 0, 0, 0, 0);
        }
    }
    Ok(Reply::Array(out))
}

/// The expiry and fence digits of a stored lease, as `string.match(cur, '^tl1:(%d+):(%d+):')`
/// finds them.
fn lease_parts(cur: &str) -> Option<(&str, &str)> {
    let (expiry, rest) = cur.strip_prefix(LEASE_PREFIX)?.split_once(':')?;
    let (fence, _nonce) = rest.split_once(':')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(expiry) && digits(fence)).then_some((expiry, fence))
}
