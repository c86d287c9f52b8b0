//! Runs the example programs as a user would, each as a child process,
//! and checks their exit status and what they print. Each test has a
//! deadline: a program still running at it is killed (with every other
//! program the test started) and the test fails.
//!
//! The binaries are the ones cargo built beside this test
//! (`target/<profile>/examples/NAME`). `cargo test` builds every example
//! whose features are on before it runs the tests (`cargo test
//! --workspace` turns on `rpc` and `tokio` for this crate); with a target
//! selection such as `--test examples` it builds none, so build them first:
//! `cargo build -p shmpipe --all-features --examples`. A test whose
//! example is not there fails.
//!
//! `echo_server` serves until stopped: it is run here to check that it
//! echoes and that Ctrl-C and SIGTERM stop it without leaving its socket
//! file. `soak` (minutes of traffic, run by `scripts/harden.sh`) is not
//! run here.

#![cfg_attr(not(all(feature = "rpc", feature = "tokio")), allow(dead_code))]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How long one test's programs may run before they count as hung.
const LIMIT: Duration = Duration::from_secs(60);

/// The examples run here and the files under `examples/` each is built
/// from, to tell a binary older than its source.
const SOURCES: &[(&str, &[&str])] = &[
    ("rpc_server", &["rpc_server.rs", "calc/mod.rs"]),
    ("rpc_client", &["rpc_client.rs", "calc/mod.rs"]),
    ("file_server", &["file_server.rs"]),
    ("tokio_echo", &["tokio_echo.rs"]),
    ("two_processes", &["two_processes.rs"]),
    ("ping_pong", &["ping_pong.rs"]),
    ("echo_server", &["echo_server.rs"]),
];

/// Where cargo put example `name`: `../examples/NAME` from the `deps`
/// directory that holds this test. Fails if it is missing, or older than
/// its source (built before the last edit).
fn example(name: &str) -> PathBuf {
    let rebuild = "run `cargo test -p shmpipe --all-features` without a target selection, \
                   or `cargo build -p shmpipe --all-features --examples` first";
    let exe = std::env::current_exe().expect("this test's path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test binary sits in target/<profile>/deps");
    let path = dir.join("examples").join(name);
    let built = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| {
            panic!(
                "example `{name}` is not built ({}): {rebuild}",
                path.display()
            )
        });
    let (_, sources) = SOURCES
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("example `{name}` is not in SOURCES"));
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    for source in *sources {
        let edited = std::fs::metadata(examples.join(source))
            .and_then(|m| m.modified())
            .unwrap_or_else(|e| panic!("examples/{source}: {e}"));
        assert!(
            edited <= built,
            "example `{name}` was built before examples/{source} was last changed: {rebuild}"
        );
    }
    path
}

/// A socket path of this test process.
fn socket(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("shmpipe-example-{tag}-{}.sock", std::process::id()))
}

/// A running example program; killed and reaped on drop unless it has
/// exited, so a failing test leaves no program behind.
struct Program {
    name: String,
    child: Child,
    /// Its standard output, a line at a time, from a reading thread.
    lines: mpsc::Receiver<String>,
    /// The lines seen so far.
    seen: Vec<String>,
    deadline: Instant,
}

impl Program {
    /// Starts example `name` with `args`, to be done by `deadline`.
    fn start<S: AsRef<std::ffi::OsStr>>(name: &str, args: &[S], deadline: Instant) -> Program {
        let mut child = Command::new(example(name))
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start example `{name}`: {e}"));
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Program {
            name: name.to_string(),
            child,
            lines,
            seen: Vec::new(),
            deadline,
        }
    }

    /// The next line, or `None` at the end of its output.
    fn next_line(&mut self) -> Option<String> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        match self.lines.recv_timeout(left) {
            Ok(line) => {
                println!("{}| {line}", self.name);
                self.seen.push(line.clone());
                Some(line)
            }
            Err(RecvTimeoutError::Disconnected) => None,
            Err(RecvTimeoutError::Timeout) => self.hung(),
        }
    }

    /// Reads up to a line that starts with `prefix`.
    fn wait_for(&mut self, prefix: &str) {
        while let Some(line) = self.next_line() {
            if line.starts_with(prefix) {
                return;
            }
        }
        panic!(
            "{} ended its output without a line starting {prefix:?}",
            self.name
        );
    }

    /// Reads the rest of its output, waits for it to exit, checks that it
    /// succeeded, and returns every line it printed.
    fn finish(mut self) -> Vec<String> {
        while self.next_line().is_some() {}
        loop {
            if let Some(status) = self.child.try_wait().expect("waitpid") {
                assert!(status.success(), "{} failed: {status}", self.name);
                return std::mem::take(&mut self.seen);
            }
            if Instant::now() >= self.deadline {
                self.hung();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn hung(&self) -> ! {
        // Dropping the programs on the way out kills them.
        panic!("{} still running after {LIMIT:?}: killed", self.name);
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The lines of `out` that start with `prefix`.
fn count(out: &[String], prefix: &str) -> usize {
    out.iter().filter(|l| l.starts_with(prefix)).count()
}

/// Asserts that `out` has a line equal to `line`.
fn has(out: &[String], line: &str) {
    assert!(
        out.iter().any(|l| l == line),
        "no line {line:?} in {out:#?}"
    );
}

#[cfg(feature = "rpc")]
#[test]
fn rpc_server_serves_two_clients_then_exits() {
    let deadline = Instant::now() + LIMIT;
    let path = socket("rpc");
    let mut server = Program::start("rpc_server", &[path.as_os_str(), "2".as_ref()], deadline);
    // Bound once it says so: the clients can connect.
    server.wait_for("rpc_server: serving Calc on");
    let clients = [0, 1].map(|_| Program::start("rpc_client", &[&path], deadline));
    for client in clients {
        let out = client.finish();
        has(&out, "rpc_client: add(2, 3) = 5");
        has(
            &out,
            "rpc_client: upper(\"hello, shmpipe\") = \"HELLO, SHMPIPE\"",
        );
        has(
            &out,
            "rpc_client: count_up(10) filled 8 bytes: [10, 11, 12, 13, 14, 15, 16, 17]",
        );
        has(&out, "rpc_client: 10000 more calls of add, total 49995000");
    }
    let out = server.finish();
    assert_eq!(count(&out, "rpc_server: client (pid "), 4, "{out:#?}");
    let left = out
        .iter()
        .filter(|l| l.ends_with(") left after 10003 calls"));
    assert_eq!(left.count(), 2, "{out:#?}");
    assert!(!path.exists(), "rpc_server left {}", path.display());
}

#[cfg(feature = "rpc")]
#[test]
fn file_server_reads_files_back_and_refuses_a_way_out() {
    let program = Program::start::<&str>("file_server", &[], Instant::now() + LIMIT);
    let pid = program.child.id();
    let out = program.finish();
    has(&out, "file_server: the client lists 2 names");
    has(
        &out,
        "file_server: read hello.txt: 28 bytes, the same as on disk",
    );
    has(
        &out,
        "file_server: read numbers.bin: 200000 bytes, the same as on disk",
    );
    assert_eq!(
        count(&out, "file_server: ../etc/passwd refused: "),
        1,
        "{out:#?}"
    );
    let tmp = std::env::temp_dir();
    let socket = tmp.join(format!("shmpipe-file-server-{pid}.sock"));
    let root = tmp.join(format!("shmpipe-file-server-{pid}"));
    assert!(!socket.exists(), "file_server left {}", socket.display());
    assert!(!root.exists(), "file_server left {}", root.display());
}

#[cfg(feature = "rpc")]
#[test]
fn file_server_serves_a_directory_given() {
    let root = std::env::temp_dir().join(format!("shmpipe-example-root-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::write(root.join("a.txt"), b"abc").unwrap();
    std::fs::write(root.join("sub/b.txt"), b"not listed at the top").unwrap();
    let out = Program::start("file_server", &[&root], Instant::now() + LIMIT).finish();
    std::fs::remove_dir_all(&root).unwrap();
    has(&out, "file_server: the client lists 2 names");
    has(
        &out,
        "file_server: read a.txt: 3 bytes, the same as on disk",
    );
    assert_eq!(count(&out, "file_server: read "), 1, "{out:#?}");
}

#[cfg(feature = "tokio")]
#[test]
fn tokio_echo_echoes_every_client() {
    let out = Program::start("tokio_echo", &["3"], Instant::now() + LIMIT).finish();
    for id in 0..3 {
        has(
            &out,
            &format!("tokio_echo: client {id} got its 1000 lines back"),
        );
    }
    assert_eq!(count(&out, "tokio_echo: echoed "), 3, "{out:#?}");
    assert_eq!(
        count(&out, "tokio_echo: every client done, "),
        1,
        "{out:#?}"
    );
}

#[test]
fn two_processes_streams_to_a_child() {
    let out = Program::start("two_processes", &["10000"], Instant::now() + LIMIT).finish();
    let line = out.iter().find(|l| l.starts_with("10000 items, "));
    let line = line.unwrap_or_else(|| panic!("no summary in {out:#?}"));
    assert!(line.ends_with("child exit status: 0"), "{line}");
}

#[test]
fn ping_pong_round_trips_with_a_child() {
    let out = Program::start("ping_pong", &["1000"], Instant::now() + LIMIT).finish();
    assert_eq!(count(&out, "1000 round trips: median "), 1, "{out:#?}");
}

#[test]
fn echo_server_echoes_and_removes_its_socket_when_stopped() {
    // SIGTERM (a service manager's stop) and SIGINT (Ctrl-C).
    for (signal, name) in [
        (rustix::process::Signal::TERM, "TERM"),
        (rustix::process::Signal::INT, "INT"),
    ] {
        let path = socket(&format!("echo-{name}"));
        let _ = std::fs::remove_file(&path);
        let deadline = Instant::now() + LIMIT;
        let mut server = Program::start("echo_server", &[&path], deadline);
        server.wait_for("echo_server: listening at ");
        let (mut rx, mut tx) = shmpipe::connect(&path).unwrap().into_messages();
        tx.send(b"ping").unwrap();
        let mut got = Vec::new();
        rx.recv_vec(&mut got).unwrap();
        assert_eq!(got, b"ping");
        let pid = rustix::process::Pid::from_raw(server.child.id() as i32).expect("a pid");
        rustix::process::kill_process(pid, signal).unwrap();
        let status = loop {
            if let Some(status) = server.child.try_wait().expect("waitpid") {
                break status;
            }
            if Instant::now() >= deadline {
                server.hung();
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(
            status.code(),
            Some(128 + signal.as_raw()),
            "SIG{name}: {status}"
        );
        assert!(!path.exists(), "SIG{name} left the socket file");
    }
}
