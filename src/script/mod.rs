//! The scripting vocabulary: atomic operations, one Lua body and one native body side by side.
//!
//! A [`Script`] is how every atomic step of every lock kind is declared, in this crate and in
//! `tairlock-legacy` and `tairlock-rwlock`: its `.lua` file (loaded once per process, run with
//! `EVALSHA`, reloaded on `NOSCRIPT`) for Redis, and a native function over [`Db`] with exactly
//! the same semantics for the embedded store. Both return a [`Reply`], so a lock kind decodes one
//! reply shape whichever store ran it, and the conformance and differential tests compare replies
//! directly.
//!
//! | file | what it holds |
//! |---|---|
//! | `mod.rs` | [`Script`] and [`NativeBody`] |
//! | [`reply`] | [`Reply`], a script's reply as either store gives it |
//! | [`packed`] | [`Packed`], many keys or arguments in one buffer (a batched call's) |
//! | [`decode`] | the decoders every lock kind shares ([`array()`], [`int_at`], [`unexpected`]) |
//! | [`db`] | [`Db`], the keyspace a native body runs on (Redis's data model and commands), with [`CommandError`] |
//! | [`native`] | helpers native bodies share, each the Rust for a Lua idiom ([`int_arg`], [`string_or_none`], [`now_us`], [`all_digits`], [`touch`]) |
//!
//! Imports run one way: this module names nothing of the stores or the locks; the stores run
//! scripts (`Store::eval`, the embedded store's keyspace is a [`Db`]); the lock kinds declare and
//! decode them.

pub mod db;
pub mod decode;
pub mod native;
pub mod packed;
pub mod reply;

use std::fmt;
use std::sync::OnceLock;

pub use self::db::{Change, CommandError, CommandResult, Db};
pub use self::decode::{array, int_at, unexpected};
pub use self::native::{all_digits, int_arg, now_ms, now_us, string_or_none, touch};
pub use self::packed::Packed;
pub use self::reply::Reply;

/// The native body of an atomic operation: `KEYS`, `ARGV` in, one reply out, with the keyspace
/// locked for its whole run.
pub type NativeBody = fn(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply>;

/// One atomic operation: a Lua script and its native twin. See the [module docs](self).
pub struct Script {
    name: &'static str,
    lua: &'static str,
    native: NativeBody,
    compiled: OnceLock<redis::Script>,
}

impl Script {
    /// Declare an operation. Meant for `static`s:
    /// `static RELEASE: Script = Script::new("release", include_str!("release.lua"), release);`
    pub const fn new(name: &'static str, lua: &'static str, native: NativeBody) -> Self {
        Script {
            name,
            lua,
            native,
            compiled: OnceLock::new(),
        }
    }

    /// The operation's name, for logs and errors.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The Lua source.
    pub fn lua(&self) -> &'static str {
        self.lua
    }

    /// The native body.
    pub fn native(&self) -> NativeBody {
        self.native
    }

    /// The script as the `redis` crate holds it (SHA1 computed once per process).
    pub fn redis(&self) -> &redis::Script {
        self.compiled.get_or_init(|| redis::Script::new(self.lua))
    }

    /// The SHA1 the server knows the script by.
    pub fn sha1(&self) -> &str {
        self.redis().get_hash()
    }
}

impl fmt::Debug for Script {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Script")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}
