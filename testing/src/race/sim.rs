//! Virtual time finer than tokio's timer: the embedded race's clock, to the microsecond.
//!
//! Under a paused tokio clock, every sleep ends on a whole millisecond (tokio's timer ticks in
//! milliseconds, and the clock jumps from one timer to the next), so a simulated 0.05–0.2 ms
//! network hop would cost a whole millisecond. [`Timer::Virtual`] keeps its own time on top of
//! tokio's: tokio's paused clock plus an offset within the current millisecond. A sleep that ends
//! inside the current millisecond is woken by [`Virtual::on_idle`], run by the runtime each time
//! every task is waiting (`on_thread_park`): it moves the offset to the earliest such deadline
//! and wakes its sleeper, exactly as tokio moves its paused clock to the earliest timer. A sleep
//! that ends in a later millisecond first waits for tokio to reach that millisecond. Only the
//! race's own waits use it (network hops, stalls, work, back-off); the library's own timers still
//! tick in whole milliseconds.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use parking_lot::Mutex;
use tairlock::clock::Clock;

const TICK: Duration = Duration::from_millis(1);

/// How the race waits and tells time.
#[derive(Clone)]
pub enum Timer {
    /// tokio's own clock and sleeps (real time against a server, or a runtime without the
    /// [`Virtual::on_idle`] hook).
    Tokio {
        /// The race's time zero.
        start: tokio::time::Instant,
    },
    /// Microsecond virtual time; see the [module docs](self).
    Virtual(Arc<Virtual>),
}

impl fmt::Debug for Timer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Timer::Tokio { .. } => f.write_str("Timer::Tokio"),
            Timer::Virtual(_) => f.write_str("Timer::Virtual"),
        }
    }
}

impl Timer {
    /// tokio's clock, from now.
    pub fn tokio() -> Timer {
        Timer::Tokio {
            start: tokio::time::Instant::now(),
        }
    }

    /// Time since the race's time zero.
    pub fn now(&self) -> Duration {
        match self {
            Timer::Tokio { start } => start.elapsed(),
            Timer::Virtual(v) => v.now(),
        }
    }

    /// Now, as an instant of tokio's clock: to the microsecond on virtual time (tokio's own
    /// `Instant::now()` stays on the whole millisecond there).
    pub fn instant(&self) -> tokio::time::Instant {
        match self {
            Timer::Tokio { .. } => tokio::time::Instant::now(),
            Timer::Virtual(v) => v.start + v.now(),
        }
    }

    /// An instant of tokio's clock as race time (since the race's time zero; zero if before).
    pub fn since_start(&self, at: tokio::time::Instant) -> Duration {
        match self {
            Timer::Tokio { start } => at.saturating_duration_since(*start),
            Timer::Virtual(v) => at.saturating_duration_since(v.start),
        }
    }

    /// Wait `d`.
    pub async fn sleep(&self, d: Duration) {
        match self {
            Timer::Tokio { .. } => tokio::time::sleep(d).await,
            Timer::Virtual(v) => v.sleep(d).await,
        }
    }
}

/// Microsecond virtual time over tokio's paused clock; see the [module docs](self).
pub struct Virtual {
    /// tokio's instant at time zero (the runtime's start, so its timer ticks fall on whole
    /// milliseconds of this clock).
    start: tokio::time::Instant,
    /// The wall-clock time at time zero, for [`Clock`].
    base: Duration,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// tokio's elapsed time when last read, and how far past it virtual time has moved.
    tokio_elapsed: Duration,
    offset: Duration,
    /// Sleepers by (deadline, sequence number).
    sleepers: BTreeMap<(Duration, u64), Waker>,
    next: u64,
}

impl fmt::Debug for Virtual {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Virtual")
            .field("now", &self.now())
            .finish_non_exhaustive()
    }
}

impl Virtual {
    /// Virtual time starting now, at the system's wall-clock time (its whole second). Create it inside the runtime,
    /// before tokio's clock has moved, and hand [`on_idle`](Self::on_idle) to its
    /// `on_thread_park`.
    pub fn new() -> Arc<Virtual> {
        Arc::new(Virtual {
            start: tokio::time::Instant::now(),
            // A whole second: the store counts expiry in whole milliseconds of this clock, so
            // a fraction would make the same seed give another table.
            base: Duration::from_secs(tairlock::clock::SystemClock.now().as_secs()),
            state: Mutex::new(State::default()),
        })
    }

    fn now_locked(&self, s: &mut State) -> Duration {
        let tokio_elapsed = self.start.elapsed();
        if tokio_elapsed > s.tokio_elapsed {
            s.tokio_elapsed = tokio_elapsed;
            s.offset = Duration::ZERO;
        }
        s.tokio_elapsed + s.offset
    }

    /// Time since time zero.
    pub fn now(&self) -> Duration {
        self.now_locked(&mut self.state.lock())
    }

    /// The runtime is idle: if the earliest sleeper's deadline falls before tokio's next
    /// millisecond, move virtual time there and wake it (and any other sleeper due by then).
    pub fn on_idle(&self) {
        let mut s = self.state.lock();
        let now = self.now_locked(&mut s);
        let Some((&(deadline, _), _)) = s.sleepers.first_key_value() else {
            return;
        };
        if deadline >= s.tokio_elapsed + TICK {
            // tokio's timer for that millisecond moves the clock there first.
            return;
        }
        if deadline > now {
            s.offset = deadline - s.tokio_elapsed;
        }
        let now = s.tokio_elapsed + s.offset;
        while let Some(entry) = s.sleepers.first_entry() {
            if entry.key().0 > now {
                break;
            }
            entry.remove().wake();
        }
    }

    /// Wait `d` of virtual time.
    pub fn sleep(self: &Arc<Self>, d: Duration) -> Sleep {
        let mut s = self.state.lock();
        let deadline = self.now_locked(&mut s) + d;
        let seq = s.next;
        s.next += 1;
        drop(s);
        let whole = Duration::from_millis(deadline.as_millis() as u64);
        Sleep {
            clock: self.clone(),
            key: (deadline, seq),
            // tokio reaches the deadline's millisecond by its own timer ...
            tick: (whole > self.start.elapsed())
                .then(|| Box::pin(tokio::time::sleep_until(self.start + whole))),
            // ... and, should nothing call `on_idle`, the next one ends the sleep anyway.
            fallback: Box::pin(tokio::time::sleep_until(self.start + whole + TICK)),
        }
    }
}

impl Clock for Virtual {
    fn now(&self) -> Duration {
        self.base + Virtual::now(self)
    }
}

/// A sleep on [`Virtual`] time.
pub struct Sleep {
    clock: Arc<Virtual>,
    key: (Duration, u64),
    tick: Option<Pin<Box<tokio::time::Sleep>>>,
    fallback: Pin<Box<tokio::time::Sleep>>,
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep")
            .field("deadline", &self.key.0)
            .finish_non_exhaustive()
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(tick) = &mut self.tick {
            if tick.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.tick = None;
        }
        let fallback = self.fallback.as_mut().poll(cx).is_ready();
        let clock = self.clock.clone();
        let mut s = clock.state.lock();
        if fallback || clock.now_locked(&mut s) >= self.key.0 {
            s.sleepers.remove(&self.key);
            return Poll::Ready(());
        }
        s.sleepers.insert(self.key, cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        self.clock.state.lock().sleepers.remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime(v: &mut Option<Arc<Virtual>>) -> tokio::runtime::Runtime {
        let slot: Arc<Mutex<Option<Arc<Virtual>>>> = Arc::default();
        let hook = slot.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .on_thread_park(move || {
                if let Some(v) = &*hook.lock() {
                    v.on_idle();
                }
            })
            .build()
            .unwrap();
        let clock = rt.block_on(async { Virtual::new() });
        *slot.lock() = Some(clock.clone());
        *v = Some(clock);
        rt
    }

    #[test]
    fn sleeps_end_at_their_microsecond_and_in_order() {
        let mut v = None;
        let rt = runtime(&mut v);
        let v = v.unwrap();
        let ends = rt.block_on(async {
            let ends = Arc::new(Mutex::new(Vec::new()));
            let mut tasks = Vec::new();
            for us in [150u64, 2_300, 75, 1_000, 999, 3_050] {
                let (v, ends) = (v.clone(), ends.clone());
                tasks.push(tokio::spawn(async move {
                    v.sleep(Duration::from_micros(us)).await;
                    ends.lock().push((us, v.now()));
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
            Arc::try_unwrap(ends).unwrap().into_inner()
        });
        let order: Vec<u64> = ends.iter().map(|e| e.0).collect();
        assert_eq!(order, vec![75, 150, 999, 1_000, 2_300, 3_050]);
        for (us, at) in ends {
            assert_eq!(at, Duration::from_micros(us), "sleep of {us} µs");
        }
    }

    #[test]
    fn chained_hops_add_up_exactly() {
        let mut v = None;
        let rt = runtime(&mut v);
        let v = v.unwrap();
        let at = rt.block_on(async {
            for _ in 0..10 {
                v.sleep(Duration::from_micros(130)).await;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
            for _ in 0..3 {
                v.sleep(Duration::from_micros(70)).await;
            }
            v.now()
        });
        // 1.3 ms of hops (tokio at 1 ms), then tokio's 2 ms sleep from its own 1 ms ends at 3 ms,
        // then 0.21 ms more.
        assert_eq!(at, Duration::from_micros(3_210));
    }

    #[test]
    fn without_the_idle_hook_a_sleep_still_ends_by_the_next_tick() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let at = rt.block_on(async {
            let v = Virtual::new();
            v.sleep(Duration::from_micros(300)).await;
            v.now()
        });
        assert_eq!(at, Duration::from_millis(1));
    }
}
