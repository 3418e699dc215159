//! The deadline rule in the reader/writer and legacy crates, audited in their sources: no lease
//! is dated but by `tairlock::deadline::local_deadline` from a `Remaining` a server's answer
//! made. (The core crate audits its own `src/` the same way, in `src/deadline.rs`.)
//!
//! Refused in code (comments may name it): the superseded `engine::local_deadline(sent, ttl)`,
//! a drift allowance applied by hand, and an instant computed as a send or start time plus
//! something (`sent + ttl`: the length asked for, which a repeated request's lease no longer
//! has). One file is exempt, and says why: `legacy/src/getset.rs`, the original GETSET recipe
//! kept verbatim for comparison, whose holding is believed by the client's own clock (its key
//! has no time to live for a server to report).

use std::path::{Path, PathBuf};

/// Files allowed to date a holding otherwise, relative to the workspace root.
const EXEMPT: [&str; 1] = ["legacy/src/getset.rs"];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// What the line of code (comments cut) does that the rule refuses, if anything.
fn offence(code: &str) -> Option<&'static str> {
    if code.contains("local_deadline") && code.contains("engine::") {
        return Some("the superseded engine::local_deadline");
    }
    let by_hand = code.match_indices("drift(").any(|(at, _)| {
        let before = code[..at].chars().next_back();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_') && !code[..at].ends_with("fn ")
    });
    if by_hand {
        return Some("a drift applied by hand");
    }
    [
        "sent +",
        "start +",
        "started +",
        "sent.checked_add",
        "start.checked_add",
    ]
    .iter()
    .any(|p| code.contains(p))
    .then_some("an instant dated from a send plus a length")
}

#[test]
fn no_lease_of_the_rwlock_or_legacy_crates_is_dated_but_by_the_rule() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for krate in ["rwlock/src", "legacy/src"] {
        sources(&root.join(krate), &mut files);
    }
    assert!(files.len() > 30, "the sources were found: {}", files.len());
    let mut offences = Vec::new();
    for path in &files {
        let name = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if EXEMPT.contains(&name.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if let Some(what) = offence(code) {
                offences.push(format!("{name}:{}: {what}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        offences.is_empty(),
        "a deadline not dated by deadline::local_deadline from a server's answer:\n{}",
        offences.join("\n")
    );
}

#[test]
fn the_audit_sees_what_it_refuses() {
    assert!(offence("tairlock::engine::local_deadline(sent, ttl)").is_some());
    assert!(offence("let d = sent + ttl;").is_some());
    assert!(offence("started + left.saturating_sub(drift(left, f))").is_some());
    assert!(offence("local_deadline(sent, Remaining::at(items, 3, script)?)").is_none());
}
