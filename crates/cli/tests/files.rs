//! `shmpipe fileserver` and `shmpipe cat` as programs: bytes through,
//! byte for byte; a name it cannot serve gives a message and a failure.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The server process, killed when the test ends however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

fn start(root: &Path, sock: &Path) -> Server {
    let server = Server(
        Command::new(env!("CARGO_BIN_EXE_shmpipe"))
            .arg("fileserver")
            .arg("--root")
            .arg(root)
            .arg("--socket")
            .arg(sock)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("run shmpipe fileserver"),
    );
    // Wait (boundedly) for it to listen.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !sock.exists() {
        assert!(Instant::now() < deadline, "fileserver never listened");
        std::thread::sleep(Duration::from_millis(5));
    }
    server
}

fn cat(sock: &Path, names: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shmpipe"));
    cmd.arg("cat").arg("--socket").arg(sock).args(names);
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run shmpipe cat");
    // A watchdog: a hung cat is killed and the test fails.
    let pid = child.id();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = done.clone();
    std::thread::spawn(move || {
        let start = Instant::now();
        while !flag.load(std::sync::atomic::Ordering::Relaxed) {
            if start.elapsed() > Duration::from_secs(60) {
                let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let _ = child.stdin.take();
    let out = child.wait_with_output().expect("cat output");
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    out
}

#[test]
fn cat_through_the_fileserver() {
    let base: PathBuf =
        std::env::temp_dir().join(format!("shmpipe-cli-files-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let root = base.join("root");
    std::fs::create_dir_all(&root).unwrap();
    let sizes = [0usize, 1, 4095, 4096, 4097, 3 << 20];
    for (i, n) in sizes.iter().enumerate() {
        std::fs::write(root.join(format!("f{n}")), bytes(*n, i as u8)).unwrap();
    }
    std::fs::write(base.join("secret"), b"secret").unwrap();
    let sock = base.join("fs.sock");
    let _server = start(&root, &sock);

    let names: Vec<String> = sizes.iter().map(|n| format!("f{n}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let out = cat(&sock, &refs);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want: Vec<u8> = sizes
        .iter()
        .enumerate()
        .flat_map(|(i, n)| bytes(*n, i as u8))
        .collect();
    assert!(out.stdout == want, "cat's output differs");

    // Names it cannot serve: a message each, the rest still written.
    let out = cat(&sock, &["f1", "missing", "../secret", "f4095"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("missing") && err.contains("../secret"),
        "{err}"
    );
    let mut want = bytes(1, 1);
    want.extend(bytes(4095, 2));
    assert!(out.stdout == want);
}

/// Kills process `pid` if the test is still waiting on it after a
/// minute; call `store(true)` on the flag returned once done with it.
fn watchdog(pid: u32) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = done.clone();
    std::thread::spawn(move || {
        let start = Instant::now();
        while !flag.load(std::sync::atomic::Ordering::Relaxed) {
            if start.elapsed() > Duration::from_secs(60) {
                let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    done
}

/// Starts `shmpipe fileserver` with its output piped and returns it with
/// the line it prints once it listens.
fn start_announced(root: &Path, sock: &Path) -> (Server, String) {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_shmpipe"))
        .arg("fileserver")
        .arg("--root")
        .arg(root)
        .arg("--socket")
        .arg(sock)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run shmpipe fileserver");
    let done = watchdog(child.id());
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("piped"))
        .read_line(&mut line)
        .expect("its first line");
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    (Server(child), line)
}

/// Sends `signal` (a `kill` name: TERM, INT, KILL) to the server and
/// returns its exit code (`None` if the signal killed it).
fn stop(mut server: Server, signal: &str) -> Option<i32> {
    let pid = server.0.id();
    let ok = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(ok.success());
    let done = watchdog(pid);
    let status = server.0.wait().expect("wait for the fileserver");
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    status.code()
}

fn served_root(tag: &str) -> (PathBuf, PathBuf, PathBuf) {
    let base = std::env::temp_dir().join(format!("shmpipe-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let root = base.join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("hello.txt"), b"hello").unwrap();
    let sock = base.join("fs.sock");
    (base, root, sock)
}

#[test]
fn fileserver_says_what_it_serves_and_removes_its_socket_when_stopped() {
    let (base, root, sock) = served_root("stop");
    // SIGTERM (a service manager's stop) and SIGINT (Ctrl-C).
    for (signal, code) in [("TERM", 128 + 15), ("INT", 128 + 2)] {
        let (server, line) = start_announced(&root, &sock);
        let root_shown = std::fs::canonicalize(&root).unwrap();
        assert!(
            line.contains(&root_shown.display().to_string())
                && line.contains(&sock.display().to_string()),
            "{line}"
        );
        let out = cat(&sock, &["hello.txt"]);
        assert!(out.status.success() && out.stdout == b"hello");
        assert_eq!(stop(server, signal), Some(code), "SIG{signal}");
        assert!(!sock.exists(), "SIG{signal} left the socket file");
    }
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_killed_fileservers_socket_is_taken_over_and_a_live_ones_is_not() {
    let (base, root, sock) = served_root("takeover");
    let (server, _) = start_announced(&root, &sock);
    assert_eq!(stop(server, "KILL"), None);
    assert!(sock.exists(), "SIGKILL leaves the socket file");
    // The next start replaces it.
    let (_server, line) = start_announced(&root, &sock);
    assert!(line.starts_with("shmpipe fileserver: serving"), "{line}");
    assert!(cat(&sock, &["hello.txt"]).stdout == b"hello");
    // A second server on the live one's socket is refused, by name, and
    // says `shmpipe` once.
    let out = Command::new(env!("CARGO_BIN_EXE_shmpipe"))
        .arg("fileserver")
        .arg("--root")
        .arg(&root)
        .arg("--socket")
        .arg(&sock)
        .output()
        .expect("run shmpipe fileserver");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&sock.display().to_string()) && err.contains("another server is listening"),
        "{err}"
    );
    assert_eq!(err.matches("shmpipe: ").count(), 1, "{err}");
    // The first still serves.
    assert!(cat(&sock, &["hello.txt"]).stdout == b"hello");
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn cat_names_a_file_it_cannot_serve_once() {
    let (base, root, sock) = served_root("cat-once");
    let _server = start(&root, &sock);
    let out = cat(&sock, &["missing.txt"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end(), "shmpipe cat: missing.txt: no such file");
    // No server: the socket's path, once, and what to check.
    let gone = base.join("nobody.sock");
    let out = cat(&gone, &["hello.txt"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches(&gone.display().to_string()).count(), 1, "{err}");
    assert!(err.contains("is the server running?"), "{err}");
    let _ = std::fs::remove_dir_all(&base);
}
