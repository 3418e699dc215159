//! A fault-injection TCP proxy between a test's clients and a real `redis-server`.
//!
//! [`Proxy::start`] listens on a free loopback port and forwards every accepted connection to
//! `127.0.0.1:<upstream_port>` ([`Proxy::start_to`]: to any address). It runs on its own thread
//! with its own tokio runtime, so its control methods are plain (non-async) calls that work from
//! any test, async or not; dropping the proxy stops it and closes every connection.
//!
//! Faults are chosen per connection with [`Which`]: every connection, the data connections, the
//! pub/sub connections (a connection counts as pub/sub once its client sent `SUBSCRIBE`,
//! `SSUBSCRIBE` or `PSUBSCRIBE`), or the n-th accepted one. A fault set on a class is a rule: it
//! also applies to connections accepted later (a client's reconnect meets the same network), and
//! to a connection as soon as it joins the class.
//!
//! | fault | what the proxy does | what a client sees |
//! |---|---|---|
//! | [`latency`](Proxy::latency) | delays each forwarded chunk by the one-way time, in both directions, keeping order (timed to some tens of microseconds, not to tokio's millisecond) | every round trip takes twice as long |
//! | [`drop_replies`](Proxy::drop_replies) | forwards the next n commands, drops the server's replies to exactly those (RESP parsed both ways; RESP3 push frames and RESP2 pub/sub messages are not replies) | the command times out, though the server applied it |
//! | [`reset`](Proxy::reset) | closes both sockets with RST, now | a connection error |
//! | [`black_hole`](Proxy::black_hole) | reads and holds nothing: bytes both ways are discarded, sockets stay open | silence: timeouts |
//! | [`stall_new_connections`](Proxy::stall_new_connections) | accepts, never connects upstream, never answers | a connect that succeeds and a handshake that hangs |
//!
//! Two consequences of RESP having no request ids, which the proxy handles the way a real
//! network failure would end:
//!
//! - A reply cannot be lost from a live TCP stream; a client (redis-rs keeps one slot per request
//!   in flight, even after a timeout) would take the next reply as the answer to the lost one. So
//!   once a reply was dropped, the connection is reset when the next *reply* on it is due (push
//!   frames still pass): the dropped command times out or sees a connection error, a command sent
//!   after it on the same connection sees a connection error although the server applied it too,
//!   and the client's next connection works.
//! - [`heal`](Proxy::heal) resets every connection that lost bytes to the black hole (its stream
//!   cannot continue); a connection that was silent meanwhile carries on.
//!
//! [`faults`](Proxy::faults) counts what was injected, by kind, for a test's report.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// Which connections a fault applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// Every connection.
    All,
    /// Connections whose client has not subscribed.
    Data,
    /// Connections whose client sent `SUBSCRIBE`, `SSUBSCRIBE` or `PSUBSCRIBE`.
    PubSub,
    /// The n-th accepted connection (0-based), including one not accepted yet.
    Nth(usize),
}

impl Which {
    fn matches(self, index: usize, pubsub: bool) -> bool {
        match self {
            Which::All => true,
            Which::Data => !pubsub,
            Which::PubSub => pubsub,
            Which::Nth(n) => n == index,
        }
    }

    /// Whether a rule set for `rule` is lifted by a `heal(self)`.
    fn covers(self, rule: Which, state: &State) -> bool {
        match (self, rule) {
            (Which::All, _) => true,
            (a, b) if a == b => true,
            (Which::Data | Which::PubSub, Which::Nth(n)) => state
                .conns
                .get(n)
                .is_some_and(|c| self.matches(n, c.pubsub)),
            _ => false,
        }
    }
}

/// One accepted connection, as [`Proxy::connections`] lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnInfo {
    /// Its accept order, 0-based (what [`Which::Nth`] names).
    pub index: usize,
    /// Whether its client sent `SUBSCRIBE`, `SSUBSCRIBE` or `PSUBSCRIBE`.
    pub is_pubsub: bool,
    /// Whether it is still open.
    pub open: bool,
    /// Whether it was accepted while new connections were stalled (never forwarded).
    pub stalled: bool,
}

/// How a connection ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Running,
    /// Both sides with RST, now.
    Reset,
}

/// A command in flight: how many reply frames it gets, and whether they are dropped.
#[derive(Debug)]
struct Expect {
    replies: usize,
    drop: bool,
    /// A (un)subscribe command: its RESP2 replies are arrays led by the command's name.
    pubsub: bool,
}

#[derive(Debug)]
struct ConnState {
    pubsub: bool,
    open: bool,
    stalled: bool,
    /// The client switched to RESP3 (`HELLO 3`): subscription confirmations are pushes.
    resp3: bool,
    /// Bytes from the client not yet parsed into a command.
    from_client: Vec<u8>,
    /// Bytes from the server not yet parsed into a frame.
    from_server: Vec<u8>,
    /// Unparsable traffic was seen: bytes pass through, no reply can be dropped.
    raw: bool,
    expected: VecDeque<Expect>,
    /// A reply was dropped: the next reply due ends the connection.
    lost_reply: bool,
    /// Bytes were discarded by a black hole: heal resets the connection.
    discarded: bool,
    end: watch::Sender<End>,
}

#[derive(Debug, Default)]
struct State {
    conns: Vec<ConnState>,
    latency: Vec<(Which, Duration)>,
    holes: Vec<Which>,
    /// (which, how many more, only commands with an argument containing these bytes)
    drops: Vec<(Which, usize, Option<Vec<u8>>)>,
    stall: bool,
    faults: BTreeMap<&'static str, u64>,
}

impl State {
    fn count(&mut self, kind: &'static str, n: u64) {
        *self.faults.entry(kind).or_default() += n;
    }

    fn latency_of(&self, i: usize) -> Duration {
        let pubsub = self.conns[i].pubsub;
        self.latency
            .iter()
            .filter(|(w, _)| w.matches(i, pubsub))
            .map(|(_, d)| *d)
            .max()
            .unwrap_or_default()
    }

    fn holed(&self, i: usize) -> bool {
        let pubsub = self.conns[i].pubsub;
        self.holes.iter().any(|w| w.matches(i, pubsub))
    }

    /// Whether this command of connection `i` has its reply dropped (uses up one).
    fn take_drop(&mut self, i: usize, args: &[Vec<u8>]) -> bool {
        let pubsub = self.conns[i].pubsub;
        let hit = self.drops.iter_mut().find(|(w, n, needle)| {
            *n > 0
                && w.matches(i, pubsub)
                && needle.as_ref().is_none_or(|needle| {
                    args.iter()
                        .any(|a| a.windows(needle.len()).any(|w| w == needle.as_slice()))
                })
        });
        let Some((_, n, _)) = hit else { return false };
        *n -= 1;
        self.drops.retain(|(_, n, _)| *n > 0);
        true
    }

    fn reset(&mut self, i: usize, kind: &'static str) {
        let conn = &mut self.conns[i];
        if conn.open {
            conn.open = false;
            conn.end.send_replace(End::Reset);
            self.count(kind, 1);
        }
    }

    fn closed(&mut self, i: usize) {
        self.conns[i].open = false;
    }

    fn open_matching(&self, which: Which) -> Vec<usize> {
        self.conns
            .iter()
            .enumerate()
            .filter(|(i, c)| c.open && which.matches(*i, c.pubsub))
            .map(|(i, _)| i)
            .collect()
    }

    /// Bytes from the client of connection `i`: what to forward to the server, and when.
    fn client_sent(&mut self, i: usize, bytes: &[u8]) -> Option<(Vec<u8>, Duration)> {
        if self.holed(i) {
            self.conns[i].discarded = true;
            return None;
        }
        self.parse_commands(i, bytes, true);
        Some((bytes.to_vec(), self.latency_of(i)))
    }

    /// Parse the client's commands; with `forwarded`, register the replies they will get.
    fn parse_commands(&mut self, i: usize, bytes: &[u8], forwarded: bool) {
        if self.conns[i].raw {
            return;
        }
        self.conns[i].from_client.extend_from_slice(bytes);
        loop {
            let conn = &mut self.conns[i];
            let parsed = match parse_command(&conn.from_client) {
                Ok(Some(parsed)) => parsed,
                Ok(None) => return,
                Err(why) => {
                    eprintln!(
                        "proxy: connection {i}: unparsable command stream ({why}); passing bytes through"
                    );
                    conn.raw = true;
                    conn.expected.clear();
                    return;
                }
            };
            conn.from_client.drain(..parsed.len);
            let Some(name) = parsed.args.first() else {
                continue; // an empty inline line
            };
            let name = String::from_utf8_lossy(name).to_ascii_uppercase();
            let subscribing = matches!(name.as_str(), "SUBSCRIBE" | "SSUBSCRIBE" | "PSUBSCRIBE");
            let pubsub_command = subscribing
                || matches!(
                    name.as_str(),
                    "UNSUBSCRIBE" | "SUNSUBSCRIBE" | "PUNSUBSCRIBE"
                );
            if subscribing {
                conn.pubsub = true;
            }
            if name == "HELLO" {
                match parsed.args.get(1).map(|v| v.as_slice()) {
                    Some(b"3") => conn.resp3 = true,
                    Some(b"2") => conn.resp3 = false,
                    _ => {}
                }
            }
            if !forwarded {
                continue;
            }
            let replies = match (pubsub_command, conn.resp3) {
                (true, true) => 0,
                (true, false) => parsed.args.len().saturating_sub(1).max(1),
                (false, _) => 1,
            };
            if replies == 0 {
                continue;
            }
            let drop = self.take_drop(i, &parsed.args);
            self.conns[i].expected.push_back(Expect {
                replies,
                drop,
                pubsub: pubsub_command,
            });
        }
    }

    /// Bytes from the server of connection `i`: what to forward to the client, and when; `Err`
    /// when the connection must be reset instead (a reply is due after a dropped one).
    fn server_sent(&mut self, i: usize, bytes: &[u8]) -> Result<Option<(Vec<u8>, Duration)>, ()> {
        if self.holed(i) {
            self.conns[i].discarded = true;
            return Ok(None);
        }
        let latency = self.latency_of(i);
        let conn = &mut self.conns[i];
        if conn.raw {
            return Ok(Some((bytes.to_vec(), latency)));
        }
        conn.from_server.extend_from_slice(bytes);
        let mut out = Vec::new();
        let mut dropped = 0;
        let mut at = 0;
        let mut reset = false;
        while at < conn.from_server.len() {
            let frame = match parse_frame(&conn.from_server[at..]) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(why) => {
                    eprintln!(
                        "proxy: connection {i}: unparsable reply stream ({why}); passing bytes through"
                    );
                    conn.raw = true;
                    conn.expected.clear();
                    out.extend_from_slice(&conn.from_server[at..]);
                    at = conn.from_server.len();
                    break;
                }
            };
            let bytes = &conn.from_server[at..at + frame.len];
            at += frame.len;
            if is_reply(conn, &frame) {
                let drop = match conn.expected.front_mut() {
                    Some(front) => {
                        front.replies -= 1;
                        let drop = front.drop;
                        if front.replies == 0 {
                            conn.expected.pop_front();
                        }
                        drop
                    }
                    None => false,
                };
                if drop {
                    dropped += 1;
                    conn.lost_reply = true;
                    continue;
                }
                if conn.lost_reply {
                    reset = true;
                    break;
                }
            }
            out.extend_from_slice(bytes);
        }
        conn.from_server.drain(..at);
        self.count("drop_reply", dropped);
        if reset {
            self.reset(i, "reset_after_lost_reply");
            return Err(());
        }
        Ok((!out.is_empty()).then_some((out, latency)))
    }
}

/// Whether a server frame answers a command (rather than being a push).
fn is_reply(conn: &ConnState, frame: &Frame) -> bool {
    if frame.kind == b'>' {
        return false;
    }
    if !conn.pubsub || conn.resp3 || frame.kind != b'*' {
        return true;
    }
    let first = frame
        .first
        .as_deref()
        .map(|f| String::from_utf8_lossy(f).to_ascii_lowercase());
    match first.as_deref() {
        Some("message" | "pmessage" | "smessage") => false,
        Some(
            "subscribe" | "ssubscribe" | "psubscribe" | "unsubscribe" | "sunsubscribe"
            | "punsubscribe",
        ) => conn.expected.front().is_some_and(|e| e.pubsub),
        _ => true,
    }
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A fault-injection proxy in front of one server. See the [module docs](self).
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    upstream: SocketAddr,
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    /// A proxy on a free loopback port forwarding to `127.0.0.1:<upstream_port>`.
    pub fn start(upstream_port: u16) -> Proxy {
        Proxy::start_to(SocketAddr::from((Ipv4Addr::LOCALHOST, upstream_port)))
    }

    /// A proxy on a free loopback port forwarding to `upstream`.
    pub fn start_to(upstream: SocketAddr) -> Proxy {
        let listener =
            std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("proxy: bind 127.0.0.1:0");
        listener
            .set_nonblocking(true)
            .expect("proxy: non-blocking listener");
        let port = listener.local_addr().expect("proxy: local addr").port();
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
        });
        let (shutdown, mut shutdown_rx) = watch::channel(false);
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("proxy-{port}"))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("proxy: runtime");
                runtime.block_on(async move {
                    let listener =
                        tokio::net::TcpListener::from_std(listener).expect("proxy: listener");
                    loop {
                        tokio::select! {
                            accepted = listener.accept() => match accepted {
                                Ok((client, _)) => {
                                    tokio::spawn(serve(thread_shared.clone(), client, upstream));
                                }
                                Err(e) => {
                                    eprintln!("proxy {port}: accept failed: {e}");
                                    tokio::time::sleep(Duration::from_millis(10)).await;
                                }
                            },
                            _ = shutdown_rx.changed() => return,
                        }
                    }
                });
            })
            .expect("proxy: spawn its thread");
        Proxy {
            port,
            upstream,
            shared,
            shutdown,
            thread: Some(thread),
        }
    }

    /// The proxy's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's port, which the proxy forwards to.
    pub fn upstream_port(&self) -> u16 {
        self.upstream.port()
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A [`tairlock::RedisStore`] connected through the proxy (needs a tokio runtime).
    pub async fn store(&self) -> tairlock::RedisStore {
        self.store_with(Default::default()).await
    }

    /// A [`tairlock::RedisStore`] with these options, connected through the proxy.
    pub async fn store_with(
        &self,
        options: tairlock::store::redis::RedisOptions,
    ) -> tairlock::RedisStore {
        match tairlock::RedisStore::connect_with(&self.url(), options).await {
            Ok(store) => store,
            Err(e) => panic!(
                "cannot connect a RedisStore through the proxy {}: {e}",
                self.url()
            ),
        }
    }

    /// Connections accepted so far (still open or not), in accept order.
    pub fn connections(&self) -> Vec<ConnInfo> {
        self.shared
            .lock()
            .conns
            .iter()
            .enumerate()
            .map(|(index, c)| ConnInfo {
                index,
                is_pubsub: c.pubsub,
                open: c.open,
                stalled: c.stalled,
            })
            .collect()
    }

    /// Delay each forwarded chunk of matching connections by `one_way`, in both directions (a
    /// rule: it also applies to matching connections accepted later). `Duration::ZERO` lifts the
    /// rule set for `which`.
    pub fn latency(&self, which: Which, one_way: Duration) {
        let mut state = self.shared.lock();
        state.latency.retain(|(w, _)| *w != which);
        if !one_way.is_zero() {
            state.latency.push((which, one_way));
            state.count("latency", 1);
        }
    }

    /// Forward the next `n` commands of matching connections to the server, but drop the server's
    /// replies to exactly those commands (RESP parsing; RESP3 push frames are not replies). The
    /// connection is reset when a later reply on it is due (see the [module docs](self)).
    pub fn drop_replies(&self, which: Which, n: usize) {
        if n > 0 {
            let mut state = self.shared.lock();
            state.drops.push((which, n, None));
            state.count("drop_replies", 1);
        }
    }

    /// [`drop_replies`](Self::drop_replies) for the next `n` commands one of whose arguments
    /// contains `needle` (e.g. a script's SHA1: every `EVALSHA` of that script); other commands
    /// pass.
    pub fn drop_replies_matching(&self, which: Which, needle: &[u8], n: usize) {
        if n > 0 && !needle.is_empty() {
            let mut state = self.shared.lock();
            state.drops.push((which, n, Some(needle.to_vec())));
            state.count("drop_replies", 1);
        }
    }

    /// Close both sides of every matching open connection with RST, now.
    pub fn reset(&self, which: Which) {
        let mut state = self.shared.lock();
        for i in state.open_matching(which) {
            state.reset(i, "reset");
        }
    }

    /// Hold all bytes both ways on matching connections (discarded, never delivered) while the
    /// sockets stay open: a silent partition. A rule, like [`latency`](Self::latency).
    pub fn black_hole(&self, which: Which) {
        let mut state = self.shared.lock();
        if !state.holes.contains(&which) {
            state.holes.push(which);
        }
        state.count("black_hole", 1);
    }

    /// End the black holes, latencies and pending reply drops set for `which` (for a class:
    /// also those set for its members by [`Which::Nth`]; `Which::All` ends every one). Held
    /// bytes are discarded, so a connection that lost bytes to a black hole is reset.
    pub fn heal(&self, which: Which) {
        let mut state = self.shared.lock();
        let state = &mut *state;
        let latency: Vec<_> = std::mem::take(&mut state.latency);
        state.latency = latency
            .into_iter()
            .filter(|(w, _)| !which.covers(*w, state))
            .collect();
        let holes: Vec<_> = std::mem::take(&mut state.holes);
        state.holes = holes
            .into_iter()
            .filter(|w| !which.covers(*w, state))
            .collect();
        let drops: Vec<_> = std::mem::take(&mut state.drops);
        state.drops = drops
            .into_iter()
            .filter(|(w, _, _)| !which.covers(*w, state))
            .collect();
        for i in 0..state.conns.len() {
            if state.conns[i].discarded && !state.holed(i) {
                state.reset(i, "reset_on_heal");
            }
        }
    }

    /// While `on`, new connections are accepted but never forwarded: no upstream connection,
    /// nothing answered, until the client gives up. Connections stalled stay stalled.
    pub fn stall_new_connections(&self, on: bool) {
        let mut state = self.shared.lock();
        if on && !state.stall {
            state.count("stall", 1);
        }
        state.stall = on;
    }

    /// Counters for a test's table, by kind: `latency`, `drop_replies` and `black_hole` (rules
    /// set), `drop_reply` (replies dropped), `reset` (connections reset on request),
    /// `reset_after_lost_reply`, `reset_on_heal`, `stall` (times switched on) and
    /// `stalled_connection`; and what the proxy saw rather than injected: `peer_reset` (a side
    /// reset its socket, the other side is reset too) and `upstream_refused` (no server).
    pub fn faults(&self) -> BTreeMap<&'static str, u64> {
        self.shared.lock().faults.clone()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shutdown.send_replace(true);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One accepted connection, until both directions end or it is reset.
async fn serve(shared: Arc<Shared>, client: TcpStream, upstream: SocketAddr) {
    let (end, end_rx) = watch::channel(End::Running);
    let (index, stalled) = {
        let mut state = shared.lock();
        let stalled = state.stall;
        state.conns.push(ConnState {
            pubsub: false,
            open: true,
            stalled,
            resp3: false,
            from_client: Vec::new(),
            from_server: Vec::new(),
            raw: false,
            expected: VecDeque::new(),
            lost_reply: false,
            discarded: false,
            end,
        });
        if stalled {
            state.count("stalled_connection", 1);
        }
        (state.conns.len() - 1, stalled)
    };
    let _ = client.set_nodelay(true);
    if stalled {
        stall(&shared, index, client, end_rx).await;
        shared.lock().closed(index);
        return;
    }
    let upstream =
        match tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(upstream)).await {
            Ok(Ok(upstream)) => upstream,
            _ => {
                // No server: the client sees its connection closed, as a dead server would do.
                shared.lock().reset(index, "upstream_refused");
                return;
            }
        };
    let _ = upstream.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = upstream.into_split();
    let (to_server, to_server_rx) = mpsc::unbounded_channel();
    let (to_client, to_client_rx) = mpsc::unbounded_channel();
    tokio::join!(
        read_side(
            &shared,
            index,
            Side::Client,
            client_read,
            to_server,
            end_rx.clone()
        ),
        write_side(&shared, index, server_write, to_server_rx, end_rx.clone()),
        read_side(
            &shared,
            index,
            Side::Server,
            server_read,
            to_client,
            end_rx.clone()
        ),
        write_side(&shared, index, client_write, to_client_rx, end_rx),
    );
    shared.lock().closed(index);
}

/// A stalled connection: read and discard (noting a subscription) until the client leaves.
async fn stall(
    shared: &Shared,
    index: usize,
    mut client: TcpStream,
    mut end: watch::Receiver<End>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        tokio::select! {
            read = client.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => shared.lock().parse_commands(index, &buf[..n], false),
            },
            _ = end.changed() => {
                zero_linger(&client);
                return;
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Side {
    Client,
    Server,
}

type Chunk = (Instant, Vec<u8>);

/// Read one side and queue what is to be forwarded; on EOF close the queue (the writer then
/// half-closes the other side), on an error reset the connection.
async fn read_side(
    shared: &Shared,
    index: usize,
    side: Side,
    mut half: OwnedReadHalf,
    queue: mpsc::UnboundedSender<Chunk>,
    mut end: watch::Receiver<End>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let read = tokio::select! {
            read = half.read(&mut buf) => read,
            _ = end.changed() => {
                zero_linger(half.as_ref());
                return;
            }
        };
        let n = match read {
            Ok(0) => return,
            Ok(n) => n,
            Err(_) => {
                shared.lock().reset(index, "peer_reset");
                zero_linger(half.as_ref());
                return;
            }
        };
        let forward = {
            let mut state = shared.lock();
            match side {
                Side::Client => state.client_sent(index, &buf[..n]),
                Side::Server => match state.server_sent(index, &buf[..n]) {
                    Ok(forward) => forward,
                    Err(()) => {
                        zero_linger(half.as_ref());
                        return;
                    }
                },
            }
        };
        if let Some((bytes, delay)) = forward {
            let _ = queue.send((Instant::now() + delay, bytes));
        }
    }
}

/// Write the queued chunks to one side, each at its time; half-close when the queue ends.
async fn write_side(
    shared: &Shared,
    index: usize,
    mut half: OwnedWriteHalf,
    mut queue: mpsc::UnboundedReceiver<Chunk>,
    mut end: watch::Receiver<End>,
) {
    loop {
        let next = tokio::select! {
            biased;
            _ = end.changed() => break,
            next = queue.recv() => next,
        };
        let Some((at, bytes)) = next else {
            if *end.borrow() == End::Reset {
                break; // the reader saw the reset first
            }
            let _ = half.shutdown().await;
            return;
        };
        if at > Instant::now() {
            tokio::select! {
                () = Clock::get().until(at.into_std()) => {}
                _ = end.changed() => break,
            }
        }
        {
            let mut state = shared.lock();
            if state.holed(index) {
                state.conns[index].discarded = true;
                continue;
            }
        }
        let written = tokio::select! {
            written = half.write_all(&bytes) => written,
            _ = end.changed() => break,
        };
        if written.is_err() {
            shared.lock().reset(index, "peer_reset");
            break;
        }
    }
    // A reset: no FIN first (dropping a write half would send one), the close is an RST.
    zero_linger(half.as_ref());
    half.forget();
}

/// The delays' timer: one thread for every proxy of the process, which sleeps on a condition
/// variable until the earliest chunk is due and wakes its writer. tokio's timer rounds every
/// deadline up to its millisecond tick, which would make an added latency of 100 µs one of up
/// to a millisecond and more; a condition variable's timeout is the kernel's high-resolution
/// timer (late by its slack, some tens of microseconds).
struct Clock {
    due: Mutex<BinaryHeap<Reverse<Due>>>,
    changed: Condvar,
}

/// A writer waiting for `at`; `seq` orders equal instants.
struct Due {
    at: std::time::Instant,
    seq: u64,
    wake: tokio::sync::oneshot::Sender<()>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

impl Clock {
    /// The process's clock, its thread started on first use.
    fn get() -> &'static Clock {
        static CLOCK: OnceLock<&'static Clock> = OnceLock::new();
        CLOCK.get_or_init(|| {
            let clock: &'static Clock = Box::leak(Box::new(Clock {
                due: Mutex::new(BinaryHeap::new()),
                changed: Condvar::new(),
            }));
            std::thread::Builder::new()
                .name("proxy-clock".to_owned())
                .spawn(move || clock.run())
                .expect("proxy: spawn the clock thread");
            clock
        })
    }

    /// Resolves at `at` (at once if it has passed, or if the clock is gone).
    async fn until(&self, at: std::time::Instant) {
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let (wake, woken) = tokio::sync::oneshot::channel();
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        {
            let mut due = self.due.lock().unwrap_or_else(|e| e.into_inner());
            let earliest = due.peek().is_none_or(|Reverse(first)| at < first.at);
            due.push(Reverse(Due { at, seq, wake }));
            if earliest {
                self.changed.notify_one();
            }
        }
        let _ = woken.await;
    }

    fn run(&self) {
        let mut due = self.due.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let now = std::time::Instant::now();
            while due.peek().is_some_and(|Reverse(first)| first.at <= now) {
                if let Some(Reverse(first)) = due.pop() {
                    let _ = first.wake.send(());
                }
            }
            due = match due.peek() {
                Some(Reverse(first)) => {
                    let wait = first.at - now;
                    self.changed
                        .wait_timeout(due, wait)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
                None => self.changed.wait(due).unwrap_or_else(|e| e.into_inner()),
            };
        }
    }
}

/// Make the socket's close an RST.
fn zero_linger(stream: &TcpStream) {
    #[allow(deprecated)] // zero linger never blocks on close
    let _ = stream.set_linger(Some(Duration::ZERO));
}

/// A parsed client command: its arguments and its length in bytes.
#[derive(Debug)]
struct Command {
    args: Vec<Vec<u8>>,
    len: usize,
}

/// Parse one command (a RESP array of bulk strings, or an inline line); `None` if incomplete.
fn parse_command(buf: &[u8]) -> Result<Option<Command>, String> {
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] != b'*' {
        let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
            return Ok(None);
        };
        let line = String::from_utf8_lossy(&buf[..nl]);
        let args = line
            .split_ascii_whitespace()
            .map(|a| a.as_bytes().to_vec())
            .collect();
        return Ok(Some(Command { args, len: nl + 1 }));
    }
    let Some((count, mut at)) = line_int(buf, 1)? else {
        return Ok(None);
    };
    let mut args = Vec::new();
    for _ in 0..count.max(0) {
        if at >= buf.len() {
            return Ok(None);
        }
        if buf[at] != b'$' {
            return Err(format!("expected a bulk string, got {:?}", buf[at] as char));
        }
        let Some((len, start)) = line_int(buf, at + 1)? else {
            return Ok(None);
        };
        let len = usize::try_from(len).map_err(|_| "negative bulk length".to_owned())?;
        if buf.len() < start + len + 2 {
            return Ok(None);
        }
        args.push(buf[start..start + len].to_vec());
        at = start + len + 2;
    }
    Ok(Some(Command { args, len: at }))
}

/// A parsed server frame: its type byte, the first element of an aggregate when it is a string,
/// and its length in bytes.
#[derive(Debug)]
struct Frame {
    kind: u8,
    first: Option<Vec<u8>>,
    len: usize,
}

/// Parse one RESP2/RESP3 frame (an attribute is parsed with the frame it annotates); `None` if
/// incomplete.
fn parse_frame(buf: &[u8]) -> Result<Option<Frame>, String> {
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    match kind {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => {
            let Some(nl) = find_crlf(buf, 1) else {
                return Ok(None);
            };
            Ok(Some(Frame {
                kind,
                first: None,
                len: nl + 2,
            }))
        }
        b'$' | b'!' | b'=' => {
            let Some((len, start)) = line_int(buf, 1)? else {
                return Ok(None);
            };
            if len < 0 {
                return Ok(Some(Frame {
                    kind,
                    first: None,
                    len: start,
                }));
            }
            let end = start + len as usize + 2;
            Ok((buf.len() >= end).then_some(Frame {
                kind,
                first: None,
                len: end,
            }))
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let Some((count, mut at)) = line_int(buf, 1)? else {
                return Ok(None);
            };
            let items = if matches!(kind, b'%' | b'|') {
                count.max(0) * 2
            } else {
                count.max(0)
            };
            let mut first = None;
            for n in 0..items {
                let Some(item) = parse_frame(&buf[at..])? else {
                    return Ok(None);
                };
                if n == 0 {
                    let body = &buf[at..at + item.len];
                    first = match item.kind {
                        b'$' => find_crlf(body, 1)
                            .and_then(|nl| body.get(nl + 2..body.len().checked_sub(2)?))
                            .map(<[u8]>::to_vec),
                        b'+' => Some(body[1..body.len() - 2].to_vec()),
                        _ => None,
                    };
                }
                at += item.len;
            }
            if kind == b'|' {
                // An attribute annotates the frame that follows it.
                let Some(next) = parse_frame(&buf[at..])? else {
                    return Ok(None);
                };
                return Ok(Some(Frame {
                    kind: next.kind,
                    first: next.first,
                    len: at + next.len,
                }));
            }
            Ok(Some(Frame {
                kind,
                first,
                len: at,
            }))
        }
        other => Err(format!("unknown RESP type byte {:?}", other as char)),
    }
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|p| from + p)
}

/// The integer on the line starting at `from`, and where the next line starts.
fn line_int(buf: &[u8], from: usize) -> Result<Option<(i64, usize)>, String> {
    let Some(nl) = find_crlf(buf, from) else {
        return Ok(None);
    };
    let text = std::str::from_utf8(&buf[from..nl]).map_err(|_| "non-UTF-8 length".to_owned())?;
    let n = text
        .parse::<i64>()
        .map_err(|_| format!("bad length {text:?}"))?;
    Ok(Some((n, nl + 2)))
}
