//! [`Intercept`]: a [`Store`] wrapper that hands every command to a [`Hook`] first.
//!
//! Test stores (a gate that decides whose command runs next, a store that loses or delays a
//! reply, one that answers with garbage, a network simulation) differ only in what they do
//! around a command. Each of them is an [`Intercept`] with a hook of its own, rather than a
//! wrapper that forwards every method by hand: the wrapper implements [`Store`] (and
//! [`ReplicaStore`], and `tairlock-legacy`'s `WatchStore` when the hook is also its
//! `WatchHook`) once, hands each command to
//! [`Hook::around`] with the inner store's run of it, and always delegates
//! [`pubsub`](Store::pubsub), [`notifier`](Store::notifier) and [`runtime`](Store::runtime).
//! [`compare_and_delete`](Store::compare_and_delete) keeps its default, so a hook sees a
//! release as the [`EVAL`](Command::Eval) of [`EXPIRE_UNLOCK`](crate::scripts::EXPIRE_UNLOCK).
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//!
//! use tairlock::store::intercept::{Answer, Command, Hook, Intercept, Run};
//! use tairlock::{MemoryStore, Store};
//!
//! /// Counts the commands, and answers every `DEL` with "nothing deleted" without sending it.
//! #[derive(Default)]
//! struct Count(AtomicUsize);
//!
//! impl Hook for Count {
//!     fn around<'a>(&'a self, command: Command<'a>, run: Run<'a>) -> Run<'a> {
//!         self.0.fetch_add(1, Ordering::Relaxed);
//!         match command {
//!             Command::Del { .. } => Box::pin(async { Ok(Answer::Bool(false)) }),
//!             _ => run,
//!         }
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! # let checked: tairlock::Result<()> = async {
//! let store = Intercept::new(MemoryStore::new(), Count::default());
//! assert!(store.set_nx("k", b"v").await?);
//! assert!(!store.del("k").await?);
//! assert_eq!(store.get("k").await?, Some(b"v".to_vec()));
//! assert_eq!(store.hook().0.load(Ordering::Relaxed), 3);
//! # Ok(()) }.await;
//! # checked.unwrap();
//! # });
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::{Acks, ReplicaStore, Store, Ttl, WaitFor};
use crate::error::{Error, ErrorKind, Result};
use crate::script::{Reply, Script};

/// One command as a [`Hook`] sees it, with its arguments.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Command<'a> {
    /// [`Store::get`].
    Get {
        /// The key.
        key: &'a str,
    },
    /// [`Store::set_nx`].
    SetNx {
        /// The key.
        key: &'a str,
        /// The value.
        value: &'a [u8],
    },
    /// [`Store::set_nx_px`].
    SetNxPx {
        /// The key.
        key: &'a str,
        /// The value.
        value: &'a [u8],
        /// The expiry.
        ttl: Duration,
    },
    /// [`Store::set`].
    Set {
        /// The key.
        key: &'a str,
        /// The value.
        value: &'a [u8],
    },
    /// [`Store::getset`].
    GetSet {
        /// The key.
        key: &'a str,
        /// The value.
        value: &'a [u8],
    },
    /// [`Store::getdel`].
    GetDel {
        /// The key.
        key: &'a str,
    },
    /// [`Store::del`].
    Del {
        /// The key.
        key: &'a str,
    },
    /// [`Store::incr`].
    Incr {
        /// The key.
        key: &'a str,
    },
    /// [`Store::decr`].
    Decr {
        /// The key.
        key: &'a str,
    },
    /// [`Store::expire`].
    Expire {
        /// The key.
        key: &'a str,
        /// The expiry, in seconds.
        seconds: u64,
    },
    /// [`Store::pexpire`].
    PExpire {
        /// The key.
        key: &'a str,
        /// The expiry.
        ttl: Duration,
    },
    /// [`Store::pttl`].
    Pttl {
        /// The key.
        key: &'a str,
    },
    /// [`Store::key_type`].
    Type {
        /// The key.
        key: &'a str,
    },
    /// [`Store::time`].
    Time,
    /// [`Store::eval`].
    Eval {
        /// The script.
        script: &'static Script,
        /// Its `KEYS`.
        keys: &'a [String],
        /// Its `ARGV`.
        args: &'a [String],
    },
    /// [`ReplicaStore::eval_wait`].
    EvalWait {
        /// The script.
        script: &'static Script,
        /// Its `KEYS`.
        keys: &'a [String],
        /// Its `ARGV`.
        args: &'a [String],
        /// What it waits for.
        wait: WaitFor,
    },
    /// `WATCH keys` and the reads after it, one round trip (`tairlock-legacy`'s `WatchStore`
    /// connections).
    Watch {
        /// The watched keys.
        keys: &'a [String],
    },
    /// `UNWATCH` (ditto).
    Unwatch,
    /// `MULTI` … `EXEC` (ditto).
    Exec,
    /// The server's version, read once per `WatchStore` (ditto).
    ServerVersion,
}

impl Command<'_> {
    /// The command's name: `GET`, `SETNX`, `SET NX PX`, `SET`, `GETSET`, `GETDEL`, `DEL`,
    /// `INCR`, `DECR`, `EXPIRE`, `PEXPIRE`, `PTTL`, `TYPE`, `TIME`, `EVAL <script name>`,
    /// `EVAL+WAIT <script name>`, `WATCH`, `UNWATCH`, `EXEC`, `INFO server`.
    pub fn name(&self) -> String {
        match self {
            Command::Get { .. } => "GET".into(),
            Command::SetNx { .. } => "SETNX".into(),
            Command::SetNxPx { .. } => "SET NX PX".into(),
            Command::Set { .. } => "SET".into(),
            Command::GetSet { .. } => "GETSET".into(),
            Command::GetDel { .. } => "GETDEL".into(),
            Command::Del { .. } => "DEL".into(),
            Command::Incr { .. } => "INCR".into(),
            Command::Decr { .. } => "DECR".into(),
            Command::Expire { .. } => "EXPIRE".into(),
            Command::PExpire { .. } => "PEXPIRE".into(),
            Command::Pttl { .. } => "PTTL".into(),
            Command::Type { .. } => "TYPE".into(),
            Command::Time => "TIME".into(),
            Command::Eval { script, .. } => format!("EVAL {}", script.name()),
            Command::EvalWait { script, .. } => format!("EVAL+WAIT {}", script.name()),
            Command::Watch { .. } => "WATCH".into(),
            Command::Unwatch => "UNWATCH".into(),
            Command::Exec => "EXEC".into(),
            Command::ServerVersion => "INFO server".into(),
        }
    }

    /// The (first) key the command touches, if any.
    pub fn key(&self) -> Option<&str> {
        match *self {
            Command::Get { key }
            | Command::SetNx { key, .. }
            | Command::SetNxPx { key, .. }
            | Command::Set { key, .. }
            | Command::GetSet { key, .. }
            | Command::GetDel { key }
            | Command::Del { key }
            | Command::Incr { key }
            | Command::Decr { key }
            | Command::Expire { key, .. }
            | Command::PExpire { key, .. }
            | Command::Pttl { key }
            | Command::Type { key } => Some(key),
            Command::Eval { keys, .. }
            | Command::EvalWait { keys, .. }
            | Command::Watch { keys } => keys.first().map(String::as_str),
            Command::Time | Command::Unwatch | Command::Exec | Command::ServerVersion => None,
        }
    }
}

/// What a command answered, in the shape of its [`Store`] method's result.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Answer {
    /// `GET`, `GETSET`, `GETDEL`: the value, if any.
    Value(Option<Vec<u8>>),
    /// `SETNX`, `SET NX PX`, `DEL`, `EXPIRE`, `PEXPIRE`: whether it did it.
    Bool(bool),
    /// `SET`.
    Done,
    /// `INCR`, `DECR`.
    Int(i64),
    /// `PTTL`.
    Ttl(Ttl),
    /// `TYPE`.
    Type(String),
    /// `TIME`.
    Time(Duration),
    /// `EVAL`.
    Reply(Reply),
    /// `EVAL` + `WAIT`.
    Acked(Reply, Acks),
    /// `WATCH` and its reads: one reply per read.
    Replies(Vec<Reply>),
    /// `EXEC`: one reply per queued command, or `None` when a watched key changed.
    Exec(Option<Vec<Reply>>),
    /// The server's version, if known.
    Version(Option<String>),
}

/// The inner store's run of a command, for a [`Hook`] to await, replace or drop.
pub type Run<'a> = Pin<Box<dyn Future<Output = Result<Answer>> + Send + 'a>>;

/// What an [`Intercept`] does around each command. See the [module docs](self).
pub trait Hook: Send + Sync + 'static {
    /// Called for each command with the inner store's run of it: whatever the returned future
    /// answers is the command's result. Before and after the command: await `run` in between.
    /// Skip it, or answer otherwise: return another future. The answer must have the shape of
    /// the command's (an [`Answer::Bool`] for a `DEL`, …), or the caller gets an
    /// [`ErrorKind::Server`] error naming both.
    fn around<'a>(&'a self, command: Command<'a>, run: Run<'a>) -> Run<'a>;
}

/// A [`Store`] that hands every command to its [`Hook`]. See the [module docs](self).
pub struct Intercept<S, H> {
    inner: S,
    hook: Arc<H>,
}

impl<S: Clone, H> Clone for Intercept<S, H> {
    fn clone(&self) -> Self {
        Intercept {
            inner: self.inner.clone(),
            hook: self.hook.clone(),
        }
    }
}

impl<S, H> fmt::Debug for Intercept<S, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Intercept")
            .field("hook", &std::any::type_name::<H>())
            .finish_non_exhaustive()
    }
}

impl<S, H> Intercept<S, H> {
    /// `inner`, with every command handed to `hook` first.
    pub fn new(inner: S, hook: H) -> Self {
        Intercept::shared(inner, Arc::new(hook))
    }

    /// [`new`](Self::new) with a hook shared with other stores or with the test.
    pub fn shared(inner: S, hook: Arc<H>) -> Self {
        Intercept { inner, hook }
    }

    /// The store behind the hook.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The hook.
    pub fn hook(&self) -> &H {
        &self.hook
    }

    /// The hook, shared.
    pub fn shared_hook(&self) -> &Arc<H> {
        &self.hook
    }
}

/// The error for a hook's answer of the wrong shape (for wrappers of other store traits).
pub fn mismatch(command: &Command<'_>, answer: &Answer) -> Error {
    Error::new(
        ErrorKind::Server,
        format!(
            "the interceptor answered {} with {answer:?}",
            command.name()
        ),
    )
}

macro_rules! intercepted {
    ($self:ident, $command:expr, $run:expr, $answer:pat => $out:expr) => {{
        let command = $command;
        match $self.hook.around(command, Box::pin($run)).await? {
            $answer => Ok($out),
            other => Err(mismatch(&command, &other)),
        }
    }};
}

impl<S: Store, H: Hook> Store for Intercept<S, H> {
    fn single_shard(&self) -> bool {
        self.inner.single_shard()
    }

    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        intercepted!(self, Command::Get { key }, async move {
            self.inner.get(key).await.map(Answer::Value)
        }, Answer::Value(v) => v)
    }

    async fn set_nx(&self, key: &str, value: &[u8]) -> Result<bool> {
        intercepted!(self, Command::SetNx { key, value }, async move {
            self.inner.set_nx(key, value).await.map(Answer::Bool)
        }, Answer::Bool(b) => b)
    }

    async fn set_nx_px(&self, key: &str, value: &[u8], ttl: Duration) -> Result<bool> {
        intercepted!(self, Command::SetNxPx { key, value, ttl }, async move {
            self.inner.set_nx_px(key, value, ttl).await.map(Answer::Bool)
        }, Answer::Bool(b) => b)
    }

    async fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        intercepted!(self, Command::Set { key, value }, async move {
            self.inner.set(key, value).await.map(|()| Answer::Done)
        }, Answer::Done => ())
    }

    async fn getset(&self, key: &str, value: &[u8]) -> Result<Option<Vec<u8>>> {
        intercepted!(self, Command::GetSet { key, value }, async move {
            self.inner.getset(key, value).await.map(Answer::Value)
        }, Answer::Value(v) => v)
    }

    async fn getdel(&self, key: &str) -> Result<Option<Vec<u8>>> {
        intercepted!(self, Command::GetDel { key }, async move {
            self.inner.getdel(key).await.map(Answer::Value)
        }, Answer::Value(v) => v)
    }

    async fn del(&self, key: &str) -> Result<bool> {
        intercepted!(self, Command::Del { key }, async move {
            self.inner.del(key).await.map(Answer::Bool)
        }, Answer::Bool(b) => b)
    }

    async fn incr(&self, key: &str) -> Result<i64> {
        intercepted!(self, Command::Incr { key }, async move {
            self.inner.incr(key).await.map(Answer::Int)
        }, Answer::Int(n) => n)
    }

    async fn decr(&self, key: &str) -> Result<i64> {
        intercepted!(self, Command::Decr { key }, async move {
            self.inner.decr(key).await.map(Answer::Int)
        }, Answer::Int(n) => n)
    }

    async fn expire(&self, key: &str, seconds: u64) -> Result<bool> {
        intercepted!(self, Command::Expire { key, seconds }, async move {
            self.inner.expire(key, seconds).await.map(Answer::Bool)
        }, Answer::Bool(b) => b)
    }

    async fn pexpire(&self, key: &str, ttl: Duration) -> Result<bool> {
        intercepted!(self, Command::PExpire { key, ttl }, async move {
            self.inner.pexpire(key, ttl).await.map(Answer::Bool)
        }, Answer::Bool(b) => b)
    }

    async fn pttl(&self, key: &str) -> Result<Ttl> {
        intercepted!(self, Command::Pttl { key }, async move {
            self.inner.pttl(key).await.map(Answer::Ttl)
        }, Answer::Ttl(t) => t)
    }

    async fn key_type(&self, key: &str) -> Result<String> {
        intercepted!(self, Command::Type { key }, async move {
            self.inner.key_type(key).await.map(Answer::Type)
        }, Answer::Type(t) => t)
    }

    async fn time(&self) -> Result<Duration> {
        intercepted!(self, Command::Time, async move {
            self.inner.time().await.map(Answer::Time)
        }, Answer::Time(t) => t)
    }

    async fn eval(
        &self,
        script: &'static Script,
        keys: &[String],
        args: &[String],
    ) -> Result<Reply> {
        intercepted!(self, Command::Eval { script, keys, args }, async move {
            self.inner.eval(script, keys, args).await.map(Answer::Reply)
        }, Answer::Reply(r) => r)
    }

    fn pubsub(&self) -> crate::notify::PubSub {
        self.inner.pubsub()
    }

    async fn notifier(&self) -> Option<crate::notify::Notifier> {
        self.inner.notifier().await
    }

    fn runtime(&self) -> Option<tokio::runtime::Handle> {
        self.inner.runtime()
    }
}

impl<S: ReplicaStore, H: Hook> ReplicaStore for Intercept<S, H> {
    async fn eval_wait(
        &self,
        script: &'static Script,
        keys: &[String],
        args: &[String],
        wait: WaitFor,
    ) -> Result<(Reply, Acks)> {
        intercepted!(self, Command::EvalWait { script, keys, args, wait }, async move {
            let (reply, acks) = self.inner.eval_wait(script, keys, args, wait).await?;
            Ok(Answer::Acked(reply, acks))
        }, Answer::Acked(r, a) => (r, a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;

    struct Garble;

    impl Hook for Garble {
        fn around<'a>(&'a self, command: Command<'a>, run: Run<'a>) -> Run<'a> {
            match command {
                Command::Get { .. } => Box::pin(async { Ok(Answer::Int(7)) }),
                _ => run,
            }
        }
    }

    #[tokio::test]
    async fn an_answer_of_the_wrong_shape_is_an_error_naming_both() {
        let store = Intercept::new(MemoryStore::new(), Garble);
        assert!(store.set_nx("k", b"v").await.unwrap());
        let err = store.get("k").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Server);
        assert!(
            err.to_string().contains("answered GET with Int(7)"),
            "{err}"
        );
    }
}
