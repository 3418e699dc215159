//! The one place blocking twins wait for a future, and background work finds a runtime.
//!
//! Public so that the lock kinds of `tairlock-legacy` and `tairlock-rwlock` block and spawn
//! exactly as the core's do.

use std::future::Future;
use std::sync::LazyLock;

use tokio::runtime::{Builder, Handle, Runtime};

/// A small runtime for stores that bring none (the embedded store) when there is no ambient
/// one: blocking callers run on it, and guards spawn their watchdogs and background releases
/// on it.
static FALLBACK: LazyLock<Runtime> = LazyLock::new(|| {
    Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("tairlock-background")
        .enable_all()
        .build()
        .expect("tairlock: cannot start its background runtime")
});

/// Where to spawn background work (watchdogs, background releases): the store's runtime, else
/// the ambient one, else a small background runtime of tairlock's.
pub fn spawn_handle(store_runtime: Option<Handle>) -> Handle {
    store_runtime
        .or_else(|| Handle::try_current().ok())
        .unwrap_or_else(|| FALLBACK.handle().clone())
}

/// Run `fut` to completion on this thread, for the `blocking_*` twins; `what` names the method
/// in the panic message.
///
/// # Panics
///
/// When called from inside an async runtime.
///
/// With a runtime handle (a Redis store's), that runtime drives the I/O: it must be a
/// multi-thread runtime, or one owned by the store ([`RedisStore::blocking_connect`]). Without
/// one (the embedded store), a small background runtime of tairlock's does.
///
/// [`RedisStore::blocking_connect`]: crate::RedisStore::blocking_connect
#[track_caller]
pub fn block_on<F: Future>(runtime: Option<Handle>, what: &str, fut: F) -> F::Output {
    if Handle::try_current().is_ok() {
        panic!(
            "tairlock: `{what}` was called from inside an async runtime, where blocking would stall \
             it; call the async method and `.await` it instead"
        );
    }
    runtime
        .unwrap_or_else(|| FALLBACK.handle().clone())
        .block_on(fut)
}
