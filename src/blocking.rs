//! The one place blocking twins wait for a future.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;

/// Run `fut` to completion on this thread.
///
/// With a runtime handle (a Redis store's), the runtime drives the I/O: it must be a
/// multi-thread runtime, or one owned by the store ([`RedisStore::blocking_connect`]). Without
/// one (the embedded store needs no I/O), the future is polled here.
///
/// [`RedisStore::blocking_connect`]: crate::RedisStore::blocking_connect
#[track_caller]
pub(crate) fn block_on<F: Future>(
    runtime: Option<tokio::runtime::Handle>,
    what: &str,
    fut: F,
) -> F::Output {
    if tokio::runtime::Handle::try_current().is_ok() {
        panic!(
            "tairlock: `{what}` was called from inside an async runtime, where blocking would stall \
             it; call the async method and `.await` it instead"
        );
    }
    match runtime {
        Some(handle) => handle.block_on(fut),
        None => park_on(fut),
    }
}

struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

fn park_on<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(out) => return out,
            Poll::Pending => std::thread::park(),
        }
    }
}
