//! What the locks record through the `metrics` facade (issue #15 §2; feature `metrics`, which
//! this crate's tests turn on), on a real `redis-server`, read back from `metrics-util`'s
//! `DebuggingRecorder`: acquisitions by outcome (acquired, busy, timed out, cancelled), renewals, a loss, releases, and the wait, hold
//! and handoff histograms, each labelled by lock kind and never by lock name.
//!
//! One test: the recorder is global, and the labels are the same for every lock of a kind.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use support::RedisServer;
use tairlock::observe::metrics as names;
use tairlock::{ExpireLock, Options, Unlock};
use tairlock_rwlock::Release;

/// One metric series: its name and its labels, sorted.
type Series = (String, Vec<(String, String)>);

#[derive(Debug, Default)]
struct Recorded {
    counters: BTreeMap<Series, u64>,
    histograms: BTreeMap<Series, Vec<f64>>,
}

impl Recorded {
    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.counters
            .get(&series(name, labels))
            .copied()
            .unwrap_or(0)
    }

    fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> &[f64] {
        self.histograms
            .get(&series(name, labels))
            .map_or(&[], Vec::as_slice)
    }
}

fn series(name: &str, labels: &[(&str, &str)]) -> Series {
    let mut labels: Vec<_> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    labels.sort();
    (name.to_owned(), labels)
}

fn snapshot(snapshotter: &metrics_util::debugging::Snapshotter) -> Recorded {
    let mut recorded = Recorded::default();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let mut labels: Vec<_> = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        labels.sort();
        let series = (key.name().to_owned(), labels);
        match value {
            DebugValue::Counter(n) => {
                recorded.counters.insert(series, n);
            }
            DebugValue::Histogram(values) => {
                recorded
                    .histograms
                    .insert(series, values.into_iter().map(|v| v.into_inner()).collect());
            }
            DebugValue::Gauge(_) => {}
        }
    }
    recorded
}

#[tokio::test]
async fn acquisitions_renewals_losses_and_releases_are_counted_by_kind() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("a recorder was installed already");
    names::describe();

    let server = RedisServer::start();
    // Renewed every second: a waiter sleeps no longer than the holder's remaining time (two to
    // three seconds), so only the release's notification wakes it before the release below.
    let options = Options::default().watchdog_lease(Duration::from_secs(3));
    let locks = ExpireLock::with_options(server.store().await, options.clone());
    // Another client: its waits do not line up behind ours locally.
    let other = ExpireLock::with_options(server.store().await, options);
    let name = "metered";

    let first = locks.lock(name).await.unwrap();
    // Busy (one attempt), then timed out (a 150 ms wait).
    assert!(other.try_lock(name).await.unwrap().is_none());
    let waited = other.try_lock_for(name, Duration::from_millis(150)).await;
    assert!(waited.unwrap().is_none());
    // Cancelled: a wait dropped by its caller.
    let dropped = tokio::time::timeout(Duration::from_millis(100), other.lock(name)).await;
    assert!(dropped.is_err());
    // A waiter that the release wakes (by notification), then the release: a handoff.
    let waiter = {
        let other = other.clone();
        tokio::spawn(async move { other.lock(name).await })
    };
    // Renewed once meanwhile.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(first.release().await.unwrap(), Unlock::Released);
    let second = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter did not get the lock")
        .unwrap()
        .unwrap();
    // Lost: the key deleted behind the holder's back; then the release finds nothing.
    let key = format!("tairlock:{{{name}}}");
    assert_eq!(server.cli(&["DEL", &key]), "1");
    tokio::time::timeout(Duration::from_secs(5), second.lost())
        .await
        .expect("the loss was not noticed");
    assert_eq!(second.release().await.unwrap(), Unlock::NotHeld);
    // The reader/writer lock's kinds: `read` and `write`.
    let rw = tairlock_rwlock::RwLock::new(server.store().await);
    let read = rw.read("metered-rw").await.unwrap();
    assert_eq!(read.release().await.unwrap(), Release::Released);
    let write = rw.write("metered-rw").await.unwrap();
    assert_eq!(write.release().await.unwrap(), Release::Released);

    // The semaphore's kind: a permit whose holder was deleted is lost at its next renewal.
    let sem = tairlock::Semaphore::new(server.store().await, 2);
    let permit = sem.acquire("metered-sem", 1).await.unwrap();
    let holders = sem.keys("metered-sem").unwrap().holders;
    assert_eq!(server.cli(&["DEL", &holders]), "1");
    let renewed = permit.renew(Duration::from_secs(3)).await;
    assert!(renewed.unwrap_err().is_lease_lost());
    assert_eq!(permit.release().await.unwrap(), Unlock::NotHeld);

    let m = snapshot(&snapshotter);
    let expire = [("kind", "expire")];
    let acquisitions = |outcome| {
        m.counter(
            names::ACQUISITIONS,
            &[("kind", "expire"), ("outcome", outcome)],
        )
    };
    assert_eq!(acquisitions("acquired"), 2, "{m:#?}");
    assert_eq!(acquisitions("busy"), 1, "{m:#?}");
    assert_eq!(acquisitions("timed_out"), 1, "{m:#?}");
    assert_eq!(acquisitions("cancelled"), 1, "{m:#?}");
    assert_eq!(acquisitions("error"), 0, "{m:#?}");
    let wait = m.histogram(
        names::ACQUIRE_WAIT,
        &[("kind", "expire"), ("outcome", "timed_out")],
    );
    assert_eq!(wait.len(), 1, "{m:#?}");
    assert!(wait[0] >= 0.15, "{wait:?}");
    let acquired_waits = m.histogram(
        names::ACQUIRE_WAIT,
        &[("kind", "expire"), ("outcome", "acquired")],
    );
    assert_eq!(acquired_waits.len(), 2, "{m:#?}");
    // The woken waiter waited for the release, some 1.3 s.
    assert!(
        acquired_waits.iter().any(|w| *w >= 1.0),
        "{acquired_waits:?}"
    );
    let handoff = m.histogram(names::HANDOFF, &expire);
    assert_eq!(handoff.len(), 1, "{m:#?}");
    assert!(handoff[0] < 1.0, "{handoff:?}");

    let renewals =
        |outcome| m.counter(names::RENEWALS, &[("kind", "expire"), ("outcome", outcome)]);
    assert!(renewals("renewed") >= 1, "{m:#?}");
    assert_eq!(renewals("lost"), 1, "{m:#?}");
    assert_eq!(
        m.counter(
            names::LEASES_LOST,
            &[("kind", "expire"), ("reason", "gone")]
        ),
        1,
        "{m:#?}"
    );
    let releases =
        |outcome| m.counter(names::RELEASES, &[("kind", "expire"), ("outcome", outcome)]);
    assert_eq!(releases("released"), 1, "{m:#?}");
    assert_eq!(releases("not_held"), 1, "{m:#?}");
    let held = m.histogram(names::HOLD, &expire);
    assert_eq!(held.len(), 2, "{m:#?}");
    assert!(held.iter().any(|h| *h >= 1.3), "{held:?}");

    for kind in ["read", "write"] {
        let labels = [("kind", kind), ("outcome", "acquired")];
        assert_eq!(m.counter(names::ACQUISITIONS, &labels), 1, "{m:#?}");
        let labels = [("kind", kind), ("outcome", "released")];
        assert_eq!(m.counter(names::RELEASES, &labels), 1, "{m:#?}");
        assert_eq!(
            m.histogram(names::HOLD, &[("kind", kind)]).len(),
            1,
            "{m:#?}"
        );
    }

    let semaphore = |series, label: (&'static str, &'static str)| {
        m.counter(series, &[("kind", "semaphore"), label])
    };
    assert_eq!(
        semaphore(names::ACQUISITIONS, ("outcome", "acquired")),
        1,
        "{m:#?}"
    );
    assert_eq!(
        semaphore(names::LEASES_LOST, ("reason", "gone")),
        1,
        "{m:#?}"
    );
    assert_eq!(
        semaphore(names::RELEASES, ("outcome", "not_held")),
        1,
        "{m:#?}"
    );

    // No series is labelled with the lock's name.
    for (series_name, labels) in m.counters.keys().chain(m.histograms.keys()) {
        assert!(series_name.starts_with("tairlock_"), "{series_name}");
        assert!(
            labels.iter().all(|(_, v)| !v.contains(name)),
            "{series_name} {labels:?}"
        );
    }
}
