//! The CLI's store-target flags (issue 14): `rediss://` with `--tls-ca`, `--tls-cert` and
//! `--tls-key`, and `--sentinel URL,… --master NAME`, against servers the tests start.
//!
//! - `tls_flags`: against a server that requires client certificates, `inspect` and
//!   `unlock --force` work with the three flags; without a client certificate `inspect` fails
//!   with a store error (exit 4); without `--tls-ca` the server's certificate is not trusted
//!   (exit 4); `--tls-cert` without `--tls-key`, an unreadable CA file and a key file without a
//!   key are usage errors (exit 2) that leave the lock in place.
//! - `sentinel_flags`: `inspect`, `unlock --force`, `run`, `race` and `bench` find the master
//!   through three sentinels; `--sentinel` with `--cluster` is a usage error (exit 2).

#[path = "../../tests/support/mod.rs"]
mod support;

use std::process::{Command, Output};
use std::time::Duration;

use support::sentinel::{MASTER, setup};
use support::tls::Certs;
use tairlock::{Acquire, ExpireLock, RedisStore};

fn tairlock(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tairlock"))
        .args(args)
        .env_remove("TAIRLOCK_REDIS")
        .output()
        .expect("run tairlock")
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

async fn hold(store: RedisStore, name: &str) {
    let locks = ExpireLock::new(store);
    match locks
        .expire_lock(name, Duration::from_secs(60))
        .await
        .unwrap()
    {
        Acquire::Acquired(_) => {}
        other => panic!("not acquired: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_flags() {
    if !support::tls::available() {
        return;
    }
    let certs = Certs::generate();
    let (_server, port) = certs.server(true);
    let url = format!("rediss://127.0.0.1:{port}");
    let mut options = certs.trusting("ca.crt");
    options.tls = options
        .tls
        .client_auth_files(certs.path("client.crt"), certs.path("client.key"))
        .unwrap();
    hold(
        RedisStore::connect_with(&url, options).await.unwrap(),
        "cli:tls",
    )
    .await;

    let (ca, cert, key) = (
        certs.path("ca.crt"),
        certs.path("client.crt"),
        certs.path("client.key"),
    );
    let tls = [
        "--redis",
        url.as_str(),
        "--tls-ca",
        &ca,
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ];
    let out = tairlock(&[&["inspect", "cli:tls"][..], &tls].concat());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("state       held"),
        "{}",
        text(&out)
    );

    let out = tairlock(&["inspect", "cli:tls", "--redis", &url, "--tls-ca", &ca]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("CertificateRequired"),
        "{}",
        text(&out)
    );

    let out = tairlock(&["inspect", "cli:tls", "--redis", &url]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));

    let out = tairlock(&["inspect", "cli:tls", "--redis", &url, "--tls-cert", &cert]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));

    // An unreadable CA file, or a key file that holds no key: usage errors, nothing changed.
    let missing = certs.path("missing.crt");
    let out = tairlock(&[
        "unlock", "--force", "cli:tls", "--redis", &url, "--tls-ca", &missing,
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("missing.crt"),
        "{}",
        text(&out)
    );
    let out = tairlock(&[
        "unlock",
        "--force",
        "cli:tls",
        "--redis",
        &url,
        "--tls-ca",
        &ca,
        "--tls-cert",
        &cert,
        "--tls-key",
        &cert,
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));

    let out = tairlock(&[&["unlock", "--force", "cli:tls"][..], &tls].concat());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("deleted the lock"),
        "{}",
        text(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_flags() {
    let (master, _replica, sentinels) = setup();
    let list = sentinels
        .iter()
        .map(|s| s.url())
        .collect::<Vec<_>>()
        .join(",");
    hold(master.store().await, "cli:sentinel").await;
    let via = ["--sentinel", list.as_str(), "--master", MASTER];

    let out = tairlock(&[&["inspect", "cli:sentinel"][..], &via].concat());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("state       held"),
        "{}",
        text(&out)
    );

    let out = tairlock(&[&["unlock", "--force", "cli:sentinel"][..], &via].concat());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(master.cli(&["EXISTS", "tairlock:{cli:sentinel}"]), "0");

    let out = tairlock(&[&["run", "cli:run"][..], &via, &["--", "true"]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    let out = tairlock(
        &[
            &[
                "race",
                "--json",
                "--trials",
                "1",
                "--duration",
                "500ms",
                "--scenario",
                "short-stalls",
                "--algorithm",
                "expire-lock",
            ][..],
            &via,
        ]
        .concat(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows[0]["algorithm"], "expire-lock", "{}", text(&out));
    // Not counting holders already past their lease (a loaded machine runs them late).
    assert_eq!(
        rows[0]["overlaps"].as_u64().unwrap_or(u64::MAX)
            - rows[0]["overlaps_past_lease"].as_u64().unwrap_or(0),
        0,
        "{}",
        text(&out)
    );
    assert!(
        rows[0]["acquisitions"].as_u64().unwrap_or(0) > 0,
        "{}",
        text(&out)
    );

    let out = tairlock(
        &[
            &[
                "bench",
                "--json",
                "--duration",
                "200ms",
                "--scenario",
                "expire-lock-cycle",
            ][..],
            &via,
        ]
        .concat(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        rows[0]["ops_per_sec"].as_f64().unwrap_or(0.0) > 0.0,
        "{}",
        text(&out)
    );

    let cluster = master.url();
    let out = tairlock(
        &[
            &["inspect", "cli:sentinel", "--cluster", &cluster][..],
            &via,
        ]
        .concat(),
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}
