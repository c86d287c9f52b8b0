//! `shmpipe bridge` between two network namespaces made here (a veth
//! pair, addresses only inside them): `shmpipe fileserver` and `bridge
//! serve` in one, `bridge connect` and `shmpipe cat` in the other, over
//! mutual TLS with certificates made at test time (openssl). Where
//! namespaces cannot be made (not root, no `ip`), both bridges run on
//! loopback and the test says so.
//!
//! Every process is killed when its test ends, however it ends, and every
//! wait is bounded (a watchdog kills a hung child and fails the test).

#![cfg(feature = "zenoh")]

use std::io::Read;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use shmpipe_bridge::testing::{certificates, Procs};

const EXE: &str = env!("CARGO_BIN_EXE_shmpipe");
/// Bound on any one child's run; far above what a run takes.
const WATCHDOG: Duration = Duration::from_secs(120);

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// Two namespaces joined by a veth pair, removed on drop.
struct Netns {
    a: String,
    b: String,
    addr_a: String,
}

impl Netns {
    fn make(tag: usize) -> Option<Netns> {
        let id = format!("{}{tag}", std::process::id() % 100_000);
        let (a, b) = (format!("shmpb-{id}-a"), format!("shmpb-{id}-b"));
        let (va, vb) = (format!("vsa{id}"), format!("vsb{id}"));
        // 10.226.X.0/24, inside these two namespaces only.
        let net = format!("10.226.{}", (tag % 250) + 1);
        let ns = Netns {
            a: a.clone(),
            b: b.clone(),
            addr_a: format!("{net}.1"),
        };
        let steps: Vec<Vec<String>> = vec![
            vec!["netns".into(), "add".into(), a.clone()],
            vec!["netns".into(), "add".into(), b.clone()],
            ["link", "add", &va, "type", "veth", "peer", "name", &vb]
                .map(String::from)
                .to_vec(),
            ["link", "set", &va, "netns", &a].map(String::from).to_vec(),
            ["link", "set", &vb, "netns", &b].map(String::from).to_vec(),
            ["-n", &a, "addr", "add", &format!("{net}.1/24"), "dev", &va]
                .map(String::from)
                .to_vec(),
            ["-n", &b, "addr", "add", &format!("{net}.2/24"), "dev", &vb]
                .map(String::from)
                .to_vec(),
            ["-n", &a, "link", "set", &va, "up"]
                .map(String::from)
                .to_vec(),
            ["-n", &b, "link", "set", &vb, "up"]
                .map(String::from)
                .to_vec(),
            ["-n", &a, "link", "set", "lo", "up"]
                .map(String::from)
                .to_vec(),
            ["-n", &b, "link", "set", "lo", "up"]
                .map(String::from)
                .to_vec(),
        ];
        for step in steps {
            let ok = Command::new("ip")
                .args(&step)
                .stderr(Stdio::null())
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if !ok {
                eprintln!("bridge test: `ip {}` failed", step.join(" "));
                drop(ns);
                return None;
            }
        }
        Some(ns)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in [&self.a, &self.b] {
            let _ = Command::new("ip")
                .args(["netns", "del", n])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// A file server and a bridge pair, with the test's certificates.
struct Setup {
    dir: PathBuf,
    root: PathBuf,
    fs_sock: PathBuf,
    /// The connecting bridge's socket: where clients go.
    sock: PathBuf,
    endpoint: String,
    netns: Option<Netns>,
    serve: Option<Child>,
    connect: Option<Child>,
    procs: Procs,
}

impl Drop for Setup {
    fn drop(&mut self) {
        for c in [self.serve.as_mut(), self.connect.as_mut()]
            .into_iter()
            .flatten()
        {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.procs = Procs::default();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `shmpipe ARGS` in namespace `ns` (or here).
fn shmpipe(ns: Option<&str>) -> Command {
    match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            // `ip netns exec` execs the program: the child is it.
            c.args(["netns", "exec", ns, EXE]);
            c
        }
        None => Command::new(EXE),
    }
}

fn wait_for(path: &Path, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{what} never listened at {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn free_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Setup {
    fn new(what: &str) -> Setup {
        Setup::with(what, &[])
    }

    /// With `serve_args` for the serving bridge.
    fn with(what: &str, serve_args: &[&str]) -> Setup {
        let tag = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("shmpipe-bridge-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("root")).unwrap();
        let netns = Netns::make(tag);
        let endpoint = match &netns {
            Some(ns) => format!("quic/{}:7447", ns.addr_a),
            None => {
                eprintln!(
                    "bridge test {what}: network namespaces could not be made (root and `ip` \
                     are needed): both bridges run on loopback"
                );
                format!("quic/127.0.0.1:{}", free_port())
            }
        };
        let ip = netns
            .as_ref()
            .map_or("127.0.0.1".to_owned(), |n| n.addr_a.clone());
        certificates(&dir, "good", &[&ip], &["serve", "connect"]).unwrap();
        certificates(&dir, "rogue", &[&ip], &["stranger"]).unwrap();
        let mut s = Setup {
            root: dir.join("root"),
            fs_sock: dir.join("fs.sock"),
            sock: dir.join("bridge.sock"),
            dir,
            endpoint,
            netns,
            serve: None,
            connect: None,
            procs: Procs::default(),
        };
        let fs = shmpipe(s.ns_a())
            .arg("fileserver")
            .arg("--root")
            .arg(&s.root)
            .arg("--socket")
            .arg(&s.fs_sock)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("run shmpipe fileserver");
        s.procs.0.push(fs);
        wait_for(&s.fs_sock, "the file server");
        s.serve = Some(s.start_serve(serve_args));
        s.connect = Some(s.start_connect(&s.sock.clone(), "connect", "good", &[]));
        wait_for(&s.sock, "bridge connect");
        s
    }

    fn ns_a(&self) -> Option<&str> {
        self.netns.as_ref().map(|n| n.a.as_str())
    }

    fn ns_b(&self) -> Option<&str> {
        self.netns.as_ref().map(|n| n.b.as_str())
    }

    fn tls(&self, who: &str, ca: &str) -> Vec<String> {
        let f = |n: String| self.dir.join(n).display().to_string();
        vec![
            "--tls-ca".into(),
            f(format!("{ca}-ca.pem")),
            "--tls-cert".into(),
            f(format!("{who}.pem")),
            "--tls-key".into(),
            f(format!("{who}.key")),
        ]
    }

    fn start_serve(&self, extra: &[&str]) -> Child {
        shmpipe(self.ns_a())
            .args(["bridge", "serve", "--key", "test/files", "--socket"])
            .arg(&self.fs_sock)
            .args(["--listen", &self.endpoint])
            .args(self.tls("serve", "good"))
            .args(extra)
            .stdin(Stdio::null())
            .spawn()
            .expect("run bridge serve")
    }

    fn start_connect(&self, sock: &Path, who: &str, ca: &str, extra: &[&str]) -> Child {
        shmpipe(self.ns_b())
            .args(["bridge", "connect", "--key", "test/files", "--socket"])
            .arg(sock)
            .args(["--connect", &self.endpoint])
            .args(self.tls(who, ca))
            .args(extra)
            .stdin(Stdio::null())
            .spawn()
            .expect("run bridge connect")
    }

    /// `shmpipe cat` through the bridge, in the connecting namespace.
    fn cat(&self, names: &[&str]) -> Child {
        shmpipe(self.ns_b())
            .arg("cat")
            .arg("--socket")
            .arg(&self.sock)
            .args(names)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run shmpipe cat")
    }
}

/// Waits for `child` with a watchdog: past WATCHDOG it is killed and the
/// test fails.
fn finish(child: Child) -> Output {
    let pid = child.id();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = done.clone();
    std::thread::spawn(move || {
        let start = Instant::now();
        while !flag.load(Ordering::Relaxed) {
            if start.elapsed() > WATCHDOG {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    let out = child.wait_with_output().expect("wait");
    done.store(true, Ordering::Relaxed);
    out
}

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2654435761) >> 13) as u8 ^ seed)
        .collect()
}

#[test]
fn files_cross_byte_identical_and_twenty_clients_at_once() {
    let s = Setup::new("files");
    let sizes = [0usize, 1, 4095, 65_539, 1 << 20, (1 << 20) + 7, 64 << 20];
    for (i, n) in sizes.iter().enumerate() {
        std::fs::write(s.root.join(format!("f{i}")), bytes(*n, i as u8)).unwrap();
    }
    for (i, n) in sizes.iter().enumerate() {
        let out = finish(s.cat(&[&format!("f{i}")]));
        assert!(
            out.status.success(),
            "cat f{i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.stdout.len(), *n, "f{i}");
        assert!(out.stdout == bytes(*n, i as u8), "f{i} differs");
    }
    // 20 clients at once, each its own connection through the pair.
    let want = bytes((1 << 20) + 7, 5);
    let cats: Vec<Child> = (0..20).map(|_| s.cat(&["f5"])).collect();
    for (i, c) in cats.into_iter().enumerate() {
        let out = finish(c);
        assert!(
            out.status.success(),
            "client {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.stdout == want, "client {i} got other bytes");
    }
}

/// Starts a cat of a 64 MiB file, lets 1 MiB through, kills one bridge,
/// and checks the cat ends with an error rather than hangs.
fn killed_mid_transfer(which: &str) {
    let mut s = Setup::new(which);
    std::fs::write(s.root.join("big"), bytes(64 << 20, 9)).unwrap();
    let mut cat = s.cat(&["big"]);
    let mut stdout = cat.stdout.take().unwrap();
    let mut first = vec![0u8; 1 << 20];
    stdout.read_exact(&mut first).expect("the first MiB");
    // cat now waits on its full stdout pipe, in the middle of the file.
    let victim = if which == "serve" {
        s.serve.as_mut()
    } else {
        s.connect.as_mut()
    };
    victim.unwrap().kill().unwrap();
    let drain = std::thread::spawn(move || {
        let mut rest = Vec::new();
        let _ = stdout.read_to_end(&mut rest);
        rest.len()
    });
    let out = finish(cat);
    let rest = drain.join().unwrap();
    assert!(
        !out.status.success(),
        "cat succeeded with its {which} bridge killed"
    );
    assert!((1 << 20) + rest < 64 << 20, "the whole file came through");
    eprintln!(
        "bridge {which} killed: cat failed with: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

#[test]
fn a_serving_bridge_killed_mid_transfer_ends_the_client() {
    killed_mid_transfer("serve");
}

#[test]
fn a_connecting_bridge_killed_mid_transfer_ends_the_client() {
    killed_mid_transfer("connect");
}

/// An interface the file server does not serve.
#[shmpipe::service]
pub trait NotFiles {
    /// Anything.
    fn ping(&self) -> u32;
}

#[test]
fn a_client_of_another_interface_is_refused_by_the_real_server() {
    let s = Setup::new("interface");
    let e = NotFilesClient::connect(&s.sock).expect_err("another interface");
    // Only the server knows its interface's name: the refusal is its own.
    assert!(e.to_string().contains("FileService"), "{e}");
}

#[test]
fn an_unauthenticated_peer_is_refused() {
    let mut s = Setup::new("auth");
    std::fs::write(s.root.join("secret"), b"not for strangers").unwrap();
    // A certificate from a CA the serving bridge does not trust.
    let sock = s.dir.join("stranger.sock");
    let stranger = s.start_connect(&sock, "stranger", "rogue", &[]);
    s.procs.0.push(stranger);
    wait_for(&sock, "the stranger's bridge");
    let cat = shmpipe(s.ns_b())
        .args(["cat", "--socket"])
        .arg(&sock)
        .arg("secret")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = finish(cat);
    assert!(!out.status.success(), "a stranger read a file");
    assert!(out.stdout.is_empty());
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(why.contains("no `bridge serve`"), "{why}");
    // No certificate at all: the bridge does not start.
    let plain = shmpipe(s.ns_b())
        .args(["bridge", "connect", "--key", "test/files", "--socket"])
        .arg(s.dir.join("plain.sock"))
        .args(["--connect", &s.endpoint.replace("quic/", "tcp/")])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = finish(plain);
    assert!(!out.status.success());
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(why.contains("refusing to start unauthenticated"), "{why}");
    // The trusted peer is still served.
    let out = finish(s.cat(&["secret"]));
    assert_eq!(out.stdout, b"not for strangers");
    s.procs = Procs::default();
}

/// `n` connections through the first connecting bridge, its peer's
/// bound; one more is refused "per peer".
fn hold_the_bound(s: &Setup, n: usize) -> Vec<impl Sized> {
    let held: Vec<_> = (0..n)
        .map(|_| shmpipe::fs::Client::connect(&s.sock).expect("within the bound"))
        .collect();
    let e = shmpipe::fs::Client::connect(&s.sock).expect_err("past the bound");
    assert!(e.to_string().contains("per peer"), "{e}");
    held
}

/// A second connecting bridge, with the same certificate as the first;
/// its socket.
fn second_bridge(s: &mut Setup, name: &str) -> PathBuf {
    let sock = s.dir.join(format!("{name}.sock"));
    let bridge = s.start_connect(&sock, "connect", "good", &[]);
    s.procs.0.push(bridge);
    wait_for(&sock, "the second bridge");
    sock
}

#[test]
fn one_remote_peer_at_its_bound_leaves_other_peers_and_local_clients_served() {
    let mut s = Setup::with("peers", &["--per-peer", "2"]);
    std::fs::write(s.root.join("f"), b"served").unwrap();
    // The attacker: the first connecting bridge, holding 2 connections.
    let held = hold_the_bound(&s, 2);
    // Another peer (its own bridge) is served.
    let sock = second_bridge(&mut s, "other");
    let other = shmpipe::fs::Client::connect(&sock).expect("another peer is served");
    drop(other);
    // And a local client of the server.
    let local = shmpipe::fs::Client::connect(&s.fs_sock).expect("a local client is served");
    drop(local);
    drop(held);
}

/// With `--peer`, a peer is the name its certificate bears: two bridges
/// holding the same certificate share one peer's bound, where without
/// it each session counts as its own peer (above); a name not listed is
/// refused.
#[test]
fn with_peer_names_one_certificate_is_one_peer() {
    let mut s = Setup::with("names", &["--peer", "connect", "--per-peer", "2"]);
    std::fs::write(s.root.join("f"), b"served").unwrap();
    let held = hold_the_bound(&s, 2);
    // A second bridge with the same certificate: the same peer.
    let sock = second_bridge(&mut s, "same");
    let e = shmpipe::fs::Client::connect(&sock).expect_err("the same peer, past its bound");
    assert!(e.to_string().contains("per peer"), "{e}");
    drop(held);
    // Its seats come back as the serving bridge sees the two end; then
    // the peer is served again.
    let start = Instant::now();
    let out = loop {
        let out = finish(s.cat(&["f"]));
        let busy = String::from_utf8_lossy(&out.stderr).contains("per peer");
        if !busy || start.elapsed() > WATCHDOG {
            break out;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        out.stdout,
        b"served",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A certificate of the CA whose name is not listed: refused, and told
    // why (its named request is dropped, its nameless one refused).
    let sock = s.dir.join("unlisted.sock");
    let unlisted = s.start_connect(&sock, "serve", "good", &[]);
    s.procs.0.push(unlisted);
    wait_for(&sock, "the unlisted bridge");
    let e = shmpipe::fs::Client::connect(&sock).expect_err("an unlisted name");
    assert!(e.to_string().contains("--peer"), "{e}");
    s.procs = Procs::default();
}

/// `shmpipe bench --filter bridge` measures every way, Zenoh alone
/// included, and names the goal.
#[test]
fn the_bridge_bench_prints_every_way() {
    let bench = Command::new(EXE)
        .args(["bench", "--quick", "--runs", "1", "--filter", "bridge"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run shmpipe bench");
    let out = finish(bench);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for row in [
        "local shmpipe",
        "floor: TCP relays",
        "bridge: Zenoh, mutual TLS",
        "bridge: Zenoh, TCP (--insecure)",
        "Zenoh alone: mutual TLS (QUIC)",
        "Zenoh alone: TCP",
        "goal:",
    ] {
        assert!(text.contains(row), "no {row:?} in:\n{text}");
    }
}
