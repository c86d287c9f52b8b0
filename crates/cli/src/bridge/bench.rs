//! `shmpipe bench --filter bridge` (feature `zenoh`): the null RPC round
//! trip and the reread of a 1 MiB file through a bridge pair on loopback,
//! beside the same through a floor of plain TCP relays (client, relay,
//! relay, server: four processes, the same frames) and through local
//! shmpipe; and Zenoh alone (`shmpipe_bridge::probe`), so that what the
//! link costs is told apart from what the bridge adds.
//! `SHMPIPE_BENCH_BRIDGE_CONFIG=FILE` gives the bridges a Zenoh
//! configuration file (`--config`), to compare transport settings.

use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use shmpipe_bridge::testing::{certificates, Procs};

/// The service of the null round trip.
#[shmpipe::service]
pub trait Null {
    /// Nothing, and back.
    fn null(&self);
}

struct Nothing;
impl Null for Nothing {
    fn null(&self) {}
}

/// Records of the reread, as `reread-4KiB-1MiB`.
const RECORD: usize = 4096;
const FILE: usize = 1 << 20;

/// `shmpipe bridge bench-server`: the null service and a file server.
pub fn server(null: &Path, files: &Path, root: &Path) -> io::Result<bool> {
    let listener = shmpipe::Listener::bind(null)?;
    std::thread::spawn(move || shmpipe::rpc::serve_waitset(listener, |_| NullServer(Nothing)));
    let server = shmpipe::fs::Server::new(root)?;
    let listener = shmpipe::fs::Server::bind(files)?;
    server.serve(listener)?;
    Ok(true)
}

fn me() -> io::Result<Command> {
    let mut c = Command::new(std::env::current_exe()?);
    c.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    Ok(c)
}

fn free_port() -> io::Result<u16> {
    Ok(std::net::UdpSocket::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn wait_for(path: &Path) -> io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        if Instant::now() > deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("nothing listened at {}", path.display()),
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// Ways from the client to the server.
#[derive(Clone, Copy, PartialEq)]
enum Way {
    Local,
    Floor,
    BridgeTls,
    BridgeTcp,
    ZenohTls,
    ZenohTcp,
}

impl Way {
    fn name(self) -> &'static str {
        match self {
            Way::Local => "local shmpipe",
            Way::Floor => "floor: TCP relays",
            Way::BridgeTls => "bridge: Zenoh, mutual TLS",
            Way::BridgeTcp => "bridge: Zenoh, TCP (--insecure)",
            Way::ZenohTls => "Zenoh alone: mutual TLS (QUIC)",
            Way::ZenohTcp => "Zenoh alone: TCP",
        }
    }
}

/// Starts the relays or bridges of `way` to `service`; the socket a
/// client connects to.
fn start(
    way: Way,
    service: &Path,
    dir: &Path,
    tag: &str,
    procs: &mut Procs,
) -> io::Result<PathBuf> {
    let sock = dir.join(format!("{tag}.sock"));
    let port = free_port()?;
    match way {
        Way::Local => return Ok(service.to_path_buf()),
        Way::Floor => {
            let at = format!("127.0.0.1:{port}");
            procs.0.push(
                me()?
                    .args(["bridge", "relay-serve", "--at", &at, "--socket"])
                    .arg(service)
                    .spawn()?,
            );
            procs.0.push(
                me()?
                    .args(["bridge", "relay-connect", "--to", &at, "--socket"])
                    .arg(&sock)
                    .spawn()?,
            );
        }
        Way::ZenohTls | Way::ZenohTcp => unreachable!("measured by zenoh_alone"),
        Way::BridgeTls | Way::BridgeTcp => {
            let session = session(way == Way::BridgeTls, dir, port);
            let (endpoint, auth) = (session.endpoints[0].clone(), args(&session));
            let key = format!("bench/{tag}");
            procs.0.push(
                me()?
                    .args([
                        "bridge", "serve", "--key", &key, "--listen", &endpoint, "--socket",
                    ])
                    .arg(service)
                    .args(&auth)
                    .spawn()?,
            );
            procs.0.push(
                me()?
                    .args([
                        "bridge",
                        "connect",
                        "--key",
                        &key,
                        "--connect",
                        &endpoint,
                        "--socket",
                    ])
                    .arg(&sock)
                    .args(&auth)
                    .spawn()?,
            );
        }
    }
    wait_for(&sock)?;
    Ok(sock)
}

/// A session on `port`: QUIC with the bench's certificates, or plain TCP
/// (`insecure`); `SHMPIPE_BENCH_BRIDGE_CONFIG` adds a `--config`.
fn session(tls: bool, dir: &Path, port: u16) -> shmpipe_bridge::Options {
    let (scheme, certs) = if tls {
        let certs = shmpipe_bridge::Tls {
            ca: dir.join("bench-ca.pem"),
            cert: dir.join("bridge.pem"),
            key: dir.join("bridge.key"),
        };
        ("quic", Some(certs))
    } else {
        ("tcp", None)
    };
    shmpipe_bridge::Options {
        config: std::env::var_os("SHMPIPE_BENCH_BRIDGE_CONFIG").map(PathBuf::from),
        endpoints: vec![format!("{scheme}/127.0.0.1:{port}")],
        insecure: !tls,
        tls: certs,
        ..Default::default()
    }
}

/// The `shmpipe bridge` options that make `session`'s session.
fn args(session: &shmpipe_bridge::Options) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(t) = &session.tls {
        for (flag, file) in [
            ("--tls-ca", &t.ca),
            ("--tls-cert", &t.cert),
            ("--tls-key", &t.key),
        ] {
            args.push(flag.to_owned());
            args.push(file.display().to_string());
        }
    }
    if session.insecure {
        args.push("--insecure".into());
    }
    if let Some(file) = &session.config {
        args.push("--config".into());
        args.push(file.display().to_string());
    }
    args
}

/// Zenoh with no bridge, two processes on the bridges' settings: the
/// round trip of a small put (ns) and pieces one way (MB/s).
fn zenoh_alone(tls: bool, dir: &Path, runs: usize, budget: Duration) -> io::Result<(f64, f64)> {
    let options = session(tls, dir, free_port()?);
    let mut procs = Procs::default();
    procs.0.push(
        me()?
            .args(["bridge", "probe-answer", "--key", "bench/probe", "--listen"])
            .arg(&options.endpoints[0])
            .args(args(&options))
            .spawn()?,
    );
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(shmpipe_bridge::probe::measure(
            "bench/probe",
            &options,
            runs,
            budget,
        ))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// ns per null call: the median of `runs` runs of about `budget` each.
fn null_rtt(sock: &Path, runs: usize, budget: Duration) -> io::Result<f64> {
    let client = NullClient::connect(sock)?;
    let start = Instant::now();
    let mut warm = 0u64;
    while start.elapsed() < budget / 4 || warm < 100 {
        client.null()?;
        warm += 1;
    }
    let per = start.elapsed().as_secs_f64() / warm as f64;
    let n = ((budget.as_secs_f64() / per) as u64).max(100);
    let mut v = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        for _ in 0..n {
            client.null()?;
        }
        v.push(t.elapsed().as_nanos() as f64 / n as f64);
    }
    Ok(median(v))
}

/// MB/s rereading the 1 MiB file in 4 KiB records, median of `runs`.
fn reread(sock: &Path, runs: usize, budget: Duration) -> io::Result<f64> {
    let client = shmpipe::fs::Client::connect(sock)?;
    let mut file = client.open("data")?;
    let mut buf = vec![0u8; RECORD];
    let mut pass = |file: &mut shmpipe::fs::File<'_, _>| -> io::Result<()> {
        file.seek(SeekFrom::Start(0))?;
        for i in 0..FILE / RECORD {
            file.read_exact(&mut buf)?;
            if buf[0] != (i as u8) {
                return Err(io::Error::other("reread: wrong bytes"));
            }
        }
        Ok(())
    };
    let start = Instant::now();
    let mut warm = 0u64;
    while start.elapsed() < budget / 4 || warm < 2 {
        pass(&mut file)?;
        warm += 1;
    }
    let per = start.elapsed().as_secs_f64() / warm as f64;
    let n = ((budget.as_secs_f64() / per) as u64).max(2);
    let mut v = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        for _ in 0..n {
            pass(&mut file)?;
        }
        v.push((n as usize * FILE) as f64 / t.elapsed().as_secs_f64() / 1e6);
    }
    Ok(median(v))
}

/// Runs the comparison and prints it.
pub fn bench(quick: bool, runs: Option<usize>) -> io::Result<bool> {
    let runs = runs.unwrap_or(if quick { 3 } else { 7 });
    let budget = Duration::from_millis(if quick { 300 } else { 1000 });
    let dir = std::env::temp_dir().join(format!("shmpipe-bridge-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("root"))?;
    let data: Vec<u8> = (0..FILE).map(|i| (i / RECORD) as u8).collect();
    std::fs::write(dir.join("root/data"), data)?;
    let tls = certificates(&dir, "bench", &[], &["bridge"]);
    if let Err(e) = &tls {
        eprintln!("shmpipe bench: no certificates ({e}): the TLS bridge is left out");
    }
    let (null, files) = (dir.join("null.sock"), dir.join("fs.sock"));
    let mut procs = Procs::default();
    procs.0.push(
        me()?
            .args(["bridge", "bench-server", "--null"])
            .arg(&null)
            .arg("--files")
            .arg(&files)
            .arg("--root")
            .arg(dir.join("root"))
            .spawn()?,
    );
    wait_for(&null)?;
    wait_for(&files)?;
    let mut rows = Vec::new();
    for way in [Way::Local, Way::Floor, Way::BridgeTls, Way::BridgeTcp] {
        if way == Way::BridgeTls && tls.is_err() {
            continue;
        }
        let mut mine = Procs::default();
        let tag = rows.len().to_string();
        let to_null = start(way, &null, &dir, &format!("n{tag}"), &mut mine)?;
        let to_files = start(way, &files, &dir, &format!("f{tag}"), &mut mine)?;
        let rtt = null_rtt(&to_null, runs, budget)?;
        let mbs = reread(&to_files, runs, budget)?;
        rows.push((way, rtt, mbs));
    }
    drop(procs);
    for way in [Way::ZenohTls, Way::ZenohTcp] {
        if way == Way::ZenohTls && tls.is_err() {
            continue;
        }
        let (rtt, mbs) = zenoh_alone(way == Way::ZenohTls, &dir, runs, budget)?;
        rows.push((way, rtt, mbs));
    }
    let _ = std::fs::remove_dir_all(&dir);
    let floor = rows.iter().find(|r| r.0 == Way::Floor).map(|r| (r.1, r.2));
    println!("bridge, loopback: null RPC round trip and reread of a 1 MiB file in 4 KiB records");
    println!(
        "(medians of {runs} runs; ratios against the floor of plain TCP relays, four processes)"
    );
    println!(
        "{:<34} {:>12} {:>8} {:>12} {:>8}",
        "way", "null RPC", "x floor", "reread", "of floor"
    );
    for (way, rtt, mbs) in &rows {
        let (x, of) = match floor {
            Some((f_rtt, f_mbs)) => (
                format!("{:.2}x", rtt / f_rtt),
                format!("{:.0}%", 100.0 * mbs / f_mbs),
            ),
            None => (String::new(), String::new()),
        };
        println!(
            "{:<34} {:>9.1} us {:>8} {:>7.0} MB/s {:>8}",
            way.name(),
            rtt / 1e3,
            x,
            mbs,
            of
        );
    }
    println!(
        "Zenoh alone: no bridge, two processes on the bridges' settings; a 16-byte put \
         answered by a put, and {} KiB puts one way",
        shmpipe_bridge::probe::PIECE >> 10
    );
    println!("goal: the TLS bridge at most 1.5x the floor's null RPC, at least 80% of its reread");
    Ok(true)
}
