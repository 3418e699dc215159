//! Atomic operations: one Lua body and one native body, defined side by side.
//!
//! A [`Script`] is how every atomic step of every lock kind is declared, in this crate and in
//! `tairlock-legacy` and `tairlock-rwlock`: its `.lua` file (loaded once per process, run with
//! `EVALSHA`, reloaded on `NOSCRIPT`) for Redis, and a native function over [`Db`] with exactly
//! the same semantics for the embedded store. Both return a [`Reply`], so a lock kind decodes one
//! reply shape whichever store ran it, and the conformance and differential tests compare replies
//! directly.

use std::fmt;
use std::sync::OnceLock;

use crate::store::memory::{CommandResult, Db};

/// A reply, as Redis sends it back from a script (RESP2 shapes; errors travel separately).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A nil bulk string (Lua `false`).
    Nil,
    /// An integer (Lua numbers are truncated to integers on the way out).
    Int(i64),
    /// A bulk string.
    Data(Vec<u8>),
    /// A status reply such as `OK`.
    Status(String),
    /// An array (a Lua table; it stops at the first nil).
    Array(Vec<Reply>),
}

impl Reply {
    /// A bulk string from text.
    pub fn data(s: impl Into<Vec<u8>>) -> Self {
        Reply::Data(s.into())
    }

    /// The integer, if this is one.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Reply::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The bulk string as UTF-8 text, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Reply::Data(d) => std::str::from_utf8(d).ok(),
            Reply::Status(s) => Some(s),
            _ => None,
        }
    }

    /// The elements, if this is an array.
    pub fn as_array(&self) -> Option<&[Reply]> {
        match self {
            Reply::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl From<redis::Value> for Reply {
    fn from(value: redis::Value) -> Self {
        use redis::Value as V;
        match value {
            V::Nil => Reply::Nil,
            V::Int(i) => Reply::Int(i),
            V::BulkString(b) => Reply::Data(b),
            V::SimpleString(s) => Reply::Status(s),
            V::Okay => Reply::Status("OK".to_owned()),
            V::Array(items) | V::Set(items) => {
                Reply::Array(items.into_iter().map(Reply::from).collect())
            }
            V::Boolean(b) => Reply::Int(i64::from(b)),
            V::Double(d) => Reply::Int(d as i64),
            other => Reply::Data(format!("{other:?}").into_bytes()),
        }
    }
}

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

/// Read `ARGV[i]` (zero-based here) as an integer, as `tonumber` would, or fail like a script.
pub fn int_arg(args: &[String], i: usize) -> crate::store::memory::CommandResult<i64> {
    args.get(i)
        .and_then(|a| a.parse::<i64>().ok())
        .ok_or_else(|| {
            crate::store::memory::CommandError::new(
                "ERR",
                format!("ARGV[{}] is not an integer", i + 1),
            )
        })
}
