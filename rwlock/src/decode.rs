//! Decoding the scripts' replies.

use std::time::Duration;

use tairlock::{Error, ErrorKind, Lease, Reply, Result, Script};

use crate::types::Blocker;

pub(crate) fn array<'r>(reply: &'r Reply, script: &Script) -> Result<&'r [Reply]> {
    reply.as_array().ok_or_else(|| unexpected(script, reply))
}

pub(crate) fn int_at(items: &[Reply], i: usize) -> Option<i64> {
    items.get(i).and_then(Reply::as_int)
}

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

pub(crate) fn lease_at(items: &[Reply], i: usize, script: &Script) -> Result<Lease> {
    items
        .get(i)
        .and_then(Reply::as_str)
        .and_then(Lease::parse)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Server,
                format!("{} returned a malformed lease", script.name()),
            )
        })
}

pub(crate) fn unexpected(script: &Script, reply: &Reply) -> Error {
    Error::new(
        ErrorKind::Server,
        format!("unexpected reply from {}: {reply:?}", script.name()),
    )
}
