//! The one error type of tairlock.
//!
//! Contention is never an error: a lock held by someone else is an ordinary outcome
//! ([`Acquire::Held`](crate::Acquire::Held)). Errors are for what a caller must react to
//! differently: the store is unreachable, the server refused a command, the caller's input is bad,
//! the key holds somebody's data, or a lease was lost.

use std::fmt;

/// A `Result` whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The store could not be reached or the connection dropped mid-command. The command may or
    /// may not have run; every tairlock script is safe to retry.
    Connection,
    /// The server answered with an error that is not one of the kinds below.
    Server,
    /// A lease this client relied on is gone (expired, or taken over).
    LeaseLost,
    /// The caller tried to release or renew a lock it does not hold.
    NotOwner,
    /// The caller's input was rejected before anything was sent (empty key, zero TTL, ...), or
    /// refused by the server before anything was written (a semaphore limit other than the
    /// one the semaphore stores).
    InvalidInput,
    /// The key holds a value that is not one of this library's locks (another Redis type, or a
    /// string of the user's). Nothing was changed.
    WrongType,
    /// An operation did not finish in time.
    Timeout,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::Connection => "connection error",
            ErrorKind::Server => "server error",
            ErrorKind::LeaseLost => "lease lost",
            ErrorKind::NotOwner => "not the owner",
            ErrorKind::InvalidInput => "invalid input",
            ErrorKind::WrongType => "wrong type",
            ErrorKind::Timeout => "timed out",
        })
    }
}

/// The error type of every fallible tairlock operation.
///
/// Opaque on purpose: branch on [`Error::kind`] or the `is_*` predicates; the transport error,
/// when there is one, is kept as the [`source`](std::error::Error::source).
#[derive(Debug, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct Error {
    kind: ErrorKind,
    message: String,
    /// The server's error code (`MOVED`, `CLUSTERDOWN`, ...), when the error is a server reply.
    code: Option<String>,
    #[source]
    source: Option<redis::RedisError>,
}

impl Error {
    /// A new error of `kind` with a message (lowercase, no trailing punctuation).
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            code: None,
            source: None,
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::InvalidInput, message)
    }

    /// The error's kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The error's message, without the kind.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The store was unreachable or the connection dropped.
    pub fn is_connection(&self) -> bool {
        self.kind == ErrorKind::Connection
    }

    /// A lease was lost.
    pub fn is_lease_lost(&self) -> bool {
        self.kind == ErrorKind::LeaseLost
    }

    /// The input was rejected, and nothing was written.
    pub fn is_invalid_input(&self) -> bool {
        self.kind == ErrorKind::InvalidInput
    }

    /// The key holds data that is not one of our locks; nothing was changed.
    pub fn is_wrong_type(&self) -> bool {
        self.kind == ErrorKind::WrongType
    }

    /// An operation timed out.
    pub fn is_timeout(&self) -> bool {
        self.kind == ErrorKind::Timeout
    }

    /// No answer: the store was unreachable, the connection dropped, or the reply did not come
    /// in time ([`is_connection`](Self::is_connection) or [`is_timeout`](Self::is_timeout)). Any
    /// other error is an answer, e.g. a command refused by the server (renamed away, denied by
    /// an ACL).
    pub fn is_unanswered(&self) -> bool {
        self.is_connection() || self.is_timeout()
    }

    /// The error code of the server's reply (`WRONGTYPE`, `MOVED`, `CLUSTERDOWN`, ...), when
    /// this error is one.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }

    /// Worth trying again later with the same request: no answer came
    /// ([`is_unanswered`](Self::is_unanswered)), or the server could not serve the command *for
    /// now* and did not run it — a cluster in the middle of a failover or a resharding
    /// (`CLUSTERDOWN`, `MOVED`, `ASK`, `TRYAGAIN`, `MASTERDOWN`), a server loading its data
    /// (`LOADING`), a demoted master still addressed as one (`READONLY`), a script running too
    /// long (`BUSY`). Waiting lock calls retry these within their patience.
    pub fn is_transient(&self) -> bool {
        self.is_unanswered()
            || matches!(
                self.code(),
                Some(
                    "CLUSTERDOWN"
                        | "MOVED"
                        | "ASK"
                        | "TRYAGAIN"
                        | "MASTERDOWN"
                        | "LOADING"
                        | "READONLY"
                        | "BUSY"
                )
            )
    }

    /// An error reply from a command: the reply's code (`WRONGTYPE`, `NOTLOCK`, `ERR`, ...)
    /// decides the kind, as it does for a real server's reply.
    pub fn from_reply(code: &str, detail: &str) -> Self {
        let kind = kind_of_code(code);
        Error {
            code: Some(code.to_owned()),
            ..Error::new(kind, format!("{code} {detail}").trim_end().to_owned())
        }
    }
}

/// The kind of an error reply by its code: a key holding data that is not ours (`WRONGTYPE`,
/// `NOTLOCK`); a caller's argument the server refused without writing anything (`LIMIT`: a
/// semaphore stores another limit); anything else is the server's.
fn kind_of_code(code: &str) -> ErrorKind {
    match code {
        "WRONGTYPE" | "NOTLOCK" => ErrorKind::WrongType,
        "LIMIT" => ErrorKind::InvalidInput,
        _ => ErrorKind::Server,
    }
}

impl From<redis::RedisError> for Error {
    fn from(err: redis::RedisError) -> Self {
        let kind = if err.is_timeout() {
            ErrorKind::Timeout
        } else if err.is_io_error()
            || err.is_connection_dropped()
            || err.is_connection_refusal()
            || matches!(
                err.kind(),
                redis::ErrorKind::Server(redis::ServerErrorKind::BusyLoading)
                    // The cluster client has no connection to the slot's node (its master died
                    // and no replica took over yet): nothing was sent.
                    | redis::ErrorKind::ClusterConnectionNotFound
            )
        {
            ErrorKind::Connection
        } else {
            err.code().map_or(ErrorKind::Server, kind_of_code)
        };
        let code = err.code().map(str::to_owned);
        let message = match (err.code(), err.detail()) {
            (Some(code), Some(detail)) => format!("{code} {detail}"),
            _ => err.to_string(),
        };
        // A server that rejects a command echoes its first arguments ("... with args beginning
        // with: 'sha' '1' 'key' 'tl1:...'"); for unlock and renew that is the lease, the
        // credential. Never carry it into messages and logs.
        let (message, source) = match message.find("with args beginning with") {
            Some(at) => (
                format!("{}with args beginning with: (redacted)", &message[..at]),
                None,
            ),
            None => (message, Some(err)),
        };
        Error {
            kind,
            message,
            code,
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_is_send_sync_static() {
        fn assert<T: Send + Sync + 'static + std::error::Error>() {}
        assert::<Error>();
    }

    #[test]
    fn rejected_command_arguments_are_not_echoed() {
        let err = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "An error was signalled by the server",
            "unknown command 'EVALSHA', with args beginning with: 'abc' '1' 'k' 'tl1:1:2:secretnonce'".to_owned(),
        ));
        let ours = Error::from(err);
        assert!(!ours.to_string().contains("secretnonce"), "{ours}");
        assert!(ours.to_string().contains("(redacted)"), "{ours}");
        assert!(!format!("{ours:?}").contains("secretnonce"), "{ours:?}");
    }

    #[test]
    fn reply_codes_map_to_kinds() {
        assert_eq!(
            Error::from_reply("WRONGTYPE", "x").kind(),
            ErrorKind::WrongType
        );
        assert_eq!(
            Error::from_reply("NOTLOCK", "x").kind(),
            ErrorKind::WrongType
        );
        assert_eq!(Error::from_reply("ERR", "x").kind(), ErrorKind::Server);
        assert_eq!(
            Error::from_reply("LIMIT", "x").kind(),
            ErrorKind::InvalidInput
        );
    }

    #[test]
    fn failover_replies_are_transient_and_answers_are_not() {
        for code in ["CLUSTERDOWN", "MOVED", "TRYAGAIN", "LOADING", "READONLY"] {
            let err = Error::from_reply(code, "x");
            assert!(err.is_transient(), "{code}");
            assert_eq!(err.code(), Some(code));
        }
        assert!(Error::new(ErrorKind::Timeout, "t").is_transient());
        assert!(Error::new(ErrorKind::Connection, "c").is_transient());
        for code in ["ERR", "WRONGTYPE", "NOPERM", "NOSCRIPT"] {
            assert!(!Error::from_reply(code, "x").is_transient(), "{code}");
        }
        let moved = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::Moved),
            "An error was signalled by the server",
            "3999 127.0.0.1:6381".to_owned(),
        ));
        let moved = Error::from(moved);
        assert!(moved.is_transient(), "{moved} {:?}", moved.code());
    }
}
