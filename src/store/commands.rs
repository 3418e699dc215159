//! The plain commands, sent the same way by every store that talks to a real server.

/// Expands, inside an `impl Store for X` block, every plain command of the [`Store`] trait
/// (GET … TYPE) as one round trip through `self.query(cmd)`, which `X` must provide as
/// `async fn query<T: redis::FromRedisValue>(&self, cmd: redis::Cmd) -> Result<T>`.
///
/// [`Store`]: crate::Store
macro_rules! plain_commands {
    () => {
        async fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
            self.query(redis::cmd("GET").arg(key).clone()).await
        }

        async fn set_nx(&self, key: &str, value: &[u8]) -> Result<bool> {
            self.query(redis::cmd("SETNX").arg(key).arg(value).clone())
                .await
        }

        async fn set_nx_px(&self, key: &str, value: &[u8], ttl: Duration) -> Result<bool> {
            let reply: Option<String> = self
                .query(
                    redis::cmd("SET")
                        .arg(key)
                        .arg(value)
                        .arg("NX")
                        .arg("PX")
                        .arg(ttl.as_millis() as u64)
                        .clone(),
                )
                .await?;
            Ok(reply.is_some())
        }

        async fn set(&self, key: &str, value: &[u8]) -> Result<()> {
            self.query(redis::cmd("SET").arg(key).arg(value).clone())
                .await
        }

        async fn getset(&self, key: &str, value: &[u8]) -> Result<Option<Vec<u8>>> {
            self.query(redis::cmd("GETSET").arg(key).arg(value).clone())
                .await
        }

        async fn getdel(&self, key: &str) -> Result<Option<Vec<u8>>> {
            self.query(redis::cmd("GETDEL").arg(key).clone()).await
        }

        async fn del(&self, key: &str) -> Result<bool> {
            let n: i64 = self.query(redis::cmd("DEL").arg(key).clone()).await?;
            Ok(n > 0)
        }

        async fn incr(&self, key: &str) -> Result<i64> {
            self.query(redis::cmd("INCR").arg(key).clone()).await
        }

        async fn decr(&self, key: &str) -> Result<i64> {
            self.query(redis::cmd("DECR").arg(key).clone()).await
        }

        async fn expire(&self, key: &str, seconds: u64) -> Result<bool> {
            self.query(redis::cmd("EXPIRE").arg(key).arg(seconds).clone())
                .await
        }

        async fn pexpire(&self, key: &str, ttl: Duration) -> Result<bool> {
            self.query(
                redis::cmd("PEXPIRE")
                    .arg(key)
                    .arg(ttl.as_millis() as u64)
                    .clone(),
            )
            .await
        }

        async fn pttl(&self, key: &str) -> Result<Ttl> {
            Ok(Ttl::from_pttl(
                self.query(redis::cmd("PTTL").arg(key).clone()).await?,
            ))
        }

        async fn key_type(&self, key: &str) -> Result<String> {
            self.query(redis::cmd("TYPE").arg(key).clone()).await
        }
    };
}

pub(crate) use plain_commands;
