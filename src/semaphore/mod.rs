//! A counting semaphore with per-permit leases: at most `limit` permits of one name are held at
//! once, each holder with its own lease, renewed by its guard's watchdog.
//!
//! [`Semaphore::acquire`] takes `permits` (usually 1) of the semaphore `name`, waiting through
//! the one [acquire engine](crate::engine) until they fit under the limit; the
//! [`PermitGuard`] it returns renews its lease, reports its loss, carries a fencing token, and
//! gives the permits back on release or drop. A holder that crashes stops renewing, and its
//! permits come back when its lease runs out: nobody has to clean up after it.
//!
//! # Key layout
//!
//! | key | type | value | TTL | written by |
//! |---|---|---|---|---|
//! | `<prefix>{name}:sem` | zset | holder nonce → its lease's end (ms, server time) | the longest lease | acquire, renew; members removed by release and by the reaping of each acquire |
//! | `<prefix>{name}:sem:h` | hash | holder nonce → `<permits>:<fence>` | the longest lease | acquire; fields removed with the zset's members |
//! | `<prefix>{name}:sem:fence` | string | the last fencing token issued (decimal) | longest lease + fence retention | acquire (renew stretches it) |
//! | `<prefix>{name}:sem:q` | zset | fair mode: waiter nonce → arrival (µs, server time) | the longest waiter lease | a refused fair acquire (joins, refreshes); removed by its admission, its release (leaving), and the reaping of lapsed places |
//! | `<prefix>{name}:sem:qw` | hash | fair mode: waiter nonce → `<place ends ms>:<permits>` | as `:sem:q` | as `:sem:q` |
//! | `<prefix>{name}:sem:n` | string | the limit (decimal) | as `:sem:fence` | the first acquire admitted or queued; stretched by acquire and renew; [`Semaphore::set_limit`] |
//! | `<prefix>{name}:sem:released` (pub/sub channel, not a key) | | `released` | | a release, or a waiter leaving the queue |
//!
//! Every operation is one script ([`SEM_ACQUIRE`](crate::scripts::SEM_ACQUIRE),
//! [`SEM_RENEW`](crate::scripts::SEM_RENEW), [`SEM_RELEASE`](crate::scripts::SEM_RELEASE),
//! [`SEM_INSPECT`](crate::scripts::SEM_INSPECT),
//! [`SEM_SET_LIMIT`](crate::scripts::SEM_SET_LIMIT)), all the keys share the hash tag `{name}`
//! (one cluster slot), and each is safe to repeat: a holder is named by its nonce, one per
//! acquisition and the same for each of its attempts, so an acquire repeated after a timed-out
//! reply finds the permits it took instead of taking more. Each acquire first reaps the holders
//! whose lease has passed; none of the scripts uses `KEYS`/`SCAN`, and each costs O(holders)
//! (in fair mode O(holders + waiters)).
//!
//! # The limit, and changing it
//!
//! The limit is stored with the semaphore (`:sem:n`), by the first acquire that is admitted or
//! queued, and kept as long as the semaphore's fence state (the longest lease plus the fence
//! retention). Every acquire carries the limit of the [`Semaphore`] it was made with and is
//! refused when the semaphore stores another one, with
//! [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) (`LIMIT semaphore limit is 3,
//! not 5`) and nothing written: clients configured with different limits for one name cannot
//! each count against their own, which would let the largest limit's clients take permits every
//! other client believes do not exist.
//!
//! To change it, an operator calls [`Semaphore::set_limit`] (one script, safe to repeat):
//!
//! - **growing** admits more holders at once;
//! - **shrinking never evicts a live holder**: the holders keep their permits and renew them as
//!   before, and new acquisitions are refused until enough holders have left that they fit;
//! - clients still configured with the old limit are refused with the error above until they
//!   count against the new one ([`Semaphore::with_limit`]); their holders' renewals and
//!   releases go on, since those do not count.
//!
//! A semaphore nobody has used for longer than its fence state is kept forgets its limit with
//! it, and the next acquire stores its own.

//! # Fencing
//!
//! Each acquisition gets a fencing token, `max(last + 1, server time in µs)`, as the expire
//! lock's (see [`expire_lock`](crate::expire_lock)): tokens only grow, across holders and across
//! the fence key expiring. Several holders hold tokens at once; a resource that admits N
//! writers keeps the tokens it saw, not just the largest.
//!
//! # Fairness
//!
//! By default, waiters of one client line up in the engine's local FIFO, but waiters of
//! different clients race for a freed permit, and a waiter for many permits can be overtaken by
//! waiters for fewer.
//!
//! With [`SemaphoreOptions::fair`] (every client of the name should use it), a refused waiting
//! acquire takes a place in a queue on the server, refreshed within its waiter lease, and an
//! acquire is admitted only if the permits held, those of the live waiters queued ahead of it
//! and its own all fit under the limit: first come, first served, and a waiter for many permits
//! holds up those behind it rather than starving. A single attempt (`try_acquire`) does not
//! queue, and is refused while waiters ahead would not fit with it. A release announces on the
//! channel and every waiter tries again (there is no direct handoff to one waiter as in the
//! expire lock's [fair mode](crate::fair)); a waiter that crashed holds up those behind it at
//! most its waiter lease, and one that gives up leaves the queue at once. Plain clients ignore
//! the queue: mixing them with fair ones never breaks the limit, only the order.

//! # Errors, and bad input
//!
//! 0 permits, a limit of 0, more permits than the limit, an empty name, or a lease outside
//! 1 ms..[`MAX_TTL`](crate::MAX_TTL) are [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput),
//! and nothing is sent; a limit other than the one the semaphore stores is the same kind, and
//! nothing is written. A key of the layout holding data of another type (a user's string where
//! the zset goes, ...) is [`ErrorKind::WrongType`](crate::ErrorKind::WrongType), and nothing is
//! changed.

mod acquire;
mod guard;
mod lock;
mod options;

pub use self::guard::PermitGuard;
pub use self::lock::{
    Holder, Permit, PermitAttempt, Semaphore, SemaphoreInspection, SemaphoreKeys,
};
pub use self::options::SemaphoreOptions;
