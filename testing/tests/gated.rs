//! The gated store's own promises: exact interleavings on the embedded store, and a clear
//! failure, naming what every client waits on, when the schedule no longer matches the code.

use std::time::Duration;

use tairlock::{MemoryStore, Store};
use tairlock_testing::gated::Gate;

fn panic_message(err: tokio::task::JoinError) -> String {
    let panic = err.into_panic();
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

async fn until_waiting(gate: &Gate, n: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while gate.waiting().len() < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "waiting: {:?}",
            gate.waiting()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test]
async fn commands_run_in_the_order_the_test_names() {
    let gate = Gate::new();
    let store = MemoryStore::new();
    let (c1, c2) = (
        gate.client("C1", store.clone()),
        gate.client("C2", store.clone()),
    );
    let t1 = tokio::spawn(async move { c1.set_nx("k", b"one").await });
    let t2 = tokio::spawn(async move { c2.set_nx("k", b"two").await });
    until_waiting(&gate, 2).await;
    assert_eq!(gate.waiting(), ["C1: SETNX", "C2: SETNX"]);
    // C2 first, though C1 may have sent first.
    gate.step("C2", "SETNX").await;
    gate.step("C1", "SETNX").await;
    assert!(gate.join(t2).await.unwrap());
    assert!(!gate.join(t1).await.unwrap());
    assert_eq!(store.get("k").await.unwrap(), Some(b"two".to_vec()));
    assert_eq!(
        gate.log(),
        [
            ("C2".to_owned(), "SETNX".to_owned()),
            ("C1".to_owned(), "SETNX".to_owned())
        ]
    );
}

#[tokio::test]
async fn a_schedule_that_no_longer_matches_names_what_every_client_waits_on() {
    let gate = Gate::new();
    let store = MemoryStore::new();
    let (c1, c2) = (
        gate.client("C1", store.clone()),
        gate.client("C2", store.clone()),
    );
    let _t1 = tokio::spawn(async move { c1.set_nx("k", b"one").await });
    let _t2 = tokio::spawn(async move { c2.get("k").await });
    until_waiting(&gate, 2).await;
    let g = gate.clone();
    let err = tokio::spawn(async move { g.step("C1", "GET").await })
        .await
        .unwrap_err();
    let message = panic_message(err);
    assert!(
        message.contains("C1 sent SETNX but the schedule expects GET"),
        "{message}"
    );
    assert!(message.contains("C2: GET"), "{message}");
    assert_eq!(store.get("k").await.unwrap(), None, "nothing ran");
}
