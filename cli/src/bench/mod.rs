//! `tairlock bench`: throughput and latency of each primitive, as ratios to the round-trip floor
//! measured in the same run.
//!
//! The floor is one cycle of the cheapest correct lock there is, sent by a bare redis-rs
//! multiplexed connection — what a hand-written client does, so every ratio includes every
//! client-side cost of this crate: raw `SET key val NX PX` plus an `EVALSHA` compare-and-delete
//! (through the store where there is no single server); and a bare `PING`. Every scenario
//! reports ops/s, p50 and p99 latency, its ratio to the floor where that means something, and the
//! commands it sent per operation (round trips: a script is one command whatever it runs inside;
//! on Redis the notifier's SUBSCRIBE/UNSUBSCRIBE, from `INFO commandstats`, are added).
//!
//! | scenario | one op is | ratio to |
//! |---|---|---|
//! | `floor-cycle` | SET NX PX + EVALSHA compare-and-delete on a bare redis-rs connection | itself (1.0) |
//! | `ping` | PING | — |
//! | `expire-lock-cycle` | `expire_lock` + `expire_unlock` (its release is `DELIFEQ` where the server has it: Valkey 9+) | floor cycle |
//! | `expire-lock-cycle-scripted` | the same with the release always by the `EXPIRE_UNLOCK` script | floor cycle |
//! | `guard-cycle`, `guard-cycle-fair` | [`lock_with_lease`](tairlock::ExpireLock::lock_with_lease) (10 s, no watchdog) + the guard's release, uncontended; plain and fair mode | floor cycle |
//! | `reentrant-reacquire` | re-entry + release of a held reentrant lock | — (zero commands) |
//! | `rw-read-cycle` | RW read acquire + read release | floor cycle |
//! | `rw-read-heavy`, `rw-read-heavy-unshared` | one read of 4 clients × 16 tasks, 95% reads / 5% writes on one key, shared read holds on / off (see [`rw_read_heavy`]) | — (commands per read; writer max wait) |
//! | `legacy-getset-cycle` | GetSetLock (ms unit) acquire + release: SETNX; GET + DEL | floor cycle |
//! | `legacy-scripted-cycle` | ScriptedLock acquire + release | floor cycle |
//! | `contended-handoff` | one acquisition by one of 8 workers holding 1 ms; latency = release → next holder | PING |
//! | `contended-separate-clients` | the same, each worker its own client (its own connection on Redis), as separate processes | PING |
//! | `contended-fair` | the same in fair mode ([`Options::fair`](tairlock::Options::fair)) | PING |
//! | `contended-poll-setnx` | the same with SET NX PX and a 10 ms sleep-retry loop | PING |
//! | `contended-poll-getset` | the same with GetSetLock at its 10 ms poll | PING |
//! | `idle-ping`, `idle-release` | the floors of a forced handoff: one round trip (`PING`; the floor's compare-and-delete script) from a client idle 5–25 ms before each, as the handoff's holder is; on virtual machines an idle client and server pay wake-ups, and a script on an idle server runs cold, which a back-to-back `ping` never shows | — |
//! | `handoff`, `handoff-fair` | forced handoff: a holder releases while one waiter (a client of its own) has been waiting 5–25 ms; latency = release sent → the waiter's guard returned (default mode; fair mode, where the release's announcement hands the lock over) | — |
//! | `semaphore-cycle` | [`Semaphore`](tairlock::Semaphore) attempt + release of one of 3 permits (the note has each one's p50) | floor cycle |
//! | `contended-semaphore` | one acquisition by one of 8 clients (own connections) of 3 permits, holding 1 ms; latency = the wait | — |
//! | `local-waiters-N` | one handoff among N waiters in one client | — (commands per handoff) |
//! | `many-keys-throughput` | one script call, 64 tasks over 1,000 keys | — (compare `redis-benchmark-evalsha`) |
//! | `redis-benchmark-evalsha` | `redis-benchmark -n 200000 -c 50` EVALSHA on the same server | — |
//! | `memory-per-lock`, `memory-per-rwlock` | `MEMORY USAGE` of a held lock's keys; of an RW lock with 8 readers | — |
//! | `many-leases` (only when named, see [`many_leases`]) | `--leases N` guards with the watchdog on, `--lease D` each, held `--hold D`: leases lost, renewals/s, server µs per renewed lease, client CPU and bytes per guard; the note has the acquire and release times | — |
//! | `redlock-cycle` (`--redlock` only, see [`redlock`]) | `Redlock::try_acquire` + `release` over N servers | floor cycle on the first server |
//!
//! Every contended scenario also reports `same_worker_pct` (acquisitions by the worker that held
//! the lock last) and `max_wait_ms` (the longest single wait); `commands_per_op` is per
//! acquisition there.
//!
//! With `--latency D` every connection of the run, the floor's included, crosses a proxy that
//! adds D each way (see [`Network`]); every row's `one_way_latency_us` says D.
//!
//! On a Redis Cluster (`--cluster`) every scenario runs through a
//! [`ClusterStore`](tairlock::ClusterStore); `redis-benchmark-evalsha` and the `memory-per-*` rows are skipped (no
//! single server to point them at) and `commands_per_op` counts the client's commands only.

mod common;
mod contended;
mod counted;
mod floor;
mod handoff;
mod many_leases;
mod network;
pub mod rw_read_heavy;
mod sample;
mod scenarios;
mod semaphore;
mod table;

pub use self::common::{BenchConfig, BenchRow, ManyLeases, ManyLeasesRow, SCENARIOS};
pub use self::counted::{BenchStore, Counted};
pub use self::many_leases::many_leases;
pub use self::network::Network;
pub use self::scenarios::{redlock, run};
pub use self::table::{progress_bar, table};
