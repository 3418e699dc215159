//! Loom models: every interleaving of a few clients, a crash and lease expiry, on the embedded
//! store behind loom's mutex.
//!
//! Built only under `--cfg tairlock_loom` (a namespaced cfg: tokio must never see plain
//! `cfg(loom)`); run them with `scripts/loom.sh` (which `scripts/test.sh` calls), or
//! `RUSTFLAGS="--cfg tairlock_loom" cargo test --release --workspace loom`.
//!
//! Each model of a verbatim recipe records every violation it observes across all explored
//! executions and asserts that each expected kind was found at least once, so it fails if the
//! model stops reaching the bad interleaving; each model of a scripted algorithm asserts that
//! nothing was found, and that the hard scenarios (a lease passing under a paused holder, a
//! crash, a stale release) were reached.
//!
//! | model | where | clients | must find | must not find |
//! |---|---|---|---|---|
//! | `loom_naive_setnx_expire_is_caught` | [here](self) | `naive-setnx-expire` ×3, `c1` may crash | foreign deletion (F4), overlap, stuck key (crash between `SETNX` and `EXPIRE`) | — |
//! | `loom_expire_lock_holds` | [here](self) | expire lock ×3 (acquire, renew, release), `c1` may crash | — | foreign deletion, overlap, stuck key, fence order |
//! | `loom_fair_queue_holds` | [here](self) | the expire lock in fair mode ×3 (queue, handoff, confirm, leave), `c1` may crash, waiter leases lapse | — | foreign deletion, overlap, fence order, stuck key, orphaned grant |
//! | `loom_local_queue_is_removed_by_the_last_to_leave` | [here](self) | two waiters of one client for one name leaving at once (one coming back) | — | a name's local queue left behind |
//! | `loom_reentrant_map_holds` | [here](self) | one owner on two threads (one re-entering), another owner | — | local count vs server, double release, foreign release, leaked hold |
//! | `loom_semaphore_holds`, `loom_fair_semaphore_holds` | [here](self) | the semaphore (limit 2; plain, and fair with a queue) ×3: 1, 1 (its first reply lost, repeated under its nonce) and 2 permits, `c1` may crash, leases lapse | — | over limit (locally and on the server), foreign removal, fence order, stuck key, leaked permit, leaked place in the queue |
//! | `loom_legacy_getset_is_caught` | `tairlock-legacy` | `GetSetLock` ×3, `c1` may crash | foreign deletion (F4b), foreign overwrite (F3), overlap | — |
//! | `loom_legacy_watch_holds`, `loom_legacy_scripted_holds` | `tairlock-legacy` | `WatchLock` / `ScriptedLock` ×3 | — | the same, fence order, stuck key |
//! | `loom_two_step_rwlock_is_caught` | `tairlock-rwlock` | `TwoStepRwLock`: 2 readers (`r1` may crash), 1 writer | reader and writer together (I and II), stuck count (III) | — |
//! | `loom_rwlock_fair_release_respects_a_plain_intent` | `tairlock-rwlock` | a fair writer, a plain writer with an intent, a fair writer that queues once, the clock | — | as the fair writers' models, and a fair release granting past a plain writer's live intent |
//! | `loom_rwlock_holds` | `tairlock-rwlock` | `RwLock`: 2 readers (`r1` may crash), 1 writer with intent | — | reader and writer together, stuck key, foreign removal |
//!
//! The [`harness`] is public under the cfg so that `tairlock-legacy` and `tairlock-rwlock` build
//! their models from the same pieces.

pub mod harness;

#[cfg(test)]
mod loom_expire_lock;
#[cfg(test)]
mod loom_fair;
#[cfg(test)]
mod loom_local_queue;
#[cfg(test)]
mod loom_reentrant;
#[cfg(test)]
mod loom_semaphore;
