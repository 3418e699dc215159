//! The engine's map of local wait queues: whoever leaves last removes the name's queue.
//!
//! Each acquisition holds a [`Ticket`](crate::engine::Ticket) (a place in the local queue of
//! its lock name) while it waits and attempts; the map keeps a name's queue while anyone holds
//! one. Two tickets of one name dropped at once on two threads must leave the map empty: a
//! count read under the map's lock while the other ticket's handle is released after it would
//! leave the entry behind for good (one per name ever contended).
//!
//! Threads: `a` and `b`, each holding a ticket for one name and dropping it (optionally after
//! taking a second one, a waiter that comes back), and the main thread, which checks the map
//! once both are done.

use std::sync::Arc;

use super::harness::{self, Findings, Trace, explore, spawn};
use crate::engine::Waiters;

#[test]
fn loom_local_queue_is_removed_by_the_last_to_leave() {
    let findings = Arc::new(Findings::default());
    let seen = findings.clone();
    explore("local_queue", 3, &findings, move || {
        let waiters = Arc::new(Waiters::default());
        let threads: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|who| {
                let waiters = waiters.clone();
                spawn(who, move || {
                    let ticket = waiters.ticket("orders");
                    loom::thread::yield_now();
                    drop(ticket);
                    if who == "a" {
                        // A waiter that comes back at once, while `b` may still be leaving.
                        drop(waiters.ticket("orders"));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // Nothing of the store is involved: an empty trace for the report.
        let trace = Trace::attach(&harness::store(), &[]);
        if waiters.queued_names() != 0 {
            let found = ["every ticket was dropped; the name's queue stayed".to_owned()];
            seen.record("leaked queue", &found, &trace);
        }
    });
    findings.assert_none("local_queue");
}
