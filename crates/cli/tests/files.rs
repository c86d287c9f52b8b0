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
