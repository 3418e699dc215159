//! The plain commands, sent the same way by every store that talks to a real server.

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
