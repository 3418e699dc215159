//! The plain commands and script calls, sent the same way by every store that talks to a real
//! server.

use crate::script::{Packed, Script};

/// Run `script` with `EVALSHA`; when the server answers `NOSCRIPT` (a restart, a failover, a
/// `SCRIPT FLUSH` forgot it), load it with `SCRIPT LOAD` and send the call again, which cannot
/// double-apply it: `NOSCRIPT` is answered before anything runs.
///
/// The call is written straight into one command buffer, each key and argument copied once (a
/// `redis::ScriptInvocation` holds each in its own allocation first).
pub(crate) async fn eval_sha<C: redis::aio::ConnectionLike>(
    con: &mut C,
    script: &'static Script,
    keys: &[String],
    args: &[String],
) -> redis::RedisResult<redis::Value> {
    let bytes = keys.iter().chain(args).map(String::len).sum::<usize>();
    let items = keys.iter().chain(args).map(String::as_str);
    let count = keys.len() + args.len();
    run(con, script, call(script, keys.len(), items, count, bytes)).await
}

/// [`eval_sha`] with packed keys and arguments: a batch of renewals carries six strings per
/// lease, copied from their one buffer into the command's.
pub(crate) async fn eval_sha_packed<C: redis::aio::ConnectionLike>(
    con: &mut C,
    script: &'static Script,
    keys: &Packed,
    args: &Packed,
) -> redis::RedisResult<redis::Value> {
    let bytes = keys.total_len() + args.total_len();
    let items = keys.iter().chain(args.iter());
    let count = keys.len() + args.len();
    run(con, script, call(script, keys.len(), items, count, bytes)).await
}

/// `EVALSHA sha1 numkeys key… arg…` in one command buffer: `count` items of `bytes` in all.
fn call<'a>(
    script: &'static Script,
    keys: usize,
    items: impl Iterator<Item = &'a str>,
    count: usize,
    bytes: usize,
) -> redis::Cmd {
    let mut call = redis::Cmd::with_capacity(3 + count, bytes + 64);
    call.arg("EVALSHA").arg(script.sha1()).arg(keys);
    for item in items {
        call.arg(item);
    }
    call
}

/// Send `call`, loading its script and sending it again on `NOSCRIPT`.
async fn run<C: redis::aio::ConnectionLike>(
    con: &mut C,
    script: &'static Script,
    call: redis::Cmd,
) -> redis::RedisResult<redis::Value> {
    match call.query_async(con).await {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            script.redis().load_async(con).await?;
            call.query_async(con).await
        }
        answered => answered,
    }
}

/// Expands, inside an `impl Store for X` block, every plain command of the [`Store`] trait
/// (GET … TYPE) as one round trip through `X`'s public
/// `async fn command<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T>`.
///
/// [`Store`]: crate::Store
macro_rules! plain_commands {
    () => {
        async fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
            self.command(redis::cmd("GET").arg(key)).await
        }

        async fn set_nx(&self, key: &str, value: &[u8]) -> Result<bool> {
            self.command(redis::cmd("SETNX").arg(key).arg(value)).await
        }

        async fn set_nx_px(&self, key: &str, value: &[u8], ttl: Duration) -> Result<bool> {
            let px = ttl.as_millis() as u64;
            let reply: Option<String> = self
                .command(
                    redis::cmd("SET")
                        .arg(key)
                        .arg(value)
                        .arg("NX")
                        .arg("PX")
                        .arg(px),
                )
                .await?;
            Ok(reply.is_some())
        }

        async fn set(&self, key: &str, value: &[u8]) -> Result<()> {
            self.command(redis::cmd("SET").arg(key).arg(value)).await
        }

        async fn getset(&self, key: &str, value: &[u8]) -> Result<Option<Vec<u8>>> {
            self.command(redis::cmd("GETSET").arg(key).arg(value)).await
        }

        async fn getdel(&self, key: &str) -> Result<Option<Vec<u8>>> {
            self.command(redis::cmd("GETDEL").arg(key)).await
        }

        async fn del(&self, key: &str) -> Result<bool> {
            let n: i64 = self.command(redis::cmd("DEL").arg(key)).await?;
            Ok(n > 0)
        }

        async fn incr(&self, key: &str) -> Result<i64> {
            self.command(redis::cmd("INCR").arg(key)).await
        }

        async fn decr(&self, key: &str) -> Result<i64> {
            self.command(redis::cmd("DECR").arg(key)).await
        }

        async fn expire(&self, key: &str, seconds: u64) -> Result<bool> {
            self.command(redis::cmd("EXPIRE").arg(key).arg(seconds))
                .await
        }

        async fn pexpire(&self, key: &str, ttl: Duration) -> Result<bool> {
            let ms = ttl.as_millis() as u64;
            self.command(redis::cmd("PEXPIRE").arg(key).arg(ms)).await
        }

        async fn pttl(&self, key: &str) -> Result<Ttl> {
            Ok(Ttl::from_pttl(
                self.command(redis::cmd("PTTL").arg(key)).await?,
            ))
        }

        async fn key_type(&self, key: &str) -> Result<String> {
            self.command(redis::cmd("TYPE").arg(key)).await
        }
    };
}

pub(crate) use plain_commands;
