//! The local bookkeeping of one shared read hold, as a plain state machine: no locks, no I/O.
//! [`Shared`](crate::share::Shared) keeps it behind a mutex; the loom model
//! (`tests/loom_share.rs`) drives this very type against a writer.
//!
//! | event | when | effect |
//! |---|---|---|
//! | [`join`](ShareState::join) | a local reader wants in | admitted (count + 1) unless revoked or closed |
//! | [`leave`](ShareState::leave) | a local reader leaves | count − 1; the last one releases (revoked, or no linger) or lingers |
//! | [`revoke`](ShareState::revoke) | a writer's intent was heard, or a local writer started | no more joins; releases now when idle |
//! | [`give_back_idle`](ShareState::give_back_idle) | a waiting writer was heard under reader preference | releases now when idle; joins still admitted, but the hold no longer lingers once idle |
//! | [`linger_over`](ShareState::linger_over) | the linger of an idle hold passed | releases unless someone joined meanwhile |
//!
//! *Closed* means the server release has been decided (exactly once): from then on nobody
//! joins, so the server entry goes away with no local reader left relying on it.

/// What the last step asks of the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leave {
    /// Other local readers remain: nothing to do.
    Stay,
    /// The hold is idle: release it unless someone joins before `linger_over(generation)`.
    Linger(u64),
    /// Release the server hold now (the state is closed).
    Release,
}

/// The local readers of one shared server read hold.
#[derive(Debug, Clone, Default)]
pub(crate) struct ShareState {
    readers: usize,
    revoked: bool,
    /// A writer waits (reader preference): once idle, release at once instead of lingering.
    unwanted_idle: bool,
    closed: bool,
    lingers: bool,
    /// Bumped by every join: a linger timer started before a join finds it moved.
    generation: u64,
}

impl ShareState {
    /// A hold with its first reader in; `lingers` when an idle hold waits before releasing.
    pub(crate) fn new(lingers: bool) -> Self {
        ShareState {
            readers: 1,
            lingers,
            ..ShareState::default()
        }
    }

    /// Another local reader joins: true if admitted (not revoked, not closed).
    pub(crate) fn join(&mut self) -> bool {
        if self.revoked || self.closed {
            return false;
        }
        self.readers += 1;
        self.generation += 1;
        true
    }

    /// A local reader leaves.
    pub(crate) fn leave(&mut self) -> Leave {
        self.readers = self.readers.saturating_sub(1);
        if self.readers > 0 || self.closed {
            return Leave::Stay;
        }
        if self.revoked || self.unwanted_idle || !self.lingers {
            self.closed = true;
            return Leave::Release;
        }
        Leave::Linger(self.generation)
    }

    /// A writer wants in: no more joins; true when the caller must release now (idle).
    pub(crate) fn revoke(&mut self) -> bool {
        self.revoked = true;
        if self.readers == 0 && !self.closed {
            self.closed = true;
            return true;
        }
        false
    }

    /// A writer waits under reader preference: joins are still admitted, but an idle hold
    /// lingers no more; true when the caller must release now (idle).
    pub(crate) fn give_back_idle(&mut self) -> bool {
        self.unwanted_idle = true;
        if self.readers == 0 && !self.closed {
            self.closed = true;
            return true;
        }
        false
    }

    /// The linger started at `generation` passed: true when the caller must release now.
    pub(crate) fn linger_over(&mut self, generation: u64) -> bool {
        if self.readers == 0 && !self.closed && self.generation == generation {
            self.closed = true;
            return true;
        }
        false
    }

    /// Local readers inside now.
    pub(crate) fn readers(&self) -> usize {
        self.readers
    }

    /// Whether more local readers may join (neither revoked nor closed).
    pub(crate) fn is_open(&self) -> bool {
        !self.revoked && !self.closed
    }
}

#[cfg(test)]
mod tests {
    use super::{Leave, ShareState};

    #[test]
    fn giving_back_an_idle_hold_releases_it_now_and_a_busy_one_once_idle_without_lingering() {
        // Idle and lingering: released now, nobody joins any more.
        let mut idle = ShareState::new(true);
        let Leave::Linger(generation) = idle.leave() else {
            panic!("an idle hold lingers");
        };
        assert!(idle.give_back_idle());
        assert!(!idle.linger_over(generation), "released once only");
        assert!(!idle.join());

        // Readers inside: it stays, and still takes new readers (reader preference).
        let mut busy = ShareState::new(true);
        assert!(!busy.give_back_idle());
        assert!(busy.is_open());
        assert!(busy.join());
        assert_eq!(busy.leave(), Leave::Stay);
        // Idle again: released at once instead of lingering.
        assert_eq!(busy.leave(), Leave::Release);
        assert!(!busy.give_back_idle(), "released once only");
    }
}
