//! Put your own lock code through the tairlock race and through exact interleavings, in your
//! own tests.
//!
//! - [`race`]: the race of `tairlock race` as a library. Contending clients run an
//!   [`Algorithm`](race::Algorithm) under stalls, crashes, clock skew and reply outages
//!   ([`Scenario`](race::scenario::Scenario)), write to a fenced resource inside the critical
//!   section, and a [`Row`](race::Row) per scenario counts overlaps, foreign deletions, stale
//!   writes, stuck locks and late deadlines (a grant trusted beyond its lease's end on the
//!   server, [`race::audit`]), with a verdict; [`report`](race::report) prints the table and
//!   the JSON. On the embedded store it runs on virtual time, deterministic by seed
//!   ([`run_embedded_algorithms`](race::run_embedded_algorithms)); on a server, on real time
//!   ([`run_algorithms`](race::run_algorithms)). The built-in rows
//!   ([`race::algorithms`]) are plain users of the same trait.
//! - [`gated`]: a store on which a test names, command by command, which client's command runs
//!   next, on the embedded store or a server; a step that no longer matches the code fails with
//!   what every client is waiting to send.
//! - Clocks: [`tairlock::clock::VirtualClock`] (moved by the test) and
//!   [`tairlock::clock::SkewedClock`] (a client's clock ahead of or behind another), re-exported
//!   in [`clock`]. Pause points: [`Client::pause`](race::Client::pause) between two commands of
//!   an algorithm, or [`Client::paused_store`](race::Client::paused_store) before each command of
//!   code written against a plain store; a gated client waits before each command until the
//!   test lets it through.
//! - [`proxy`]: a fault-injection TCP proxy in front of a real server (latency, lost replies
//!   to commands the server applied, resets, black holes, stalled connects), per connection.
//! - Store wrappers of your own: [`tairlock::store::intercept::Intercept`], one hook around
//!   each command (the gated store, the race's store and the paused store are three), with
//!   [`tairlock_legacy::watch::WatchHook`] for `WATCH` transactions.
//!
//! Part of tairlock: the locks raced here are those of [`tairlock`], [`tairlock_legacy`] and
//! [`tairlock_rwlock`], and [`tairlock-cli`](https://docs.rs/tairlock-cli)'s `tairlock race`
//! prints this crate's table.
//!
//! # From your lock function to a failing/passing test pair
//!
//! An application's lock, as written years ago, on plain store commands (a bare millisecond
//! timestamp under the key: `tairlock-legacy`'s wire format, so `ScriptedLock` can share it):
//!
//! ```
//! use std::time::Duration;
//! use tairlock::{clock::Clock, Store};
//!
//! pub async fn try_lock<S: Store>(store: &S, clock: &dyn Clock, key: &str, ttl: Duration)
//!     -> tairlock::Result<Option<u64>> {
//!     let now = clock.now().as_millis() as u64;
//!     let expires = now + ttl.as_millis() as u64 + 1;
//!     let value = expires.to_string();
//!     if store.set_nx(key, value.as_bytes()).await? {
//!         return Ok(Some(expires));
//!     }
//!     // Held: take it over if its holder's time is up.
//!     match parse(store.get(key).await?) {
//!         Some(current) if current < now => {
//!             let previous = parse(store.getset(key, value.as_bytes()).await?);
//!             Ok(previous.is_none_or(|p| p < now).then_some(expires))
//!         }
//!         _ => Ok(None),
//!     }
//! }
//!
//! fn parse(raw: Option<Vec<u8>>) -> Option<u64> {
//!     String::from_utf8(raw?).ok()?.parse().ok()
//! }
//!
//! pub async fn unlock<S: Store>(store: &S, clock: &dyn Clock, key: &str) -> tairlock::Result<()> {
//!     let now = clock.now().as_millis() as u64;
//!     if parse(store.get(key).await?).is_some_and(|expires| now < expires) {
//!         store.del(key).await?; // "a live lock": but whose?
//!     }
//!     Ok(())
//! }
//! ```
//!
//! **Race it.** An [`Algorithm`](race::Algorithm) adapter makes it a row; the engine does the
//! rest (the clients, the scenarios, the critical section, the fenced resource, the counts):
//!
//! ```
//! # use std::time::Duration;
//! # use tairlock::{clock::Clock, Store};
//! # async fn try_lock<S: Store>(store: &S, clock: &dyn Clock, key: &str, ttl: Duration)
//! #     -> tairlock::Result<Option<u64>> {
//! #     let now = clock.now().as_millis() as u64;
//! #     let expires = now + ttl.as_millis() as u64 + 1;
//! #     let value = expires.to_string();
//! #     if store.set_nx(key, value.as_bytes()).await? { return Ok(Some(expires)); }
//! #     match parse(store.get(key).await?) {
//! #         Some(current) if current < now => {
//! #             let previous = parse(store.getset(key, value.as_bytes()).await?);
//! #             Ok(previous.is_none_or(|p| p < now).then_some(expires))
//! #         }
//! #         _ => Ok(None),
//! #     }
//! # }
//! # fn parse(raw: Option<Vec<u8>>) -> Option<u64> { String::from_utf8(raw?).ok()?.parse().ok() }
//! # async fn unlock<S: Store>(store: &S, clock: &dyn Clock, key: &str) -> tairlock::Result<()> {
//! #     let now = clock.now().as_millis() as u64;
//! #     if parse(store.get(key).await?).is_some_and(|e| now < e) { store.del(key).await?; }
//! #     Ok(())
//! # }
//! use tairlock::MemoryStore;
//! use tairlock_testing::race::algorithms::LegacyScripted;
//! use tairlock_testing::race::scenario::Scenario;
//! use tairlock_testing::race::{
//!     Algorithm, Attempt, BoxFuture, Client, Expectation, Holding, RaceConfig, Step,
//!     run_embedded_algorithms,
//! };
//!
//! struct MyLock;
//!
//! impl<S: Store> Algorithm<S> for MyLock {
//!     fn name(&self) -> &'static str { "my-lock" }
//!     fn expectation(&self) -> Expectation { Expectation::Safe } // what we believe
//!     fn fenced(&self) -> bool { false }
//!
//!     fn try_acquire<'a>(&'a self, cx: &'a Client<S>, lock: &'a str, ttl: Duration)
//!         -> BoxFuture<'a, Step<Attempt>> {
//!         Box::pin(async move {
//!             // A pause point before each command; this client's (maybe skewed) clock.
//!             let taken = try_lock(&cx.paused_store(), cx.clock().as_ref(), lock, ttl).await?;
//!             Ok(match taken {
//!                 Some(expires) => Attempt::Acquired(Holding {
//!                     value: expires.to_string().into_bytes(), // what we wrote
//!                     fence: None,
//!                     deadline: tokio::time::Instant::now() + ttl,
//!                 }),
//!                 None => Attempt::Busy { retry_after: None },
//!             })
//!         })
//!     }
//!
//!     fn release<'a>(&'a self, cx: &'a Client<S>, lock: &'a str, _: Holding)
//!         -> BoxFuture<'a, Step<()>> {
//!         Box::pin(async move { Ok(unlock(&cx.paused_store(), cx.clock().as_ref(), lock).await?) })
//!     }
//! }
//!
//! // In a plain #[test]: embedded store, virtual time, the same table for the same seed.
//! let config = RaceConfig {
//!     trials: 2,
//!     scenarios: vec![Scenario::LongStalls],
//!     ..RaceConfig::default()
//! };
//! let algorithms: Vec<Box<dyn Algorithm<MemoryStore>>> =
//!     vec![Box::new(MyLock), Box::new(LegacyScripted)];
//! let rows = run_embedded_algorithms(&config, algorithms, |_| {}).unwrap();
//! print!("{}", tairlock_testing::race::report::table(&rows));
//! let (mine, scripted) = (&rows[0], &rows[1]);
//! assert!(mine.broken() && mine.foreign_deletions > 0, "{mine:?}"); // the flaw, counted
//! assert!(!scripted.broken(), "{scripted:?}"); // ScriptedLock keeps its zeros
//! ```
//!
//! **Pin the flaw down.** With [`gated`], the schedule of flaw F4b (an expired holder's
//! release deletes the next holder's lock) as a test that shows the hand-written lock losing
//! C2's lock and `ScriptedLock` keeping it: `testing/tests/my_lock_f4b.rs`, and the whole
//! walk-through as a program: `cargo run -p tairlock-testing --example race_my_lock`.

#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod gated;
pub mod proxy;
pub mod race;

/// The clocks tests give their clients: re-exported from [`tairlock::clock`].
pub mod clock {
    pub use tairlock::clock::{Clock, SharedClock, SkewedClock, SystemClock, VirtualClock};
}
