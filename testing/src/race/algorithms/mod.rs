//! The algorithms `tairlock race` pits against each other, one small file each.
//!
//! An algorithm is written against [`Client`](super::client::Client), which gives it the store
//! (every command it sends goes through the race's audited, latency-adding wrapper), its own
//! clock, and [`Client::pause`](super::client::Client::pause), the points between two of its
//! commands where the scenario may stall or crash it. The engine does the rest: the critical
//! section, the fenced resource, waiting and the counts. The trait and its types are defined
//! in `race/algorithm.rs` and re-exported here.

use tairlock::Store;

pub mod expire_lock;
pub mod fair_expire_lock;
pub mod legacy_getset;
pub mod legacy_scripted;
pub mod legacy_watch;
pub mod naive;
pub mod redlock;
pub mod rw_scripted;
pub mod rw_two_step;
pub mod semaphore;
pub mod token_lock;
mod wake;

pub use self::expire_lock::ExpireLockAlgorithm;
pub use self::fair_expire_lock::FairExpireLock;
pub use self::legacy_getset::LegacyGetSet;
pub use self::legacy_scripted::LegacyScripted;
pub use self::legacy_watch::LegacyWatch;
pub use self::naive::NaiveSetnxExpire;
pub use self::redlock::RedlockAlgorithm;
pub use self::rw_scripted::RwScripted;
pub use self::rw_two_step::RwTwoStep;
pub use self::semaphore::SemaphoreAlgorithm;
pub use self::token_lock::TokenLockAlgorithm;

// Defined a level below, so that the algorithms' files and this list import them one way.
pub use super::algorithm::{Algorithm, Attempt, BoxFuture, Expectation, Holding};
pub use super::audit::{LeaseAt, ServerEnd};

/// Every algorithm that needs no `WATCH` (all but `legacy-watch`), in table order: the list for
/// stores without [`WatchStore`](tairlock_legacy::WatchStore) (every store of this workspace has
/// it; a wrapper store of your own may not).
pub fn all_without_watch<S: Store>() -> Vec<Box<dyn Algorithm<S>>> {
    vec![
        Box::new(NaiveSetnxExpire),
        Box::new(TokenLockAlgorithm),
        Box::new(ExpireLockAlgorithm),
        Box::new(FairExpireLock::default()),
        Box::new(LegacyGetSet),
        Box::new(LegacyScripted),
        Box::new(RwTwoStep),
        Box::new(RwScripted::default()),
        Box::new(RwScripted::fair_writers()),
        Box::new(SemaphoreAlgorithm::default()),
    ]
}

/// Every algorithm, in table order. `legacy-watch` needs `WATCH` transactions, hence the
/// [`WatchStore`](tairlock_legacy::WatchStore) bound (the embedded, Redis and cluster stores
/// have it).
pub fn all<S: tairlock_legacy::WatchStore>() -> Vec<Box<dyn Algorithm<S>>> {
    vec![
        Box::new(NaiveSetnxExpire),
        Box::new(TokenLockAlgorithm),
        Box::new(ExpireLockAlgorithm),
        Box::new(FairExpireLock::default()),
        Box::new(LegacyGetSet),
        Box::new(LegacyWatch),
        Box::new(LegacyScripted),
        Box::new(RwTwoStep),
        Box::new(RwScripted::default()),
        Box::new(RwScripted::fair_writers()),
        Box::new(SemaphoreAlgorithm::default()),
    ]
}
