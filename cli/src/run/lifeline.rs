//! The lifeline between `tairlock run` and its supervisor: one Unix socket pair, a fixed-size
//! frame per message each way, and end of file when either side is gone, however it went.
//!
//! Deadlines cross it as instants of `CLOCK_MONOTONIC`, which both processes read (a
//! `tokio::time::Instant` cannot leave its process): a message that waits in the socket, or a
//! supervisor that reads it late, still acts at the right instant.

use std::io::{self, Read, Write};
use std::time::Duration;

use nix::time::{ClockId, clock_gettime};
use tokio::time::Instant;

/// `tairlock run` to the supervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    /// Start the command; the lease ends at this deadline unless a later one comes.
    Go(Monotonic),
    /// A renewal moved the lease's deadline here.
    Deadline(Monotonic),
    /// `tairlock run` is about to stop (SIGTSTP): stop everything of the command's.
    Hold,
    /// `tairlock run` was continued and has re-checked the lease, which ends at this deadline:
    /// continue what [`Hold`](Order::Hold) (or the terminal) stopped.
    Continue(Monotonic),
    /// The lease is lost: SIGTERM to everything of the command's now, SIGKILL after `--grace`.
    Lost,
    /// Pass this signal on to everything of the command's.
    Signal(i32),
}

/// The supervisor to `tairlock run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Report {
    /// The command runs, as this process (the leader of its own group).
    Started(i32),
    /// The command could not be started; the supervisor exits with this code (126 or 127).
    NotStarted(u8),
    /// No renewal came in time: everything of the command's got SIGTERM at the deadline less
    /// `--grace`.
    Overdue,
    /// Everything of the command's got SIGKILL (`--grace` ran out, or the deadline came).
    Killed,
}

const FRAME: usize = 9;

impl Order {
    fn encode(self) -> [u8; FRAME] {
        let (tag, value) = match self {
            Order::Go(at) => (b'G', at.0),
            Order::Deadline(at) => (b'D', at.0),
            Order::Hold => (b'H', 0),
            Order::Continue(at) => (b'C', at.0),
            Order::Lost => (b'L', 0),
            Order::Signal(signal) => (b'S', signal as u64),
        };
        frame(tag, value)
    }

    fn decode(frame: [u8; FRAME]) -> Option<Order> {
        let (tag, value) = unframe(frame);
        Some(match tag {
            b'G' => Order::Go(Monotonic(value)),
            b'D' => Order::Deadline(Monotonic(value)),
            b'H' => Order::Hold,
            b'C' => Order::Continue(Monotonic(value)),
            b'L' => Order::Lost,
            b'S' => Order::Signal(i32::try_from(value).ok()?),
            _ => return None,
        })
    }
}

impl Report {
    fn encode(self) -> [u8; FRAME] {
        let (tag, value) = match self {
            Report::Started(pid) => (b'P', pid as u64),
            Report::NotStarted(code) => (b'E', u64::from(code)),
            Report::Overdue => (b'O', 0),
            Report::Killed => (b'K', 0),
        };
        frame(tag, value)
    }

    fn decode(frame: [u8; FRAME]) -> Option<Report> {
        let (tag, value) = unframe(frame);
        Some(match tag {
            b'P' => Report::Started(i32::try_from(value).ok()?),
            b'E' => Report::NotStarted(u8::try_from(value).ok()?),
            b'O' => Report::Overdue,
            b'K' => Report::Killed,
            _ => return None,
        })
    }
}

fn frame(tag: u8, value: u64) -> [u8; FRAME] {
    let mut frame = [0u8; FRAME];
    frame[0] = tag;
    frame[1..].copy_from_slice(&value.to_be_bytes());
    frame
}

fn unframe(frame: [u8; FRAME]) -> (u8, u64) {
    let mut value = [0u8; 8];
    value.copy_from_slice(&frame[1..]);
    (frame[0], u64::from_be_bytes(value))
}

/// Send one message. A failure means the other side is gone, which its end of file (or exit)
/// reports on its own: the caller may ignore it.
pub(crate) fn send_order(to: &mut impl Write, order: Order) -> io::Result<()> {
    to.write_all(&order.encode())
}

/// See [`send_order`].
pub(crate) fn send_report(to: &mut impl Write, report: Report) -> io::Result<()> {
    to.write_all(&report.encode())
}

/// The next order; `None` at end of file, on an error or on a frame that makes no sense (the
/// supervisor then treats `tairlock run` as gone).
pub(crate) fn read_order(from: &mut impl Read) -> Option<Order> {
    let mut frame = [0u8; FRAME];
    from.read_exact(&mut frame).ok()?;
    Order::decode(frame)
}

/// The next report; `None` at end of file or on an error.
pub(crate) fn read_report(from: &mut impl Read) -> Option<Report> {
    let mut frame = [0u8; FRAME];
    from.read_exact(&mut frame).ok()?;
    Report::decode(frame)
}

/// An instant of `CLOCK_MONOTONIC`, in nanoseconds: the same clock in every process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Monotonic(u64);

fn monotonic_now() -> u64 {
    clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map(|t| {
            let nanos = Duration::from(t).as_nanos();
            u64::try_from(nanos).unwrap_or(u64::MAX)
        })
        .unwrap_or(0)
}

impl Monotonic {
    /// `at`, a local instant, on the shared clock. The shared clock is read first: the result
    /// errs early, never late.
    pub(crate) fn from_instant(at: Instant) -> Monotonic {
        let shared = monotonic_now();
        let local = Instant::now();
        match at.checked_duration_since(local) {
            Some(ahead) => Monotonic(shared.saturating_add(ahead.as_nanos() as u64)),
            None => Monotonic(shared.saturating_sub(local.duration_since(at).as_nanos() as u64)),
        }
    }

    /// This instant as a local one (now, if it has passed). The local clock is read first: the
    /// result errs early, never late.
    pub(crate) fn to_instant(self) -> Instant {
        let local = Instant::now();
        let shared = monotonic_now();
        local + Duration::from_nanos(self.0.saturating_sub(shared))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_survives_the_trip() {
        let at = Monotonic(123_456_789_012);
        let orders = [
            Order::Go(at),
            Order::Deadline(at),
            Order::Hold,
            Order::Continue(at),
            Order::Lost,
            Order::Signal(15),
        ];
        let mut wire = Vec::new();
        for order in orders {
            send_order(&mut wire, order).unwrap();
        }
        let mut from = wire.as_slice();
        for order in orders {
            assert_eq!(read_order(&mut from), Some(order));
        }
        assert_eq!(read_order(&mut from), None, "end of file");

        let reports = [
            Report::Started(4242),
            Report::NotStarted(126),
            Report::Overdue,
            Report::Killed,
        ];
        let mut wire = Vec::new();
        for report in reports {
            send_report(&mut wire, report).unwrap();
        }
        let mut from = wire.as_slice();
        for report in reports {
            assert_eq!(read_report(&mut from), Some(report));
        }
        assert_eq!(read_order(&mut &[b'?'; FRAME][..]), None, "an unknown tag");
    }

    #[test]
    fn an_instant_crosses_the_shared_clock_without_moving_later() {
        let at = Instant::now() + Duration::from_millis(1500);
        let back = Monotonic::from_instant(at).to_instant();
        assert!(back <= at, "{back:?} is later than {at:?}");
        assert!(at - back < Duration::from_millis(50), "{:?}", at - back);
        let passed = Instant::now() - Duration::from_millis(5);
        assert!(Monotonic::from_instant(passed).to_instant() <= Instant::now());
    }
}
