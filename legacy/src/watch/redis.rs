//! `WATCH` on a real server: one dedicated connection per transaction.

use std::fmt;
use std::time::Duration;

use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use tairlock::{RedisStore, Reply, Result};

use super::store::{Read, TxOp, WatchConnection, WatchStore, reply_error, watch_pipeline};

/// How long one command on a dedicated connection may take.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

impl WatchStore for RedisStore {
    type Connection = RedisWatch;

    /// Opens a new TCP connection (plus `AUTH`/`SELECT` from the URL): one round trip or more,
    /// which [`WatchLock`](crate::WatchLock)'s pool saves on every later transaction.
    async fn watch_connection(&self) -> Result<RedisWatch> {
        let config = AsyncConnectionConfig::new()
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_connection_timeout(Some(RESPONSE_TIMEOUT));
        let con = self
            .client()
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        Ok(RedisWatch { con })
    }

    async fn server_version(&self) -> Result<Option<String>> {
        match self
            .command::<String>(redis::cmd("INFO").arg("server"))
            .await
        {
            Ok(info) => Ok(info
                .lines()
                .find_map(|l| l.strip_prefix("redis_version:"))
                .map(|v| v.trim().to_owned())),
            Err(e) if e.is_unanswered() => Err(e),
            // INFO renamed away or denied by an ACL: the version is simply unknown.
            Err(_) => Ok(None),
        }
    }
}

/// A [`WatchConnection`] on a [`RedisStore`]'s server: a connection of its own, never shared
/// by two transactions at once (it is only ever used through `&mut`).
pub struct RedisWatch {
    con: MultiplexedConnection,
}

impl fmt::Debug for RedisWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisWatch").finish_non_exhaustive()
    }
}

impl WatchConnection for RedisWatch {
    async fn watch(&mut self, keys: &[String], reads: &[Read]) -> Result<Vec<Reply>> {
        let replies: Vec<redis::Value> = watch_pipeline(keys, reads)
            .query_async(&mut self.con)
            .await?;
        let mut out = Vec::with_capacity(reads.len());
        for (i, reply) in replies.into_iter().enumerate() {
            if let redis::Value::ServerError(e) = &reply {
                return Err(reply_error(e));
            }
            if i >= 2 {
                out.push(Reply::from(reply));
            }
        }
        Ok(out)
    }

    async fn unwatch(&mut self) -> Result<()> {
        let () = redis::cmd("UNWATCH").query_async(&mut self.con).await?;
        Ok(())
    }

    async fn exec(&mut self, ops: &[TxOp]) -> Result<Option<Vec<Reply>>> {
        let mut pipe = redis::pipe();
        pipe.atomic();
        for op in ops {
            pipe.add_command(op.to_cmd()?);
        }
        let replies: Option<Vec<redis::Value>> = pipe.query_async(&mut self.con).await?;
        Ok(replies.map(|r| r.into_iter().map(Reply::from).collect()))
    }
}
