//! Every remote peer is its own client: a second peer with a valid
//! certificate of the same CA (another common name), talking Zenoh
//! directly to the serving bridge, tries to read and write a first peer's
//! connection while that peer reads a file through a bridge pair; sends
//! past its window on a connection of its own; and breaks each rule of
//! the bridge's messages, one connection each. Only its own connections
//! end.
//!
//! In one process (so nothing outlives the test): a file server, `serve`
//! and `connect` on loopback QUIC with mutual TLS (certificates made here
//! with openssl), and the attacker's own Zenoh session. A watchdog fails
//! the test rather than let it hang.

#![cfg(feature = "zenoh")]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shmpipe_bridge::testing::certificates;
use shmpipe_bridge::{Options, Tls};
use zenoh::sample::Locality;
use zenoh::Session;

const KEY: &str = "iso/files";
/// Bound on a whole test; far above what a run takes.
const WATCHDOG: Duration = Duration::from_secs(120);

fn free_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2654435761) >> 13) as u8 ^ seed)
        .collect()
}

struct World {
    dir: PathBuf,
    endpoint: String,
    sock: PathBuf,
    rt: tokio::runtime::Runtime,
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl World {
    /// A file server holding `files`, a serving bridge for it, and the
    /// victim's connecting bridge (certificate `alice`, Zenoh mode
    /// `alice_mode`) at `self.sock`.
    fn new(what: &str, files: &[(&str, &[u8])], alice_mode: &str) -> World {
        World::with(what, files, alice_mode, |_| {})
    }

    /// As [`World::new`], with the serving bridge's options changed by
    /// `serving`.
    fn with(
        what: &str,
        files: &[(&str, &[u8])],
        alice_mode: &str,
        serving: impl FnOnce(&mut Options),
    ) -> World {
        let dir = std::env::temp_dir().join(format!("shmpipe-iso-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("root")).unwrap();
        certificates(&dir, "iso", &[], &["serve", "alice", "eve", "carol"]).unwrap();
        for (name, data) in files {
            std::fs::write(dir.join("root").join(name), data).unwrap();
        }
        let fs_sock = dir.join("fs.sock");
        let server = shmpipe::fs::Server::new(dir.join("root")).unwrap();
        let listener = shmpipe::fs::Server::bind(&fs_sock).unwrap();
        std::thread::spawn(move || server.serve(listener));
        let w = World {
            endpoint: format!("quic/127.0.0.1:{}", free_port()),
            sock: dir.join("bridge.sock"),
            dir,
            rt: tokio::runtime::Runtime::new().unwrap(),
        };
        let mut serve = w.options("serve");
        serving(&mut serve);
        let mut connect = w.options("alice");
        let config = w.dir.join("alice.json5");
        std::fs::write(&config, format!("{{ mode: \"{alice_mode}\" }}")).unwrap();
        connect.config = Some(config);
        let sock = w.sock.clone();
        w.rt.spawn(async move { shmpipe_bridge::serve(fs_sock, KEY, &serve).await });
        // A session in client mode gives up at once when no endpoint
        // answers (Zenoh's `connect/exit_on_failure`): start Alice's once
        // the serving bridge listens (its QUIC port is taken).
        // Looked up in /proc, not by binding it, which could take it
        // from the serving bridge.
        let port: u16 = w.endpoint.rsplit_once(':').unwrap().1.parse().unwrap();
        let bound = format!(":{port:04X} ");
        while !std::fs::read_to_string("/proc/net/udp").is_ok_and(|t| t.contains(&bound)) {
            std::thread::sleep(Duration::from_millis(10));
        }
        w.rt.spawn(async move { shmpipe_bridge::connect(KEY, sock, &connect).await });
        while !w.sock.exists() {
            std::thread::sleep(Duration::from_millis(10));
        }
        w
    }

    fn tls(&self, who: &str) -> Tls {
        Tls {
            ca: self.dir.join("iso-ca.pem"),
            cert: self.dir.join(format!("{who}.pem")),
            key: self.dir.join(format!("{who}.key")),
        }
    }

    fn options(&self, who: &str) -> Options {
        Options {
            endpoints: vec![self.endpoint.clone()],
            tls: Some(self.tls(who)),
            ..Options::default()
        }
    }

    /// A plain Zenoh peer with certificate `who` of the bridges' CA,
    /// connected to the serving bridge: no bridge code, any message.
    async fn raw_peer(&self, who: &str) -> Session {
        let t = self.tls(who);
        let mut c = zenoh::Config::default();
        let mut set = |k: &str, v: serde_json::Value| c.insert_json5(k, &v.to_string()).unwrap();
        set("mode", "peer".into());
        set("connect/endpoints", vec![self.endpoint.clone()].into());
        set("listen/endpoints", serde_json::json!([]));
        set("scouting/multicast/enabled", false.into());
        set("transport/link/protocols", vec!["quic"].into());
        let p = |p: &PathBuf| serde_json::Value::from(p.display().to_string());
        set("transport/link/tls/root_ca_certificate", p(&t.ca));
        for side in ["listen", "connect"] {
            set(
                &format!("transport/link/tls/{side}_certificate"),
                p(&t.cert),
            );
            set(&format!("transport/link/tls/{side}_private_key"), p(&t.key));
        }
        set("transport/link/tls/enable_mtls", true.into());
        zenoh::open(c).await.unwrap()
    }
}

/// Runs `body` on a thread of its own; fails if it takes past WATCHDOG.
fn watchdog(body: impl FnOnce() + Send + 'static) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        body();
        let _ = tx.send(());
    });
    match rx.recv_timeout(WATCHDOG) {
        Ok(()) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("hung past {WATCHDOG:?}"),
        Err(e) => panic!("the test failed: {e}"),
    }
}

/// A bridge message holding one RPC frame: kind 0, header, body.
fn frame(body: &[u8]) -> Vec<u8> {
    let mut m = vec![0u8];
    m.extend_from_slice(&shmpipe_rpc::wire::header(
        body.len() as u32,
        shmpipe_rpc::wire::OK,
    ));
    m.extend_from_slice(body);
    m
}

/// Asks to open a connection as the bridges do; the secret on success.
async fn open(eve: &Session) -> Result<String, String> {
    open_on(eve, &format!("{KEY}/_open"), &eve.zid().to_string(), 10).await
}

/// Asks `key` to open a connection for session id `session`, waiting at
/// most `secs` for an answer; the secret on success.
async fn open_on(eve: &Session, key: &str, session: &str, secs: u64) -> Result<String, String> {
    let replies = eve
        .get(key)
        .payload(session)
        .timeout(Duration::from_secs(secs))
        .await
        .map_err(|e| e.to_string())?;
    let reply = replies
        .recv_async()
        .await
        .map_err(|_| "no answer".to_owned())?;
    match reply.into_result() {
        Ok(s) => Ok(s.payload().try_to_string().unwrap().into_owned()),
        Err(e) => Err(e.payload().try_to_string().unwrap().into_owned()),
    }
}

#[test]
fn another_authenticated_peer_neither_reads_nor_writes_a_peers_connection() {
    snoop("peer");
}

/// The same with the victim's bridge in Zenoh's client mode (its
/// `--config` may say so): the serving bridge then routes for it, and
/// only its access control keeps the other peer out.
#[test]
fn another_authenticated_peer_neither_reads_nor_writes_a_client_modes_connection() {
    snoop("client");
}

fn snoop(alice_mode: &'static str) {
    watchdog(move || {
        let file = bytes(16 << 20, 3);
        let w = World::new(&format!("snoop-{alice_mode}"), &[("f", &file)], alice_mode);
        let seen = Arc::new(AtomicUsize::new(0));
        let eve = w.rt.block_on(async {
            // Eve: a valid certificate of the same CA, another name.
            let eve = w.raw_peer("eve").await;
            // Her session is up with the serving bridge's (the mutual TLS
            // handshake passed): she is in.
            while eve.info().peers_zid().await.next().is_none() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // Everything she can ask to see, from anyone but herself.
            let count = |s: &Arc<AtomicUsize>| {
                let s = s.clone();
                move |sample: zenoh::sample::Sample| {
                    s.fetch_add(1 + sample.payload().len(), Ordering::Relaxed);
                }
            };
            for k in ["**", "iso/**", "iso/files/**", "iso/files/_conn/*/down"] {
                eve.declare_subscriber(k)
                    .allowed_origin(Locality::Remote)
                    .callback(count(&seen))
                    .background()
                    .await
                    .unwrap();
                eve.liveliness()
                    .declare_subscriber(k)
                    .callback(count(&seen))
                    .background()
                    .await
                    .unwrap();
            }
            let s = seen.clone();
            eve.declare_queryable("iso/**")
                .allowed_origin(Locality::Remote)
                .callback(move |_q| {
                    s.fetch_add(1, Ordering::Relaxed);
                })
                .background()
                .await
                .unwrap();
            eve
        });
        // Eve writes into whatever she can name while Alice reads.
        let stop = Arc::new(AtomicUsize::new(0));
        let (s, halt) = (seen.clone(), stop.clone());
        let attack = w.rt.spawn(async move {
            let junk = frame(b"eve was here");
            let targets = [
                format!("{KEY}/_conn/*/up"),
                format!("{KEY}/_conn/*/*/up"),
                format!("{KEY}/_conn/**"),
                format!("{KEY}/**"),
                "**".to_owned(),
            ];
            while halt.load(Ordering::Relaxed) == 0 {
                for t in &targets {
                    let _ = eve.put(t.as_str(), junk.clone()).await;
                }
                // Tokens and replies she could learn keys from, or steal
                // another connection's frames with.
                for k in [
                    "**",
                    "iso/**",
                    "iso/files/_conn/*/down",
                    "iso/files/_conn/**",
                ] {
                    if let Ok(r) = eve
                        .liveliness()
                        .get(k)
                        .timeout(Duration::from_millis(50))
                        .await
                    {
                        while let Ok(reply) = r.recv_async().await {
                            if let Ok(token) = reply.result() {
                                s.fetch_add(1, Ordering::Relaxed);
                                let base = token.key_expr().as_str().rsplit_once('/').unwrap().0;
                                let _ = eve.put(format!("{base}/up"), junk.clone()).await;
                            }
                        }
                    }
                    if let Ok(r) = eve.get(k).timeout(Duration::from_millis(50)).await {
                        while let Ok(reply) = r.recv_async().await {
                            if let Ok(sample) = reply.result() {
                                s.fetch_add(1 + sample.payload().len(), Ordering::Relaxed);
                            }
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            eve
        });
        // Alice, through her bridge, reads the file while all that goes on.
        alice_reads(&w, &file);
        // And again, in a connection opened while Eve was at it.
        alice_reads(&w, &file);
        stop.store(1, Ordering::Relaxed);
        let eve = w.rt.block_on(attack).unwrap();
        assert_eq!(
            seen.load(Ordering::Relaxed),
            0,
            "eve saw a token, a frame, a reply or a query of a connection not hers"
        );
        drop(eve);
    });
}

/// Eve opens a connection of her own as a connecting bridge would, puts
/// `messages` on it, and returns what the serving bridge says on its way
/// back (the END's text) before it ends the connection.
async fn eve_sends(w: &World, messages: &[Vec<u8>]) -> String {
    let eve = w.raw_peer("eve").await;
    let secret = loop {
        match open(&eve).await {
            Ok(s) => break s,
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    let base = format!("{KEY}/_conn/{secret}");
    let token = eve
        .liveliness()
        .declare_token(format!("{base}/client"))
        .await
        .unwrap();
    let up = eve
        .declare_publisher(format!("{base}/up"))
        .congestion_control(zenoh::qos::CongestionControl::Block)
        .await
        .unwrap();
    for m in messages {
        up.put(m.clone()).await.unwrap();
    }
    let replies = eve
        .get(format!("{base}/down"))
        .consolidation(zenoh::query::ConsolidationMode::None)
        .timeout(Duration::from_secs(30))
        .await
        .unwrap();
    let mut said = String::new();
    while let Ok(r) = replies.recv_async().await {
        if let Ok(s) = r.result() {
            said.push_str(&String::from_utf8_lossy(&s.payload().to_bytes()));
        }
    }
    drop(token);
    said
}

/// Alice reads `file` through her bridge, whole.
fn alice_reads(w: &World, file: &[u8]) {
    let client = shmpipe::fs::Client::connect(&w.sock).expect("alice connects");
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut client.open("f").unwrap(), &mut got).unwrap();
    assert!(got == file, "alice's file differs ({} bytes)", got.len());
}

/// With names listed (`--peer`), a peer counts as the name its
/// certificate proves: Eve cannot open as Alice, nor without a name, nor
/// past her own bound by sending new session ids; Carol, a certificate of
/// the same CA not listed, opens nothing; Alice is served throughout.
#[test]
fn a_peer_counts_as_the_name_its_certificate_proves() {
    watchdog(|| {
        let file = bytes(1 << 20, 5);
        let w = World::with("names", &[("f", &file)], "peer", |o| {
            o.peers = vec!["alice".into(), "eve".into()];
            o.limits.per_peer(2);
        });
        let named = |n: &str| format!("{KEY}/_open/{n}");
        w.rt.block_on(async {
            let (eve, carol) = (w.raw_peer("eve").await, w.raw_peer("carol").await);
            for s in [&eve, &carol] {
                while s.info().peers_zid().await.next().is_none() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            // Access control drops a request under another's name: no
            // answer comes (2 s; a granted request is answered at once).
            for id in ["01", "02", "03"] {
                let r = open_on(&eve, &named("alice"), id, 2).await;
                assert_eq!(r, Err("no answer".to_owned()), "eve as alice");
            }
            let r = open_on(&carol, &named("carol"), "01", 2).await;
            assert_eq!(r, Err("no answer".to_owned()), "carol, not listed");
            for s in [&eve, &carol] {
                let r = open_on(s, &format!("{KEY}/_open"), "01", 10).await;
                assert!(r.as_ref().is_err_and(|e| e.contains("--peer")), "{r:?}");
            }
            // Her own name: two seats, whatever session ids she sends.
            for id in ["01", "02"] {
                let r = open_on(&eve, &named("eve"), id, 10).await;
                assert!(r.is_ok(), "eve's own seat: {r:?}");
            }
            let r = open_on(&eve, &named("eve"), "03", 10).await;
            assert!(
                r.as_ref().is_err_and(|e| e.contains("per peer")),
                "eve past her bound: {r:?}"
            );
        });
        // Alice's bridge opens under her certificate's name, and is served.
        alice_reads(&w, &file);
    });
}

#[test]
fn a_peer_past_its_window_loses_only_its_connection() {
    watchdog(|| {
        let file = bytes(8 << 20, 7);
        let w = World::new("window", &[("f", &file)], "peer");
        // Five whole 1 MiB frames, never asking for a grant: past the
        // 4 MiB window.
        let big = frame(&vec![0u8; 1 << 20]);
        let why = w.rt.block_on(eve_sends(&w, &vec![big; 5]));
        assert!(why.contains("past its window"), "{why:?}");
        // Alice is served, by the same serving bridge, meanwhile and after.
        alice_reads(&w, &file);
    });
}

/// A message with kind `kind` and body `body`.
fn message(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind];
    m.extend_from_slice(body);
    m
}

/// The FRAME message that begins a frame announcing `len` body bytes and
/// carrying `carried` of them.
fn frame_start(len: u32, carried: usize) -> Vec<u8> {
    let mut m = message(0, &shmpipe_rpc::wire::header(len, shmpipe_rpc::wire::OK));
    m.resize(m.len() + carried, 0);
    m
}

/// Every rule of the bridge's messages (`frame.rs`) broken in turn, each
/// on a connection of its own: the serving bridge ends that connection
/// and says why; it writes nothing of the bad message to the service, and
/// Alice's connection, opened before, is served throughout.
#[test]
fn a_peer_breaking_the_message_rules_loses_only_its_connection() {
    watchdog(|| {
        let file = bytes(1 << 20, 9);
        let w = World::new("rules", &[("f", &file)], "peer");
        let over = shmpipe_bridge::DEFAULT_MAX_FRAME + 1;
        let mut untagged = message(0, &10u64.to_le_bytes());
        untagged.resize(untagged.len() + 10, 0);
        let cases: Vec<(&str, Vec<Vec<u8>>, &str)> = vec![
            ("empty", vec![vec![]], "an empty message"),
            ("short", vec![message(0, &[1, 2, 3])], "a short frame"),
            ("untagged", vec![untagged], "without the RPC tag"),
            (
                "oversized",
                vec![frame_start(over, 0)],
                "over the bridge's max_frame",
            ),
            ("overlong", vec![frame_start(10, 11)], "the wrong length"),
            (
                "more alone",
                vec![message(3, &[0; 16])],
                "more than its frame holds",
            ),
            (
                "more past the frame",
                vec![frame_start(20, 10), message(3, &[0; 11])],
                "more than its frame holds",
            ),
            (
                "frame inside a frame",
                vec![frame_start(20, 10), frame_start(4, 4)],
                "a frame inside another",
            ),
            ("short grant", vec![message(1, &[1, 2, 3])], "a short grant"),
            (
                "grant of nothing sent",
                vec![message(1, &(1u64 << 40).to_le_bytes())],
                "granted more than was sent",
            ),
            ("unknown kind", vec![message(9, b"?")], "unknown kind"),
        ];
        let alice = shmpipe::fs::Client::connect(&w.sock).expect("alice connects");
        for (what, messages, expected) in cases {
            let why = w.rt.block_on(eve_sends(&w, &messages));
            assert!(why.contains(expected), "{what}: {why:?}");
            let mut got = Vec::new();
            std::io::Read::read_to_end(&mut alice.open("f").unwrap(), &mut got).unwrap();
            assert!(got == file, "{what}: alice's file differs");
        }
        alice_reads(&w, &file);
    });
}
