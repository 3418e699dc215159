//! `WATCH` transactions through an [`Intercept`] store: its hook sees each connection's
//! `WATCH` (with its reads), `UNWATCH` and `EXEC` as one command each, and the server-version
//! read. Opening a connection changes nothing on the server and is not handed to the hook.

use std::fmt;
use std::sync::Arc;

use tairlock::store::intercept::{Answer, Command, Hook, Intercept, mismatch};
use tairlock::{Reply, Result};

use super::store::{Read, TxOp, WatchConnection, WatchStore};

impl<S: WatchStore, H: Hook> WatchStore for Intercept<S, H> {
    type Connection = InterceptConnection<S::Connection, H>;

    async fn watch_connection(&self) -> Result<InterceptConnection<S::Connection, H>> {
        Ok(InterceptConnection {
            inner: self.inner().watch_connection().await?,
            hook: self.shared_hook().clone(),
        })
    }

    async fn server_version(&self) -> Result<Option<String>> {
        let command = Command::ServerVersion;
        let run = Box::pin(async move { self.inner().server_version().await.map(Answer::Version) });
        match self.hook().around(command, run).await? {
            Answer::Version(v) => Ok(v),
            other => Err(mismatch(&command, &other)),
        }
    }
}

/// A `WATCH` connection of an [`Intercept`] store: each command goes through the store's hook.
pub struct InterceptConnection<C, H> {
    inner: C,
    hook: Arc<H>,
}

impl<C, H> fmt::Debug for InterceptConnection<C, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InterceptConnection")
            .field("hook", &std::any::type_name::<H>())
            .finish_non_exhaustive()
    }
}

impl<C, H> InterceptConnection<C, H> {
    /// The connection behind the hook.
    pub fn inner(&self) -> &C {
        &self.inner
    }
}

impl<C: WatchConnection, H: Hook> WatchConnection for InterceptConnection<C, H> {
    async fn watch(&mut self, keys: &[String], reads: &[Read]) -> Result<Vec<Reply>> {
        let command = Command::Watch { keys };
        let InterceptConnection { inner, hook } = self;
        let run = Box::pin(async move { inner.watch(keys, reads).await.map(Answer::Replies) });
        match hook.around(command, run).await? {
            Answer::Replies(r) => Ok(r),
            other => Err(mismatch(&command, &other)),
        }
    }

    async fn unwatch(&mut self) -> Result<()> {
        let command = Command::Unwatch;
        let InterceptConnection { inner, hook } = self;
        let run = Box::pin(async move { inner.unwatch().await.map(|()| Answer::Done) });
        match hook.around(command, run).await? {
            Answer::Done => Ok(()),
            other => Err(mismatch(&command, &other)),
        }
    }

    async fn exec(&mut self, ops: &[TxOp]) -> Result<Option<Vec<Reply>>> {
        let command = Command::Exec;
        let InterceptConnection { inner, hook } = self;
        let run = Box::pin(async move { inner.exec(ops).await.map(Answer::Exec) });
        match hook.around(command, run).await? {
            Answer::Exec(r) => Ok(r),
            other => Err(mismatch(&command, &other)),
        }
    }
}
