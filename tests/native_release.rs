//! The expire lock's release on both paths: `DELIFEQ` where the server has it (Valkey 9+), the
//! `EXPIRE_UNLOCK` script elsewhere (Redis 7). The outcome table is the same on both, the
//! announcement is made on both, and `INFO commandstats` shows which one ran.

mod support;

use std::time::Duration;

use support::RedisServer;
use tairlock::scripts::EXPIRE_UNLOCK;
use tairlock::{Acquire, ErrorKind, ExpireLock, Lease, RedisStore, Store, Unlock};

const LONG: Duration = Duration::from_secs(30);

/// How often `command` was called, less the calls refused before it ran (denied by an ACL).
/// Every test preloads the scripts, so no `EVALSHA` is answered `NOSCRIPT`.
fn stat(server: &RedisServer, command: &str) -> u64 {
    let info = server.cli(&["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{command}:");
    let Some(line) = info.lines().find_map(|l| l.strip_prefix(&prefix)) else {
        return 0;
    };
    let field = |name: &str| -> u64 {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    field("calls") - field("rejected_calls")
}

/// How often `command` ran (`calls=` of `INFO commandstats`; refused calls are counted apart).
fn ran(server: &RedisServer, command: &str) -> u64 {
    let info = server.cli(&["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// The calls of the two paths' commands since the server started.
fn calls(server: &RedisServer) -> (u64, u64) {
    (stat(server, "delifeq"), stat(server, "evalsha"))
}

#[track_caller]
fn acquired(outcome: Acquire) -> Lease {
    match outcome {
        Acquire::Acquired(lease) => lease,
        other => panic!("expected the lock to be acquired, got {other:?}"),
    }
}

/// What a release came to, comparable across the paths: the outcome or the error's kind and code.
type Outcome = Result<Unlock, (ErrorKind, Option<String>)>;

/// The lock key as the server has it after a release: type, value, whether it has a TTL.
fn key_state(server: &RedisServer, key: &str) -> (String, String, bool) {
    let key_type = server.cli(&["TYPE", key]);
    let value = if key_type == "string" {
        server.cli(&["GET", key])
    } else {
        String::new()
    };
    let ttl: i64 = server.cli(&["PTTL", key]).parse().unwrap();
    (key_type, value, ttl > 0)
}

/// The five states of the outcome table, set up under lock `name`; returns the lease the release
/// presents and the outcome the script's table promises.
async fn set_up(
    server: &RedisServer,
    locks: &ExpireLock<RedisStore>,
    name: &str,
    state: &str,
) -> (Lease, Outcome) {
    let key = locks.keys(name).unwrap().lock;
    // A genuine lease of another lock: well-formed, and not the one under `name`.
    let stranger = acquired(locks.expire_lock(&format!("{name}-x"), LONG).await.unwrap());
    match state {
        "ours" => (
            acquired(locks.expire_lock(name, LONG).await.unwrap()),
            Ok(Unlock::Released),
        ),
        "free" => (stranger, Ok(Unlock::NotHeld)),
        "another" => {
            let _theirs = acquired(locks.expire_lock(name, LONG).await.unwrap());
            (stranger, Ok(Unlock::HeldByOther))
        }
        "user-string" => {
            server.cli(&["SET", &key, "a user's value"]);
            (
                stranger,
                Err((ErrorKind::WrongType, Some("NOTLOCK".into()))),
            )
        }
        "user-hash" => {
            server.cli(&["HSET", &key, "field", "value"]);
            (
                stranger,
                Err((ErrorKind::WrongType, Some("WRONGTYPE".into()))),
            )
        }
        other => unreachable!("no state {other}"),
    }
}

const STATES: [&str; 5] = ["ours", "free", "another", "user-string", "user-hash"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_release_outcome_table_is_the_same_natively_and_by_script() {
    let server = RedisServer::start();
    let store = server.store().await;
    store.preload(&tairlock::scripts::ALL).await.unwrap();
    let locks = ExpireLock::new(store.clone());
    let valkey = server.is_valkey();

    // Every state twice: once for `expire_unlock` (native where the server has DELIFEQ), once
    // for the script itself.
    let mut cases = Vec::new();
    for state in STATES {
        let native = set_up(&server, &locks, &format!("n-{state}"), state).await;
        let script = set_up(&server, &locks, &format!("s-{state}"), state).await;
        cases.push((state, native, script));
    }

    let before = calls(&server);
    let mut native_outcomes = Vec::new();
    let mut after_ours = before;
    for (state, (lease, _), _) in &cases {
        let outcome = locks
            .expire_unlock(&format!("n-{state}"), lease)
            .await
            .map_err(|e| (e.kind(), e.code().map(str::to_owned)));
        native_outcomes.push(outcome);
        if *state == "ours" {
            after_ours = calls(&server);
        }
    }
    let after_native = calls(&server);
    let mut script_outcomes = Vec::new();
    for (state, _, (lease, _)) in &cases {
        let keys = locks.keys(&format!("s-{state}")).unwrap();
        let args = [
            lease.value().to_owned(),
            keys.channel.clone(),
            "PUBLISH".to_owned(),
        ];
        let outcome = store
            .eval(&EXPIRE_UNLOCK, &[keys.lock], &args)
            .await
            .map(|reply| match reply.as_int() {
                Some(1) => Unlock::Released,
                Some(0) => Unlock::HeldByOther,
                Some(-1) => Unlock::NotHeld,
                _ => panic!("[{}] unexpected script reply {reply:?}", server.label()),
            })
            .map_err(|e| (e.kind(), e.code().map(str::to_owned)));
        script_outcomes.push(outcome);
    }
    let after_script = calls(&server);

    for (i, (state, (_, promised), _)) in cases.iter().enumerate() {
        assert_eq!(
            &native_outcomes[i],
            promised,
            "[{}] expire_unlock, state {state}",
            server.label()
        );
        assert_eq!(
            &script_outcomes[i],
            promised,
            "[{}] the script, state {state}",
            server.label()
        );
        let native_key = locks.keys(&format!("n-{state}")).unwrap().lock;
        let script_key = locks.keys(&format!("s-{state}")).unwrap().lock;
        let (native_type, native_value, native_ttl) = key_state(&server, &native_key);
        let (script_type, script_value, script_ttl) = key_state(&server, &script_key);
        assert_eq!(
            (native_type.as_str(), native_ttl),
            (script_type.as_str(), script_ttl),
            "[{}] the key after the release, state {state}",
            server.label()
        );
        if state.starts_with("user") {
            // A user's data is left exactly as it was.
            assert_eq!(native_value, script_value, "[{}] {state}", server.label());
        }
    }

    // Which path ran. On Valkey the release of the held lock is one DELIFEQ and no script;
    // every other state is a DELIFEQ that deleted nothing, then the script to tell the outcome.
    // On Redis 7 every release is the script.
    let ours = (after_ours.0 - before.0, after_ours.1 - before.1);
    let all = (after_native.0 - before.0, after_native.1 - before.1);
    let n = STATES.len() as u64;
    let expected = if valkey {
        ((1, 0), (n, n - 1))
    } else {
        ((0, 1), (0, n))
    };
    assert_eq!(
        (ours, all),
        expected,
        "[{}] (DELIFEQ, EVALSHA) calls for the held lock's release, then for all {n}",
        server.label()
    );
    assert_eq!(
        (
            after_script.0 - after_native.0,
            after_script.1 - after_native.1
        ),
        (0, STATES.len() as u64),
        "[{}] the scripted releases",
        server.label()
    );
}

/// A subscriber of `channel` on its own thread and connection, subscribed when this returns:
/// the payloads it hears.
fn listen(server: &RedisServer, channel: String) -> std::sync::mpsc::Receiver<String> {
    let client = redis::Client::open(server.url()).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let (subscribed_tx, subscribed_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut con = client.get_connection().unwrap();
        let mut pubsub = con.as_pubsub();
        pubsub.subscribe(&channel).unwrap();
        pubsub
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        subscribed_tx.send(()).unwrap();
        while let Ok(message) = pubsub.get_message() {
            let payload: String = message.get_payload().unwrap();
            if tx.send(payload).is_err() {
                break;
            }
        }
    });
    subscribed_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("subscribed");
    rx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_is_announced_on_either_path() {
    let server = RedisServer::start();
    let locks = ExpireLock::new(server.store().await);
    let rx = listen(&server, locks.keys("announced").unwrap().channel);

    // Not released. The script announces nothing; the native release pipelines its
    // announcement behind DELIFEQ (one round trip), so it announces a release that deleted
    // nothing too: a spurious wake, never a missed one.
    let stranger = acquired(locks.expire_lock("announced-x", LONG).await.unwrap());
    assert_eq!(
        locks.expire_unlock("announced", &stranger).await.unwrap(),
        Unlock::NotHeld
    );
    let _theirs = acquired(locks.expire_lock("announced", LONG).await.unwrap());
    assert_eq!(
        locks.expire_unlock("announced", &stranger).await.unwrap(),
        Unlock::HeldByOther
    );
    let refused = if server.is_valkey() { 2 } else { 0 };
    // Released: announced.
    locks.force_unlock("announced").await.unwrap(); // announces once itself
    let lease = acquired(locks.expire_lock("announced", LONG).await.unwrap());
    assert_eq!(
        locks.expire_unlock("announced", &lease).await.unwrap(),
        Unlock::Released
    );
    let mut heard = Vec::new();
    while heard.len() < 2 + refused {
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(payload) => heard.push(payload),
            Err(_) => break,
        }
    }
    assert_eq!(
        heard,
        vec!["released"; 2 + refused],
        "[{}] the force-unlock and the release each announce once ({refused} refused \
         native releases announce too)",
        server.label()
    );
    // Nothing more came.
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "[{}] an announcement too many",
        server.label()
    );
}

/// A process that releases and exits at once (`tairlock run` does) must have announced its
/// release: waiters in other processes otherwise sleep until the lease runs out. The native
/// release used to send its announcement in the background, which a runtime shut down right
/// after the release never ran.
#[test]
fn a_release_is_announced_before_it_returns() {
    let server = RedisServer::start();
    for round in 0..3 {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (locks, lease) = runtime.block_on(async {
            let locks = ExpireLock::new(RedisStore::connect(&server.url()).await.unwrap());
            let lease = acquired(locks.expire_lock("exits", LONG).await.unwrap());
            (locks, lease)
        });
        let rx = listen(&server, locks.keys("exits").unwrap().channel);
        runtime.block_on(async {
            assert_eq!(
                locks.expire_unlock("exits", &lease).await.unwrap(),
                Unlock::Released
            );
        });
        // The process exits: nothing spawned runs any more.
        drop(locks);
        drop(runtime);
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)).as_deref(),
            Ok("released"),
            "[{}] round {round}: a release whose process exited at once was never announced",
            server.label()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_detection_means_the_script() {
    // COMMAND renamed away: the detection is refused, every release is the script.
    let server = RedisServer::start_with_args(&["--rename-command", "COMMAND", ""]);
    let store = server.store().await;
    store.preload(&tairlock::scripts::ALL).await.unwrap();
    let locks = ExpireLock::new(store);
    for _ in 0..3 {
        let lease = acquired(locks.expire_lock("job", LONG).await.unwrap());
        assert_eq!(
            locks.expire_unlock("job", &lease).await.unwrap(),
            Unlock::Released
        );
    }
    assert_eq!(
        stat(&server, "delifeq"),
        0,
        "[{}] DELIFEQ without detection",
        server.label()
    );
    assert_eq!(stat(&server, "evalsha"), 6, "[{}]", server.label());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_release_refused_later_is_sent_as_the_script() {
    let server = RedisServer::start();
    if !server.is_valkey() {
        // Redis 7 has no DELIFEQ to deny; the scripted path is covered above.
        return;
    }
    let store = server.store().await;
    store.preload(&tairlock::scripts::ALL).await.unwrap();
    let locks = ExpireLock::new(store);
    let lease = acquired(locks.expire_lock("job", LONG).await.unwrap());
    assert_eq!(
        locks.expire_unlock("job", &lease).await.unwrap(),
        Unlock::Released
    );
    assert_eq!(stat(&server, "delifeq"), 1, "[{}]", server.label());

    // The server stops serving DELIFEQ to this user after the detection.
    assert_eq!(server.cli(&["ACL", "SETUSER", "default", "-delifeq"]), "OK");
    for round in 0..2 {
        let lease = acquired(locks.expire_lock("job", LONG).await.unwrap());
        assert_eq!(
            locks.expire_unlock("job", &lease).await.unwrap(),
            Unlock::Released,
            "[{}] release {round} after DELIFEQ was denied",
            server.label()
        );
    }
    assert_eq!(
        server.cli(&["EXISTS", &locks.keys("job").unwrap().lock]),
        "0"
    );
    // One refused transaction, then the script only: 1 acquire + 2 × (acquire, release).
    assert_eq!(
        stat(&server, "evalsha"),
        1 + 4,
        "[{}] the releases after the refusal were not the script",
        server.label()
    );
}

/// A `DELIFEQ` refused with a transient error — `READONLY` (the server was demoted in a
/// failover) or `BUSY` (a script runs too long) — used to turn the native release off for good,
/// as a refusal of the command would. It is returned now as the transient error it is (nothing
/// was deleted; the caller retries), and the releases after it are `DELIFEQ` again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_refusal_keeps_the_native_release() {
    let server = RedisServer::start();
    if !server.is_valkey() {
        // Redis 7 has no DELIFEQ; the scripted path is covered above.
        return;
    }
    let store = server.store().await;
    store.preload(&tairlock::scripts::ALL).await.unwrap();
    let locks = ExpireLock::new(store);
    let key = locks.keys("job").unwrap().lock;

    // Demoted: a replica of a master it cannot reach keeps its data and refuses writes.
    let lease = acquired(locks.expire_lock("job", LONG).await.unwrap());
    assert_eq!(server.cli(&["REPLICAOF", "127.0.0.1", "1"]), "OK");
    let refused = locks.expire_unlock("job", &lease).await.unwrap_err();
    assert_eq!(refused.code(), Some("READONLY"), "{refused}");
    assert!(refused.is_transient(), "{refused}");
    assert_eq!(
        server.cli(&["EXISTS", &key]),
        "1",
        "a refused release deleted"
    );
    assert_eq!(server.cli(&["REPLICAOF", "NO", "ONE"]), "OK");
    let before = ran(&server, "delifeq");
    assert_eq!(
        locks.expire_unlock("job", &lease).await.unwrap(),
        Unlock::Released,
        "[{}] the retry after the failover",
        server.label()
    );
    assert_eq!(
        ran(&server, "delifeq"),
        before + 1,
        "[{}] the release after a READONLY refusal was not DELIFEQ",
        server.label()
    );

    // Busy: a script that runs past the busy threshold.
    let lease = acquired(locks.expire_lock("job", LONG).await.unwrap());
    assert_eq!(
        server.cli(&["CONFIG", "SET", "busy-reply-threshold", "100"]),
        "OK"
    );
    let port = server.port().to_string();
    let busy = std::thread::spawn(move || {
        std::process::Command::new("redis-cli")
            .args(["-p", &port, "EVAL", "while true do end", "0"])
            .output()
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let refused = locks.expire_unlock("job", &lease).await.unwrap_err();
    assert_eq!(refused.code(), Some("BUSY"), "{refused}");
    assert!(refused.is_transient(), "{refused}");
    assert_eq!(server.cli(&["SCRIPT", "KILL"]), "OK");
    busy.join().unwrap().unwrap();
    let before = ran(&server, "delifeq");
    assert_eq!(
        locks.expire_unlock("job", &lease).await.unwrap(),
        Unlock::Released,
        "[{}] the retry after the busy script",
        server.label()
    );
    assert_eq!(
        ran(&server, "delifeq"),
        before + 1,
        "[{}] the release after a BUSY refusal was not DELIFEQ",
        server.label()
    );
}
