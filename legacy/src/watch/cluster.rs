//! `WATCH` on a Redis Cluster: every transaction on a dedicated connection to the master that
//! owns the lock's slot.
//!
//! The store's cluster connection routes each command on its own and shares its node
//! connections between callers, while `WATCH` state lives on one server connection. So a
//! [`ClusterWatch`] sends a transaction itself:
//!
//! 1. **Slot.** Every key of one transaction must hash to one slot. A lock's keys do: `K` and
//!    [`fence_key(K)`](crate::wire::fence_key) = `{K}:fence` share `K`'s hash tag. Keys of
//!    several slots are refused before anything is sent ([`ErrorKind::InvalidInput`], message
//!    naming `CROSSSLOT`, as [`ClusterStore`] does for scripts).
//! 2. **Owner.** The slot's master comes from a slot map: `CLUSTER SLOTS` (Redis 3.0+; `CLUSTER
//!    SHARDS` needs 7.0), asked through the store's cluster connection when a connection first
//!    needs it. Each connection keeps its map, corrects it slot by slot from `MOVED` replies, and
//!    asks again after a connection failure or a `READONLY` reply (a failover).
//! 3. **Connection.** One dedicated connection per master, opened on first use with the first
//!    seed URL's credentials and TLS settings ([`ClusterStore::node_client`]) and kept for the
//!    next transaction on that master. [`WatchLock`](crate::WatchLock) pools idle
//!    `ClusterWatch`es as it pools connections on one server
//!    ([`pool_size`](crate::Options::pool_size)), so each master keeps at most `pool_size` idle
//!    connections from one `WatchLock`, plus one per operation in flight.
//! 4. **Transaction.** `UNWATCH`, `WATCH K F` and the reads as one pipeline, then `MULTI`, the
//!    writes and `EXEC` as another, both on that master's connection. The reads' `TIME` is the
//!    clock of the lock's own master.
//!
//! # While a slot migrates
//!
//! Resharding moves slot S from master A to master B in steps (`CLUSTER SETSLOT S IMPORTING` on
//! B, `… MIGRATING` on A, `MIGRATE` of the keys, `CLUSTER SETSLOT S NODE B`). What the watched
//! reads meet on A, and what this connection does:
//!
//! | state of S on A | A answers `WATCH K F` and the reads | this connection |
//! |---|---|---|
//! | migrating, A still has every key of the request | as usual | goes on with A, which still owns S; `MIGRATE` later carries the keys with their values and TTLs |
//! | migrating, some of the keys already on B | `TRYAGAIN` to the `WATCH` of keys split between A and B (`ASK` to a read of a moved key) | backs off and reads again |
//! | migrating, none of the keys on A (all moved, or a free lock) | `ASK S B` | backs off and reads again |
//! | `SETSLOT S NODE B` done | `MOVED S B` | records B for S and reads again at once, from B |
//!
//! It never follows `ASK`: `ASKING` admits one command on B, not a `WATCH` and the transaction
//! after it, and B answers `TRYAGAIN` to a multi-key request whose keys it does not all have.
//! The back-off starts at 5 ms and doubles up to 100 ms; one watched read keeps trying for at
//! most 5 s, then fails with [`ErrorKind::Timeout`] having written nothing. `CLUSTERDOWN`,
//! `MASTERDOWN` and `LOADING` are waited out the same way. So while its slot migrates, a held
//! lock answers as usual except while its two keys sit on different nodes; a free lock (no key
//! on A) cannot be taken until `SETSLOT S NODE B`; and a migration that keeps a lock's slot in
//! one of those states longer than 5 s makes operations on that lock fail (never misbehave)
//! until it moves on.
//!
//! Between the reads and the `EXEC` anything may happen on A. `MIGRATE` deletes each key it
//! moves from A, and a deleted watched key aborts the `EXEC` (nil). A slot that changed hands,
//! or keys missing on a migrating A, make A refuse the queued commands or the `EXEC` itself with
//! `MOVED`, `ASK` or `TRYAGAIN`, and discard the transaction. Either way nothing ran: `exec`
//! reports it as an aborted `EXEC` (`None`), and the operation reads again — on B after a
//! `MOVED` — counting it among its 16 aborted `EXEC`s. A master runs an `EXEC` only when it
//! serves the slot of every queued key (it owns the slot, or is migrating it and still holds
//! every one of those keys), so an operation reports success only when the `EXEC` committed on
//! the slot's owner.
//!
//! # Not guaranteed
//!
//! As on one server: a connection that fails during `EXEC` leaves the outcome unknown (reported
//! as a connection error; an acquisition may then hold the lock for nobody until its TTL), and
//! replication inside the cluster is asynchronous, so a failover may lose a committed grant.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use tairlock::slot::{check_one_slot, key_slot};
use tairlock::{ClusterStore, Error, ErrorKind, Reply, Result};

use super::store::{Read, TxOp, WatchConnection, WatchStore, reply_error, watch_pipeline};

/// How long one command on a dedicated connection may take.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one watched read keeps retrying while its slot migrates or the cluster is down.
const MIGRATION_PATIENCE: Duration = Duration::from_secs(5);
/// The first pause after `ASK`, `TRYAGAIN`, `CLUSTERDOWN`, …; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(5);
/// The longest pause between two reads of a migrating slot.
const MAX_BACKOFF: Duration = Duration::from_millis(100);
/// How many `MOVED` replies one watched read follows: each names the slot's new owner, so more
/// than a couple in a row mean the nodes disagree about the slot.
const MAX_MOVED: u32 = 5;
/// How many times one watched read reconnects (after asking for the slot map again) when a
/// node's connection fails: a failover replaces a master at a new address.
const MAX_RECONNECTS: u32 = 2;

impl WatchStore for ClusterStore {
    type Connection = ClusterWatch;

    /// Opens nothing yet: the connection asks for the slot map and connects to a master when
    /// its first transaction needs them.
    async fn watch_connection(&self) -> Result<ClusterWatch> {
        Ok(ClusterWatch {
            store: self.clone(),
            slots: None,
            nodes: HashMap::new(),
            watching: None,
            sent_watch: None,
        })
    }

    /// The lowest `redis_version` among the masters (asked on a connection to each), so that
    /// detection during a rolling upgrade picks what every master supports; `None` when no
    /// master answers `INFO`.
    async fn server_version(&self) -> Result<Option<String>> {
        let map = SlotMap::fetch(self).await?;
        let mut lowest: Option<(Vec<u64>, String)> = None;
        for node in map.masters() {
            let mut con = connect(self, &node).await?;
            let info = match redis::cmd("INFO")
                .arg("server")
                .query_async::<String>(&mut con)
                .await
            {
                Ok(info) => info,
                Err(e) => {
                    let e = Error::from(e);
                    if e.is_unanswered() {
                        return Err(e);
                    }
                    // INFO renamed away or denied by an ACL on this node.
                    continue;
                }
            };
            let Some(version) = info
                .lines()
                .find_map(|l| l.strip_prefix("redis_version:"))
                .map(|v| v.trim().to_owned())
            else {
                continue;
            };
            let parsed: Vec<u64> = version.split('.').map(|p| p.parse().unwrap_or(0)).collect();
            if lowest.as_ref().is_none_or(|(low, _)| parsed < *low) {
                lowest = Some((parsed, version));
            }
        }
        Ok(lowest.map(|(_, version)| version))
    }
}

/// A master's address, as the cluster names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Node {
    host: String,
    port: u16,
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

impl Node {
    /// `host:port` from a redirection; an empty or unknown (`?`) host means `asked`'s host.
    fn parse(addr: &str, asked: &Node) -> Option<Node> {
        let (host, port) = addr.rsplit_once(':')?;
        let host = match host {
            "" | "?" => asked.host.clone(),
            h => h.to_owned(),
        };
        Some(Node {
            host,
            port: port.parse().ok()?,
        })
    }
}

/// Which master serves which slots: `CLUSTER SLOTS`, with corrections from `MOVED` replies.
#[derive(Debug, Default)]
struct SlotMap {
    /// `(first, last, master)`, as `CLUSTER SLOTS` listed them.
    ranges: Vec<(u16, u16, Node)>,
    /// Slots whose owner a `MOVED` reply named since.
    moved: HashMap<u16, Node>,
}

impl SlotMap {
    /// Ask the cluster (a node the cluster client picks) for its slot map.
    async fn fetch(store: &ClusterStore) -> Result<SlotMap> {
        let reply: redis::Value = store.command(redis::cmd("CLUSTER").arg("SLOTS")).await?;
        SlotMap::parse(reply).ok_or_else(|| {
            Error::new(
                ErrorKind::Server,
                "unexpected reply to CLUSTER SLOTS (is this a Redis Cluster?)",
            )
        })
    }

    /// `[[first, last, [host, port, id, …], replicas…], …]`.
    fn parse(reply: redis::Value) -> Option<SlotMap> {
        let redis::Value::Array(ranges) = reply else {
            return None;
        };
        let mut map = SlotMap::default();
        for range in ranges {
            let redis::Value::Array(items) = range else {
                return None;
            };
            let int = |v: &redis::Value| match v {
                redis::Value::Int(i) => u16::try_from(*i).ok(),
                _ => None,
            };
            let (first, last) = (int(items.first()?)?, int(items.get(1)?)?);
            let redis::Value::Array(master) = items.get(2)? else {
                return None;
            };
            let host = match master.first()? {
                redis::Value::BulkString(b) => String::from_utf8(b.clone()).ok()?,
                redis::Value::SimpleString(s) => s.clone(),
                redis::Value::Nil => String::new(),
                _ => return None,
            };
            // `?`: the node does not know that master's endpoint; leave it to the seed's host.
            let host = if host == "?" { String::new() } else { host };
            map.ranges.push((
                first,
                last,
                Node {
                    host,
                    port: int(master.get(1)?)?,
                },
            ));
        }
        Some(map)
    }

    fn owner(&self, slot: u16) -> Option<&Node> {
        self.moved.get(&slot).or_else(|| {
            self.ranges
                .iter()
                .find(|(first, last, _)| (*first..=*last).contains(&slot))
                .map(|(_, _, node)| node)
        })
    }

    /// Every master, once each.
    fn masters(&self) -> Vec<Node> {
        let mut masters: Vec<Node> = Vec::new();
        for (_, _, node) in &self.ranges {
            if !masters.contains(node) {
                masters.push(node.clone());
            }
        }
        masters
    }
}

/// A new dedicated connection to `node`.
async fn connect(store: &ClusterStore, node: &Node) -> Result<MultiplexedConnection> {
    let config = AsyncConnectionConfig::new()
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_connection_timeout(Some(RESPONSE_TIMEOUT));
    let client = store.node_client(&node.host, node.port)?;
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| {
            let e = Error::from(e);
            Error::new(
                e.kind(),
                format!("cannot connect to cluster node {node}: {}", e.message()),
            )
        })
}

/// What a node's refusal asks of the client.
enum Refusal {
    /// `MOVED slot host:port`: the slot has a new owner.
    Moved(u16, Node),
    /// `ASK`, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `LOADING`: the slot or the node is in
    /// transition; read again after a pause.
    Wait,
    /// `READONLY`: the node is a replica now (a failover); ask for the slot map again.
    Stale,
}

fn refusal(err: &redis::ServerError, asked: &Node) -> Option<Refusal> {
    use redis::ServerErrorKind as K;
    match err.kind()? {
        K::Moved => {
            let mut detail = err.details()?.split_ascii_whitespace();
            let slot = detail.next()?.parse().ok()?;
            Some(Refusal::Moved(slot, Node::parse(detail.next()?, asked)?))
        }
        K::Ask | K::TryAgain | K::ClusterDown | K::MasterDown | K::BusyLoading => {
            Some(Refusal::Wait)
        }
        K::ReadOnly => Some(Refusal::Stale),
        _ => None,
    }
}

/// A connection failure after which another connection (or another node) may succeed.
fn is_broken(err: &Error) -> bool {
    err.is_connection()
}

/// A [`WatchConnection`] on a [`ClusterStore`]: the slot map and one dedicated connection per
/// master it has used, never shared by two transactions at once (it is only ever used through
/// `&mut`). See the [module docs](self).
pub struct ClusterWatch {
    store: ClusterStore,
    slots: Option<SlotMap>,
    nodes: HashMap<Node, MultiplexedConnection>,
    /// After a successful `watch`: the master whose connection holds the watches, and the slot
    /// watched (`None` for a keyless request). `exec` runs there.
    watching: Option<(Node, Option<u16>)>,
    /// The master the last `WATCH` was sent to, refused or not (a `WATCH` may be in place even
    /// when a read after it failed): where `unwatch` sends `UNWATCH`.
    sent_watch: Option<Node>,
}

impl fmt::Debug for ClusterWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterWatch")
            .field("store", &self.store)
            .field("masters_connected", &self.nodes.len())
            .finish_non_exhaustive()
    }
}

impl ClusterWatch {
    /// The master that serves `slot` (any master for a keyless request), by the slot map.
    async fn owner(&mut self, slot: Option<u16>) -> Result<Node> {
        if self.slots.is_none() {
            self.slots = Some(SlotMap::fetch(&self.store).await?);
        }
        let map = self.slots.as_ref().expect("fetched above");
        let node = match slot {
            Some(slot) => map.owner(slot).cloned(),
            None => map.masters().into_iter().next(),
        };
        node.ok_or_else(|| {
            Error::new(
                ErrorKind::Server,
                format!("CLUSTERDOWN no master serves slot {slot:?} in CLUSTER SLOTS"),
            )
        })
    }

    /// Send `pipe` on the dedicated connection to `node`, opened first if there is none and
    /// `open` allows it. A connection that fails is forgotten, so the next request opens a new
    /// one.
    async fn query(
        &mut self,
        node: &Node,
        pipe: &redis::Pipeline,
        open: bool,
    ) -> Result<Vec<redis::Value>> {
        let mut con = match self.nodes.get(node) {
            Some(con) => con.clone(),
            None if !open => {
                return Err(Error::new(
                    ErrorKind::Connection,
                    format!("the connection to {node} that held the watches was lost"),
                ));
            }
            None => {
                let con = connect(&self.store, node).await?;
                self.nodes.insert(node.clone(), con.clone());
                con
            }
        };
        match pipe.query_async::<Vec<redis::Value>>(&mut con).await {
            Ok(replies) => Ok(replies),
            Err(e) => {
                self.nodes.remove(node);
                Err(e.into())
            }
        }
    }

    fn record_moved(&mut self, slot: u16, node: Node) {
        self.slots
            .get_or_insert_with(SlotMap::default)
            .moved
            .insert(slot, node);
    }
}

/// The one slot of a request's keys, `None` without keys.
fn slot_of<'a>(keys: impl IntoIterator<Item = &'a str>) -> Result<Option<u16>> {
    let keys: Vec<String> = keys.into_iter().map(str::to_owned).collect();
    check_one_slot(&keys)?;
    Ok(keys.first().map(|k| key_slot(k)))
}

impl WatchConnection for ClusterWatch {
    async fn watch(&mut self, keys: &[String], reads: &[Read]) -> Result<Vec<Reply>> {
        let read_keys = reads.iter().filter_map(|r| match r {
            Read::Get(k) | Read::Pttl(k) | Read::Ttl(k) => Some(k.as_str()),
            Read::Time => None,
        });
        let slot = slot_of(keys.iter().map(String::as_str).chain(read_keys))?;
        let pipe = watch_pipeline(keys, reads);

        // Set again only once the watches are in place: an `exec` never runs unwatched after a
        // refused `WATCH`.
        self.watching = None;
        let started = tokio::time::Instant::now();
        let (mut moved, mut reconnects, mut backoff) = (0, 0, FIRST_BACKOFF);
        loop {
            let node = self.owner(slot).await?;
            self.sent_watch = Some(node.clone());
            let replies = match self.query(&node, &pipe, true).await {
                Ok(replies) => replies,
                Err(e) if is_broken(&e) && reconnects < MAX_RECONNECTS => {
                    // Nothing is written by a watched read: ask where the slot lives now and
                    // read again.
                    reconnects += 1;
                    self.slots = None;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let refused = replies.iter().find_map(|reply| match reply {
                redis::Value::ServerError(e) => Some(e),
                _ => None,
            });
            let Some(err) = refused else {
                self.watching = Some((node, slot));
                return Ok(replies.into_iter().skip(2).map(Reply::from).collect());
            };
            match refusal(err, &node) {
                None => return Err(reply_error(err)),
                Some(Refusal::Moved(slot, owner)) => {
                    moved += 1;
                    if moved > MAX_MOVED {
                        return Err(Error::new(
                            ErrorKind::Server,
                            format!(
                                "slot {slot} redirected {MAX_MOVED} times in a row (last: {} {})",
                                err.code(),
                                err.details().unwrap_or("")
                            ),
                        ));
                    }
                    self.record_moved(slot, owner);
                }
                Some(wait) => {
                    if started.elapsed() + backoff > MIGRATION_PATIENCE {
                        return Err(Error::new(
                            ErrorKind::Timeout,
                            format!(
                                "slot {} of {keys:?} stayed unavailable for {MIGRATION_PATIENCE:?} \
                                 (migrating or failing over; last reply: {} {}); nothing was written",
                                slot.map_or_else(|| "-".to_owned(), |s| s.to_string()),
                                err.code(),
                                err.details().unwrap_or("")
                            ),
                        ));
                    }
                    if matches!(wait, Refusal::Stale) {
                        self.slots = None;
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    /// `UNWATCH` on the master the last `WATCH` went to; nothing when there was none, or when
    /// that connection has failed since (the server forgot its watches with it).
    async fn unwatch(&mut self) -> Result<()> {
        self.watching = None;
        if let Some(node) = self.sent_watch.take()
            && self.nodes.contains_key(&node)
        {
            let mut pipe = redis::pipe();
            pipe.cmd("UNWATCH");
            self.query(&node, &pipe, false).await?;
        }
        Ok(())
    }

    /// On the master of the last [`watch`](WatchConnection::watch) (without one, on the master
    /// of the writes' slot). Also `None` when that master refused the transaction because the
    /// slot moved or is moving (`MOVED`, `ASK`, `TRYAGAIN`, …): it discarded the transaction and
    /// nothing ran, which is what an aborted `EXEC` means to the caller; after `MOVED` the next
    /// `watch` goes to the new owner.
    async fn exec(&mut self, ops: &[TxOp]) -> Result<Option<Vec<Reply>>> {
        let op_slot = slot_of(ops.iter().map(TxOp::key))?;
        let watched = self.watching.is_some();
        let node = match self.watching.take() {
            Some((node, watched)) => {
                if let (Some(watched), Some(op_slot)) = (watched, op_slot)
                    && watched != op_slot
                {
                    return Err(Error::new(
                        ErrorKind::InvalidInput,
                        format!(
                            "the transaction writes slot {op_slot} but watched slot {watched}: \
                             it would be CROSSSLOT on a cluster"
                        ),
                    ));
                }
                node
            }
            None => self.owner(op_slot).await?,
        };
        let mut pipe = redis::pipe();
        // MULTI, EXEC and the queued commands sent as plain commands, so that a refusal keeps
        // its code and its MOVED address (an atomic pipeline folds them into EXECABORT).
        pipe.ignore_errors();
        pipe.cmd("MULTI");
        for op in ops {
            pipe.add_command(op.to_cmd()?);
        }
        pipe.cmd("EXEC");
        // After a watch, only on the connection that holds the watches: were it gone, a new
        // one would run the transaction unconditionally.
        let mut replies = self.query(&node, &pipe, !watched).await?;
        // EXEC (or the discarded transaction) forgot every watch of this connection.
        if self.sent_watch.as_ref() == Some(&node) {
            self.sent_watch = None;
        }
        let exec = replies.pop();
        let unexpected = |what: &dyn fmt::Debug| {
            Error::new(
                ErrorKind::Server,
                format!("unexpected reply to the WatchLock transaction on {node}: {what:?}"),
            )
        };
        match exec {
            Some(redis::Value::Nil) => Ok(None),
            Some(redis::Value::Array(results)) => {
                let mut out = Vec::with_capacity(results.len());
                for result in results {
                    if let redis::Value::ServerError(e) = &result {
                        return Err(reply_error(e));
                    }
                    out.push(Reply::from(result));
                }
                Ok(Some(out))
            }
            Some(redis::Value::ServerError(exec_err)) => {
                // The transaction was discarded. The first refused command says why (EXEC
                // itself says only EXECABORT then); else EXEC's own refusal.
                let cause = replies
                    .iter()
                    .find_map(|r| match r {
                        redis::Value::ServerError(e) => Some(e),
                        _ => None,
                    })
                    .unwrap_or(&exec_err);
                match refusal(cause, &node) {
                    None => Err(reply_error(cause)),
                    Some(Refusal::Moved(slot, owner)) => {
                        self.record_moved(slot, owner);
                        Ok(None)
                    }
                    Some(Refusal::Stale) => {
                        self.slots = None;
                        Ok(None)
                    }
                    Some(Refusal::Wait) => Ok(None),
                }
            }
            other => Err(unexpected(&other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value as V;

    fn range(first: i64, last: i64, master: Vec<V>) -> V {
        V::Array(vec![V::Int(first), V::Int(last), V::Array(master)])
    }

    #[test]
    fn a_well_formed_slot_map_parses() {
        let map = SlotMap::parse(V::Array(vec![range(
            0,
            16383,
            vec![V::BulkString(b"10.0.0.1".to_vec()), V::Int(7000)],
        )]))
        .expect("well formed");
        assert_eq!(map.ranges.len(), 1);
        assert_eq!(map.owner(42).map(|n| n.port), Some(7000));
    }

    // Issue 12, item 9: every malformed `CLUSTER SLOTS` reply is refused, none panics.
    #[test]
    fn a_malformed_slot_map_is_refused_without_a_panic() {
        let host = || V::BulkString(b"h".to_vec());
        for reply in [
            V::Nil,
            V::Int(1),
            V::BulkString(b"ERR".to_vec()),
            V::Array(vec![V::Nil]),
            V::Array(vec![V::Array(vec![])]),
            V::Array(vec![V::Array(vec![V::Int(0)])]),
            V::Array(vec![V::Array(vec![V::Int(0), V::Int(5)])]),
            V::Array(vec![V::Array(vec![V::Int(0), V::Int(5), V::Nil])]),
            V::Array(vec![range(0, 5, vec![])]),
            V::Array(vec![range(0, 5, vec![host()])]),
            V::Array(vec![range(0, 5, vec![host(), V::Int(-1)])]),
            V::Array(vec![range(0, 5, vec![host(), V::Int(i64::MAX)])]),
            V::Array(vec![range(
                0,
                5,
                vec![host(), V::BulkString(b"7000".to_vec())],
            )]),
            V::Array(vec![range(0, 5, vec![V::Int(3), V::Int(7000)])]),
            V::Array(vec![range(-1, 5, vec![host(), V::Int(7000)])]),
            V::Array(vec![range(0, i64::MAX, vec![host(), V::Int(7000)])]),
            V::Array(vec![range(
                0,
                5,
                vec![V::BulkString(vec![0xff]), V::Int(7000)],
            )]),
        ] {
            assert!(SlotMap::parse(reply.clone()).is_none(), "{reply:?}");
        }
    }
}
