//! What an idle client costs a waitset server: a measurement, not a
//! test of a bound (`serve_limits.rs` has those). Run by hand:
//!
//! ```text
//! cargo test --release -p shmpipe --features rpc --test idle_cost -- --ignored --nocapture
//! ```
//!
//! It serves 1,000 idle clients (20 processes of 50, each connected and
//! greeted) from `rpc::serve_waitset` (a one-method service) and from the
//! file server in a child process, and prints the server's private
//! (`RssAnon`) and shared (`RssShmem`) resident memory per client. With
//! `SHMPIPE_IDLE_SOCKET=PATH SHMPIPE_IDLE_PID=PID` it measures a file
//! server already running there instead (`shmpipe fileserver`).
#![cfg(feature = "rpc")]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use common::{fork, watchdog, Child};

const PROCS: usize = 20;
const PER: usize = 50;

#[shmpipe::service]
/// A one-method service.
pub trait Probe {
    /// The serving process's id.
    fn pid(&self) -> u32;
}

struct P;

impl Probe for P {
    fn pid(&self) -> u32 {
        std::process::id()
    }
}

/// (RssAnon, RssShmem) of `pid`, in bytes.
fn rss(pid: i32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (field("RssAnon:"), field("RssShmem:"))
}

/// Connects `PROCS * PER` idle clients with `connect` and prints what the
/// server at `pid` holds per client.
fn measure(what: &str, pid: i32, path: &Path, connect: fn(&Path) -> Box<dyn std::any::Any>) {
    // One client first, so that the server's first-client allocations
    // are not counted.
    drop(connect(path));
    std::thread::sleep(Duration::from_millis(200));
    let before = rss(pid);
    let mut children = Vec::new();
    let mut ctls = Vec::new();
    for _ in 0..PROCS {
        let (ctl, mut theirs) = UnixStream::pair().unwrap();
        let path = path.to_path_buf();
        children.push(fork(move || {
            let held: Vec<_> = (0..PER).map(|_| connect(&path)).collect();
            theirs
                .write_all(format!("{}\n", held.len()).as_bytes())
                .unwrap();
            let mut b = [0u8; 1];
            let _ = theirs.read(&mut b);
            0
        }));
        ctls.push(ctl);
    }
    let mut n = 0usize;
    for ctl in &ctls {
        let mut line = String::new();
        BufReader::new(ctl).read_line(&mut line).unwrap();
        n += line.trim().parse::<usize>().unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    let after = rss(pid);
    let per = |a: u64, b: u64| a.saturating_sub(b) as f64 / n as f64 / 1024.0;
    println!(
        "{what}: {n} idle clients: RssAnon {} -> {} KiB ({:.1} KiB a client), RssShmem {} -> {} KiB ({:.1} KiB a client)",
        before.0 / 1024,
        after.0 / 1024,
        per(after.0, before.0),
        before.1 / 1024,
        after.1 / 1024,
        per(after.1, before.1),
    );
    for mut ctl in ctls {
        let _ = ctl.write_all(b"x");
    }
    for c in children {
        c.join();
    }
}

fn probe_client(path: &Path) -> Box<dyn std::any::Any> {
    Box::new(ProbeClient::<shmpipe::rpc::ShmTransport>::connect(path).unwrap())
}

fn fs_client(path: &Path) -> Box<dyn std::any::Any> {
    Box::new(shmpipe::fs::Client::connect(path).unwrap())
}

fn server(
    path: &Path,
    serve: impl FnOnce(shmpipe::Listener) + 'static,
    bind: fn(&Path) -> shmpipe::Listener,
) -> Child {
    let _ = std::fs::remove_file(path);
    let path = path.to_path_buf();
    let child = {
        let path = path.clone();
        fork(move || {
            shmpipe::raise_fd_limit().unwrap();
            serve(bind(&path));
            1
        })
    };
    while !path.exists() {
        std::thread::sleep(Duration::from_millis(5));
    }
    child
}

#[test]
#[ignore = "a measurement: run by hand"]
fn idle_client_cost() {
    let _w = watchdog(Duration::from_secs(300));
    shmpipe::raise_fd_limit().unwrap();
    if let (Ok(path), Ok(pid)) = (
        std::env::var("SHMPIPE_IDLE_SOCKET"),
        std::env::var("SHMPIPE_IDLE_PID"),
    ) {
        measure(
            "file server (given)",
            pid.parse().unwrap(),
            Path::new(&path),
            fs_client,
        );
        return;
    }
    let path = common::sock_path("idle-waitset");
    let s = server(
        &path,
        |l| {
            let _ = shmpipe::rpc::serve_waitset(l, |_| ProbeServer(P));
        },
        |p| shmpipe::Listener::bind(p).unwrap(),
    );
    measure("serve_waitset", s.pid(), &path, probe_client);
    drop(s);

    let root = std::env::temp_dir().join(format!("shmpipe-idle-root-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let path = common::sock_path("idle-fs");
    let r = root.clone();
    let s = server(
        &path,
        move |l| {
            let _ = shmpipe::fs::Server::new(&r).unwrap().serve(l);
        },
        |p| shmpipe::fs::Server::bind(p).unwrap(),
    );
    measure("file server", s.pid(), &path, fs_client);
    drop(s);
    let _ = std::fs::remove_dir_all(&root);
}
