//! The shared read hold's local protocol ([`ShareState`]: join, leave, linger, revoke) against a
//! concurrent writer, over every interleaving up to the preemption bound.
//!
//! One client holds a shared server read hold with one local reader inside (the main thread).
//! A second local reader tries to join; a writer raises its intent, announces it, and takes the
//! lock once the client's server reader is gone (a few attempts, then it gives up); the client's
//! background thread delivers the announcement (or misses it, when it runs first) and then
//! fires the linger timer. The server is one mutex: the client's reader entry, the writer.
//!
//! | property | checked where |
//! |---|---|
//! | a local reader is inside only while the client's server reader exists | each reader's critical section |
//! | the writer is never in while a local reader is inside | the writer's critical section |
//! | a closed hold's server reader is given back | the end of every execution |
//!
//! A mutant that lets readers join without asking the state (as a bare counter would) must be
//! caught: a reader then joins a hold whose release is decided, and runs beside the writer.

use std::sync::Arc;

use loom::sync::Mutex;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::thread;

use crate::share_state::{Leave, ShareState};

#[derive(Default)]
struct Server {
    /// The client's one reader entry in the readers set.
    reader: bool,
    writer: bool,
}

struct World {
    state: Mutex<ShareState>,
    server: Mutex<Server>,
    /// Local readers in their critical section.
    inside: AtomicUsize,
    /// The generation of a linger in progress.
    linger: Mutex<Option<u64>>,
    announced: AtomicBool,
    /// The mutant: join without asking the state.
    bare_join: bool,
}

impl World {
    fn new(lingers: bool, bare_join: bool) -> Arc<Self> {
        Arc::new(World {
            state: Mutex::new(ShareState::new(lingers)),
            server: Mutex::new(Server {
                reader: true,
                writer: false,
            }),
            inside: AtomicUsize::new(0),
            linger: Mutex::new(None),
            announced: AtomicBool::new(false),
            bare_join,
        })
    }

    /// The server release of the client's reader (its `read_release`).
    fn release(&self) {
        self.server.lock().unwrap().reader = false;
    }

    fn read_section(&self) {
        self.inside.fetch_add(1, Ordering::SeqCst);
        {
            let server = self.server.lock().unwrap();
            assert!(
                server.reader,
                "a local reader inside without a server reader"
            );
            assert!(!server.writer, "a local reader beside the writer");
        }
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }

    fn leave(&self) {
        let step = self.state.lock().unwrap().leave();
        match step {
            Leave::Stay => {}
            Leave::Linger(generation) => *self.linger.lock().unwrap() = Some(generation),
            Leave::Release => self.release(),
        }
    }

    fn join(&self) {
        let joined = if self.bare_join {
            true
        } else {
            self.state.lock().unwrap().join()
        };
        if joined {
            self.read_section();
            self.leave();
        }
        // Refused: the reader goes to the server, where the writer's intent keeps it out.
    }

    fn write(&self) {
        // write_acquire: refused by the reader, raises the intent and announces it.
        self.announced.store(true, Ordering::SeqCst);
        for _ in 0..3 {
            let entered = {
                let mut server = self.server.lock().unwrap();
                if server.reader {
                    false
                } else {
                    server.writer = true;
                    true
                }
            };
            if entered {
                assert_eq!(
                    self.inside.load(Ordering::SeqCst),
                    0,
                    "the writer beside a local reader"
                );
                self.server.lock().unwrap().writer = false;
                return;
            }
            thread::yield_now();
        }
    }

    /// The listener (hears the announcement unless it comes later), then the linger timer.
    fn background(&self) {
        if self.announced.load(Ordering::SeqCst) && self.state.lock().unwrap().revoke() {
            self.release();
        }
        let pending = *self.linger.lock().unwrap();
        if let Some(generation) = pending
            && self.state.lock().unwrap().linger_over(generation)
        {
            self.release();
        }
    }
}

fn model(lingers: bool, bare_join: bool) {
    let mut builder = loom::model::Builder::new();
    let bound = *builder.preemption_bound.get_or_insert(3);
    let executions = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = executions.clone();
    builder.check(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let world = World::new(lingers, bare_join);
        let threads = [
            {
                let w = world.clone();
                thread::spawn(move || w.join())
            },
            {
                let w = world.clone();
                thread::spawn(move || w.write())
            },
            {
                let w = world.clone();
                thread::spawn(move || w.background())
            },
        ];
        // The reader already inside.
        world.read_section();
        world.leave();
        for t in threads {
            t.join().unwrap();
        }
        let closed = {
            let state = world.state.lock().unwrap();
            // Revoked and idle is closed: the revocation or the last leave decided the release.
            state.readers() == 0 && !state.is_open()
        };
        if closed {
            assert!(
                !world.server.lock().unwrap().reader,
                "a closed hold kept its server reader"
            );
        }
    });
    eprintln!(
        "loom model share (linger {lingers}): {} executions, preemption bound {bound}",
        executions.load(std::sync::atomic::Ordering::Relaxed)
    );
}

#[test]
fn loom_share_join_leave_revoke_without_linger() {
    model(false, false);
}

#[test]
fn loom_share_join_leave_revoke_with_linger() {
    model(true, false);
}

#[test]
#[should_panic(expected = "local reader")]
fn loom_share_mutant_bare_join_is_caught() {
    model(true, true);
}
