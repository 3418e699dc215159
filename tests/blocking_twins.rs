//! Every public async method has a blocking twin (issue #16, part 3): this test reads the
//! source of the three library crates, lists each `pub async fn` with the type whose `impl` it
//! is in, and fails when that type has no `pub fn blocking_<name>`, unless the method is on the
//! short list below, each entry with its reason.
//!
//! The parser is deliberately simple: an `impl` line names the type (the last path segment
//! after `for`, if any), and methods are the `pub async fn` / `pub fn blocking_` lines after
//! it. Test modules and the loom models are skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// `(type, method)` pairs with no blocking twin, by design. Keep it short; every entry says why.
const NO_TWIN: &[(&str, &str, &str)] = &[
    // Waiting for a loss is for async code (a `select!` against the critical section); blocking
    // code asks `is_lost()`.
    ("LockGuard", "lost", "blocking code polls is_lost()"),
    ("MultiGuard", "lost", "blocking code polls is_lost()"),
    ("ReplicatedGuard", "lost", "blocking code polls is_lost()"),
    ("PermitGuard", "lost", "blocking code polls is_lost()"),
    ("TokenGuard", "lost", "blocking code polls is_lost()"),
    (
        "(macro)",
        "lost",
        "the rwlock guards' (a macro): blocking code polls is_lost()",
    ),
    // Building blocks of guards and waits, used inside async code by every lock kind.
    ("Liveness", "lost", "a guard's building block"),
    ("Liveness", "renewing", "a guard's building block"),
    ("Liveness", "stop_watchdog", "a guard's building block"),
    ("Liveness", "watchdog", "a guard's building block"),
    ("Liveness", "watchdog_after", "a guard's building block"),
    ("Notifier", "watch", "the waits' building block"),
    ("Watch", "wait", "the waits' building block"),
    ("Watch", "subscribed", "the waits' building block"),
    ("Watch", "subscribed_by", "the waits' building block"),
    ("Transient", "wait", "the engine's back-off"),
    // Step-by-step attempts, one command per step for tests and the race tool; blocking code
    // uses the kind's blocking_acquire / blocking_release.
    (
        "AcquireAttempt",
        "step",
        "one command at a time, for the race tool",
    ),
    (
        "AcquireAttempt",
        "run",
        "one command at a time, for the race tool",
    ),
    (
        "ReleaseAttempt",
        "step",
        "one command at a time, for the race tool",
    ),
    (
        "ReleaseAttempt",
        "run",
        "one command at a time, for the race tool",
    ),
    (
        "WatchAttempt",
        "step",
        "one command at a time, for the race tool",
    ),
    (
        "WatchAttempt",
        "run",
        "one command at a time, for the race tool",
    ),
    (
        "WatchRelease",
        "step",
        "one command at a time, for the race tool",
    ),
    (
        "WatchRelease",
        "run",
        "one command at a time, for the race tool",
    ),
    // Stores built from the application's own async client or connection: it already lives
    // on the application's runtime.
    (
        "RedisStore",
        "from_client",
        "wraps the application's async client",
    ),
    (
        "ClusterStore",
        "from_connection",
        "wraps the application's async connection",
    ),
    (
        "ClusterStore",
        "connect_customized",
        "the application's async client builder",
    ),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "tests" && name != "loom_models" {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// The type an `impl` line is for: `impl<S: Store> Foo<S> {` → `Foo`;
/// `impl<S> Trait for Foo<S>` → `Foo`.
fn impl_type(line: &str) -> Option<String> {
    let rest = line.trim_start().strip_prefix("impl")?;
    if !(rest.starts_with('<') || rest.starts_with(' ')) {
        return None;
    }
    // Skip the generics after `impl`.
    let rest = if rest.starts_with('<') {
        let mut depth = 0usize;
        let end = rest.char_indices().find_map(|(i, c)| {
            match c {
                '<' => depth += 1,
                '>' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(i + 1);
                    }
                }
                _ => {}
            }
            None
        })?;
        &rest[end..]
    } else {
        rest
    };
    let head = rest.split('{').next()?.trim();
    let head = head.rsplit(" for ").next()?.trim();
    let head = head.split(" where").next()?.trim();
    let name = head.split('<').next()?.rsplit("::").next()?.trim();
    (!name.is_empty()).then(|| name.to_owned())
}

/// `(type, async method)` and `(type, name of a blocking twin)` found under `dirs`.
type Found = (
    BTreeMap<(String, String), String>,
    BTreeSet<(String, String)>,
);

fn scan(dirs: &[&str]) -> Found {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in dirs {
        rust_files(&root.join(dir), &mut files);
    }
    let mut asyncs = BTreeMap::new();
    let mut twins = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let mut ty = String::new();
        for line in text.lines() {
            if line.trim_start().starts_with("#[cfg(test)]") && line.starts_with('#') {
                break;
            }
            if let Some(t) = impl_type(line) {
                ty = t;
                continue;
            }
            if line.starts_with("macro_rules!") {
                ty = "(macro)".to_owned();
                continue;
            }
            if line == "}" {
                // The end of an item at the top level: what follows is outside any impl.
                ty.clear();
                continue;
            }
            if ty.is_empty() {
                // Free functions are not methods.
                continue;
            }
            let body = line.trim_start();
            let fn_name = |prefix: &str| {
                body.strip_prefix(prefix).map(|rest| {
                    rest.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .next()
                        .unwrap_or_default()
                        .to_owned()
                })
            };
            if let Some(name) = fn_name("pub async fn ") {
                let place = file.strip_prefix(root).unwrap().display().to_string();
                asyncs.insert((ty.clone(), name), place);
            } else if let Some(name) = fn_name("pub fn blocking_") {
                // The twin of an owner-taking `X_as` is the thread-keyed `blocking_X`.
                twins.insert((ty.clone(), format!("{name}_as")));
                twins.insert((ty.clone(), name));
            }
        }
    }
    (asyncs, twins)
}

#[test]
fn every_public_async_method_has_a_blocking_twin() {
    let (asyncs, twins) = scan(&["src", "legacy/src", "rwlock/src"]);
    assert!(
        asyncs.len() > 50,
        "the parser found only {} async methods: it is broken",
        asyncs.len()
    );
    for probe in [
        ("ExpireLock", "lock"),
        ("LockGuard", "release"),
        ("MultiGuard", "renew"),
    ] {
        let probe = (probe.0.to_owned(), probe.1.to_owned());
        assert!(asyncs.contains_key(&probe), "the parser missed {probe:?}");
        assert!(
            twins.contains(&probe),
            "the parser missed the twin of {probe:?}"
        );
    }
    let exempt: BTreeSet<(&str, &str)> = NO_TWIN.iter().map(|(t, m, _)| (*t, *m)).collect();
    let missing: Vec<String> = asyncs
        .iter()
        .filter(|(key, _)| !twins.contains(*key))
        .filter(|((t, m), _)| !exempt.contains(&(t.as_str(), m.as_str())))
        .map(|((t, m), place)| format!("{t}::{m} ({place})"))
        .collect();
    assert!(
        missing.is_empty(),
        "public async methods without a blocking_ twin (add one, or put it on the documented \
         list in this file with its reason): {missing:#?}"
    );
    // The lists only name methods that exist and still lack a twin.
    let stale: Vec<&(&str, &str)> = exempt
        .iter()
        .filter(|(t, m)| {
            let key = ((*t).to_owned(), (*m).to_owned());
            !asyncs.contains_key(&key) || twins.contains(&key)
        })
        .collect();
    assert!(
        stale.is_empty(),
        "stale entries on the no-twin lists: {stale:?}"
    );
}

#[test]
fn impl_lines_name_their_type() {
    assert_eq!(
        impl_type("impl<S: Store> ExpireLock<S> {").as_deref(),
        Some("ExpireLock")
    );
    assert_eq!(
        impl_type("impl<S: Store> Kind for Step<S> {").as_deref(),
        Some("Step")
    );
    assert_eq!(
        impl_type("impl RedisStore {").as_deref(),
        Some("RedisStore")
    );
    assert_eq!(
        impl_type("impl<S: ReplicaStore> fmt::Debug for ReplicatedGuard<S> {").as_deref(),
        Some("ReplicatedGuard")
    );
    assert_eq!(impl_type("    implement(x);"), None);
}
