//! The floor: the compare-and-delete script of the cheapest correct lock cycle (sent by a bare
//! client in the `floor-cycle` scenario), and the server's own throughput for comparison:
//! `redis-benchmark` sending that script by `EVALSHA` to the same server.

use tairlock::store::memory::{CommandResult, Db};
use tairlock::{Reply, Script};

use super::common::BenchRow;
use super::counted::BenchStore;
use super::sample::row;

/// The floor's compare-and-delete.
pub(super) static FLOOR_CAD: Script = Script::new(
    "floor_cad",
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
    floor_cad,
);

pub(super) fn floor_cad(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    if db.get(&keys[0])?.as_deref() == Some(args[0].as_bytes()) {
        return Ok(Reply::Int(i64::from(db.del(&keys[0]))));
    }
    Ok(Reply::Int(0))
}

/// `redis-benchmark -n 200000 -c 50` running the floor's EVALSHA on the same server.
pub(super) async fn redis_benchmark<S: BenchStore>(store: &S) -> Option<BenchRow> {
    let (host, port) = store.host_port()?;
    // Make sure the script is loaded so EVALSHA finds it.
    store
        .eval(
            &FLOOR_CAD,
            &["tairlock-bench:rb".to_owned()],
            &["x".to_owned()],
        )
        .await
        .ok()?;
    let out = tokio::process::Command::new("redis-benchmark")
        .args([
            "-h",
            &host,
            "-p",
            &port.to_string(),
            "-n",
            "200000",
            "-c",
            "50",
            "-r",
            "1000",
            "-q",
        ])
        .args([
            "EVALSHA",
            FLOOR_CAD.sha1(),
            "1",
            "tairlock-bench:rb:__rand_int__",
            "x",
        ])
        .output()
        .await
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "EVALSHA ...: 123456.78 requests per second, p50=0.183 msec"
    let rps: f64 = text
        .split("requests per second")
        .next()?
        .rsplit(':')
        .next()?
        .trim()
        .parse()
        .ok()?;
    let p50 = text
        .split("p50=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|ms| ms.parse::<f64>().ok())
        .map(|ms| ms * 1000.0);
    let mut r = row("redis-benchmark-evalsha", store, Some(rps), p50, None, None);
    r.commands_per_op = Some(1.0);
    r.note = "redis-benchmark -n 200000 -c 50 -r 1000 EVALSHA (compare-and-delete)".to_owned();
    Some(r)
}
