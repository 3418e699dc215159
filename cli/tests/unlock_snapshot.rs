//! `tairlock unlock --force --rw` releases the holds one snapshot saw, and leaves alone every
//! hold taken after it (issue 26 §4), with a writer told apart by its fencing token: the
//! command's library function ([`tairlock_cli::unlock::rw`]) on the embedded store, with a hook
//! that changes the lock right after the snapshot is read.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tairlock::store::intercept::{Command, Hook, Intercept, Run};
use tairlock::{Keyspace, Lease, MemoryStore};
use tairlock_rwlock::WriteAttempt;
use tairlock_rwlock::{Options, RwLock};

const NAME: &str = "doc";
const LEASE: Duration = Duration::from_secs(30);

type Change = Box<dyn FnOnce(RwLock<MemoryStore>) -> ChangeFuture + Send>;
type ChangeFuture = std::pin::Pin<Box<dyn Future<Output = Option<Lease>> + Send>>;

/// Runs `change` once, right after the first snapshot (`INSPECT`) was read, on the store
/// behind the hook, and keeps the write lease it returns.
struct AfterSnapshot {
    rw: RwLock<MemoryStore>,
    change: Mutex<Option<Change>>,
    taken: Mutex<Option<Lease>>,
}

impl Hook for AfterSnapshot {
    fn around<'a>(&'a self, command: Command<'a>, run: Run<'a>) -> Run<'a> {
        let Command::Eval { script, .. } = command else {
            return run;
        };
        if !std::ptr::eq(script, &tairlock_rwlock::scripts::INSPECT) {
            return run;
        }
        Box::pin(async move {
            let reply = run.await;
            let change = self.change.lock().take();
            if let Some(change) = change {
                *self.taken.lock() = change(self.rw.clone()).await;
            }
            reply
        })
    }
}

fn after_snapshot(rw: &RwLock<MemoryStore>, change: Change) -> Arc<AfterSnapshot> {
    Arc::new(AfterSnapshot {
        rw: rw.clone(),
        change: Mutex::new(Some(change)),
        taken: Mutex::new(None),
    })
}

async fn unlock(
    store: &MemoryStore,
    hook: &Arc<AfterSnapshot>,
) -> tairlock_cli::unlock::UnlockReport {
    let hooked = Intercept::shared(store.clone(), hook.clone());
    tairlock_cli::unlock::rw(hooked, Keyspace::default(), NAME)
        .await
        .unwrap()
}

fn acquired(attempt: WriteAttempt) -> Lease {
    match attempt {
        WriteAttempt::Acquired(lease) => lease.lease().clone(),
        other => panic!("not acquired: {other:?}"),
    }
}

/// The snapshot sees a reader and a fair writer queued behind it, its intent up. Right after,
/// the reader leaves and the fair writer takes the lock under the nonce of that intent and
/// place. Abandoning the intent, or clearing the place, must not delete the writer's new lease.
#[tokio::test]
async fn a_fair_writer_that_got_in_after_the_snapshot_keeps_the_lock() {
    let store = MemoryStore::new();
    let rw = RwLock::with_options(store.clone(), Options::default().fair(true));
    let intent = Some(Duration::from_secs(5));
    assert!(matches!(
        rw.read_acquire(NAME, "beef01", LEASE).await.unwrap(),
        tairlock_rwlock::ReadAttempt::Acquired { .. }
    ));
    let queued = rw
        .fair_write_acquire(NAME, "cafe01", LEASE, intent, true)
        .await
        .unwrap();
    assert!(matches!(queued, WriteAttempt::Blocked { .. }), "{queued:?}");
    let hook = after_snapshot(
        &rw,
        Box::new(move |rw| {
            Box::pin(async move {
                assert!(rw.read_release(NAME, "beef01").await.unwrap());
                let got = rw.fair_write_acquire(NAME, "cafe01", LEASE, intent, true);
                Some(acquired(got.await.unwrap()))
            })
        }),
    );
    let report = unlock(&store, &hook).await;
    let taken = hook.taken.lock().clone().unwrap();
    assert_eq!(
        rw.inspect(NAME).await.unwrap().writer,
        Some(taken),
        "a writer that got in after the snapshot was deleted: {report:?}"
    );
    assert_eq!(report.writer, Some(false));
}

/// The snapshot sees writer A. Right after, A releases and writer B takes the lock. The release
/// of A's lease finds another lease: B's (another fencing token), not A's renewal, so B stays.
#[tokio::test]
async fn a_new_writer_after_the_snapshot_is_not_taken_for_a_renewal() {
    let store = MemoryStore::new();
    let rw = RwLock::new(store.clone());
    let a = acquired(rw.write_acquire(NAME, "aa01", LEASE, None).await.unwrap());
    let hook = after_snapshot(
        &rw,
        Box::new(move |rw| {
            Box::pin(async move {
                rw.write_release(NAME, &a).await.unwrap();
                Some(acquired(
                    rw.write_acquire(NAME, "bb02", LEASE, None).await.unwrap(),
                ))
            })
        }),
    );
    let report = unlock(&store, &hook).await;
    let b = hook.taken.lock().clone().unwrap();
    assert_eq!(
        rw.inspect(NAME).await.unwrap().writer,
        Some(b),
        "a new writer was deleted as if it were a renewal: {report:?}"
    );
    assert_eq!(report.writer, Some(false));
}

/// The snapshot sees writer A; right after, A renews (its lease rotates, its fencing token
/// stays): the renewed lease is released.
#[tokio::test]
async fn a_writer_that_renewed_after_the_snapshot_is_released() {
    let store = MemoryStore::new();
    let rw = RwLock::new(store.clone());
    let a = acquired(rw.write_acquire(NAME, "aa01", LEASE, None).await.unwrap());
    let hook = after_snapshot(
        &rw,
        Box::new(move |rw| {
            Box::pin(async move {
                let renewed = rw.write_renew(NAME, &a, LEASE).await.unwrap().unwrap();
                assert_eq!(renewed.fence(), a.fence());
                Some(renewed.lease().clone())
            })
        }),
    );
    let report = unlock(&store, &hook).await;
    assert_eq!(rw.inspect(NAME).await.unwrap().writer, None);
    assert_eq!(
        (report.outcome.as_str(), report.writer),
        ("deleted", Some(true))
    );
}

/// A semaphore's holders the snapshot saw are given back (each guard finds its permits gone at
/// its next renewal); a holder admitted after the snapshot keeps its permits.
#[tokio::test]
async fn a_semaphore_is_force_released_as_of_its_snapshot() {
    let store = MemoryStore::new();
    let sem = tairlock::Semaphore::new(store.clone(), 3);
    let a = sem.acquire("pool", 1).await.unwrap();
    let b = sem.acquire("pool", 1).await.unwrap();
    let late = Arc::new(Mutex::new(None));
    let hook = Arc::new(LateHolder {
        sem: sem.clone(),
        late: late.clone(),
    });
    let report = tairlock_cli::unlock::sem(
        Intercept::shared(store.clone(), hook),
        Keyspace::default(),
        "pool",
    )
    .await
    .unwrap();
    assert_eq!(
        (report.outcome.as_str(), report.holders),
        ("deleted", Some(2))
    );
    let late = late.lock().take().expect("admitted after the snapshot");
    let left = sem.inspect("pool").await.unwrap();
    assert_eq!(left.holders.len(), 1, "{left:?}");
    assert_eq!(left.holders[0].nonce, late.nonce);
    for guard in [a, b] {
        assert!(guard.renew(LEASE).await.unwrap_err().is_lease_lost());
    }
}

/// Takes a permit right after the first `SEM_INSPECT`.
struct LateHolder {
    sem: tairlock::Semaphore<MemoryStore>,
    late: Arc<Mutex<Option<tairlock::semaphore::Permit>>>,
}

impl Hook for LateHolder {
    fn around<'a>(&'a self, command: Command<'a>, run: Run<'a>) -> Run<'a> {
        let Command::Eval { script, .. } = command else {
            return run;
        };
        if !std::ptr::eq(script, &tairlock::scripts::SEM_INSPECT) {
            return run;
        }
        Box::pin(async move {
            let reply = run.await;
            if self.late.lock().is_none() {
                let got = self.sem.attempt("pool", 1, LEASE, "0c").await.unwrap();
                let tairlock::semaphore::PermitAttempt::Acquired(permit) = got else {
                    panic!("a free permit: {got:?}");
                };
                *self.late.lock() = Some(permit);
            }
            reply
        })
    }
}
