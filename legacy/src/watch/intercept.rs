//! `WATCH` transactions through an [`Intercept`] store whose hook is a [`WatchHook`]: the hook
//! sees each connection's `WATCH` (with its reads), `UNWATCH` and `EXEC`, and may keep idle
//! connections for reuse. The server-version read goes through [`Hook::around`] as
//! [`Command::ServerVersion`]; opening a connection changes nothing on the server and is not
//! handed to the hook.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use tairlock::store::intercept::{Answer, Command, Hook, Intercept, Run, mismatch};
use tairlock::{Reply, Result};

use super::store::{Read, TxOp, WatchConnection, WatchStore};

/// The `WATCH`-connection part of an [`Intercept`] hook. Every method has a default: a hook
/// that only gates or counts commands implements it with an empty block, and sees
/// connection commands in [`Hook::around`] as [`Command::Watch`], [`Command::Unwatch`] and
/// [`Command::Exec`].
pub trait WatchHook: Hook {
    /// Around a connection's `WATCH keys` and its `reads` (one round trip); `run` answers
    /// [`Answer::Replies`], one per read.
    fn around_watch<'a>(&'a self, keys: &'a [String], reads: &'a [Read], run: Run<'a>) -> Run<'a> {
        let _ = reads;
        self.around(Command::Watch { keys }, run)
    }

    /// Around a connection's `UNWATCH`; `run` answers [`Answer::Done`].
    fn around_unwatch<'a>(&'a self, run: Run<'a>) -> Run<'a> {
        self.around(Command::Unwatch, run)
    }

    /// Around a connection's `MULTI` `ops` `EXEC`; `run` answers [`Answer::Exec`].
    fn around_exec<'a>(&'a self, ops: &'a [TxOp], run: Run<'a>) -> Run<'a> {
        let _ = ops;
        self.around(Command::Exec, run)
    }

    /// An idle connection of the inner store to use instead of opening one (one that
    /// [`recycle`](Self::recycle) kept); none by default.
    fn reuse(&self) -> Option<Box<dyn Any + Send>> {
        None
    }

    /// A connection dropped after a completed command (none in flight, whatever it still
    /// watches: the next `WATCH` resets that): keep it for [`reuse`](Self::reuse), or drop it
    /// (the default).
    fn recycle(&self, connection: Box<dyn Any + Send>) {
        drop(connection);
    }
}

impl<S: WatchStore, H: WatchHook> WatchStore for Intercept<S, H> {
    type Connection = InterceptConnection<S::Connection, H>;

    async fn watch_connection(&self) -> Result<InterceptConnection<S::Connection, H>> {
        let idle = self
            .hook()
            .reuse()
            .and_then(|c| c.downcast::<S::Connection>().ok());
        let inner = match idle {
            Some(con) => *con,
            None => self.inner().watch_connection().await?,
        };
        Ok(InterceptConnection {
            inner: Some(inner),
            hook: self.shared_hook().clone(),
            clean: true,
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

/// A `WATCH` connection of an [`Intercept`] store: each command goes through the store's
/// [`WatchHook`]. Dropped after a completed command, it goes to [`WatchHook::recycle`].
pub struct InterceptConnection<C: WatchConnection, H: WatchHook> {
    inner: Option<C>,
    hook: Arc<H>,
    /// No command in flight: the connection may be reused.
    clean: bool,
}

impl<C: WatchConnection, H: WatchHook> fmt::Debug for InterceptConnection<C, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InterceptConnection")
            .field("hook", &std::any::type_name::<H>())
            .finish_non_exhaustive()
    }
}

impl<C: WatchConnection, H: WatchHook> Drop for InterceptConnection<C, H> {
    fn drop(&mut self) {
        if let Some(con) = self.inner.take()
            && self.clean
        {
            self.hook.recycle(Box::new(con));
        }
    }
}

impl<C: WatchConnection, H: WatchHook> InterceptConnection<C, H> {
    /// The connection behind the hook.
    pub fn inner(&self) -> &C {
        self.inner
            .as_ref()
            .expect("the connection is only taken on drop")
    }

    fn parts(&mut self) -> (&mut C, &H) {
        self.clean = false;
        let con = self
            .inner
            .as_mut()
            .expect("the connection is only taken on drop");
        (con, &self.hook)
    }
}

impl<C: WatchConnection, H: WatchHook> WatchConnection for InterceptConnection<C, H> {
    async fn watch(&mut self, keys: &[String], reads: &[Read]) -> Result<Vec<Reply>> {
        let (inner, hook) = self.parts();
        let run = Box::pin(async move { inner.watch(keys, reads).await.map(Answer::Replies) });
        let out = hook.around_watch(keys, reads, run).await;
        self.clean = out.is_ok();
        match out? {
            Answer::Replies(r) => Ok(r),
            other => Err(mismatch(&Command::Watch { keys }, &other)),
        }
    }

    async fn unwatch(&mut self) -> Result<()> {
        let (inner, hook) = self.parts();
        let run = Box::pin(async move { inner.unwatch().await.map(|()| Answer::Done) });
        let out = hook.around_unwatch(run).await;
        self.clean = out.is_ok();
        match out? {
            Answer::Done => Ok(()),
            other => Err(mismatch(&Command::Unwatch, &other)),
        }
    }

    async fn exec(&mut self, ops: &[TxOp]) -> Result<Option<Vec<Reply>>> {
        let (inner, hook) = self.parts();
        let run = Box::pin(async move { inner.exec(ops).await.map(Answer::Exec) });
        let out = hook.around_exec(ops, run).await;
        self.clean = out.is_ok();
        match out? {
            Answer::Exec(r) => Ok(r),
            other => Err(mismatch(&Command::Exec, &other)),
        }
    }
}
