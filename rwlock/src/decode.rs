//! Decoding the scripts' replies.

use std::time::Duration;

pub(crate) use tairlock::expire_lock::lease_at;
pub(crate) use tairlock::script::{array, int_at, unexpected};
use tairlock::{Reply, Result, Script};

use crate::types::Blocker;

pub(crate) fn remaining(pttl: Option<i64>) -> Option<Duration> {
    pttl.filter(|ms| *ms >= 0)
        .map(|ms| Duration::from_millis(ms as u64))
}

pub(crate) fn blocker(items: &[Reply], script: &Script, reply: &Reply) -> Result<Blocker> {
    match items.get(1).and_then(Reply::as_str) {
        Some("writer") => Ok(Blocker::Writer),
        Some("intent") => Ok(Blocker::Intent),
        Some("readers") => Ok(Blocker::Readers(
            int_at(items, 3).unwrap_or(0).max(0) as usize
        )),
        _ => Err(unexpected(script, reply)),
    }
}
