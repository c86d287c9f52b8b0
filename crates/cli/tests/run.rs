//! `shmpipe run`: programs give byte-identical output, and the same exit
//! status, with and without it. Each program runs in its own process group
//! under a watchdog that kills the group after 60 s, so a hang fails the
//! test instead of the suite.

use std::io::Write;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WATCHDOG: Duration = Duration::from_secs(60);

#[derive(Debug)]
struct Ran {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: String,
}

/// Runs `argv`, under `shmpipe run` if `preload`, with `stdin` as input.
fn watched(argv: &[&str], preload: bool, env: &[(&str, &str)]) -> Ran {
    let mut cmd = if preload {
        let mut c = Command::new(env!("CARGO_BIN_EXE_shmpipe"));
        c.arg("run").arg("--").args(argv);
        c
    } else {
        let mut c = Command::new(argv[0]);
        c.args(&argv[1..]);
        c
    };
    cmd.envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let child = cmd.spawn().expect("spawn");
    let group = child.id();
    let done = Arc::new(AtomicBool::new(false));
    let fired = Arc::new(AtomicBool::new(false));
    let dog = {
        let (done, fired) = (done.clone(), fired.clone());
        std::thread::spawn(move || {
            let start = Instant::now();
            while !done.load(Ordering::Relaxed) {
                if start.elapsed() > WATCHDOG {
                    fired.store(true, Ordering::Relaxed);
                    let _ = Command::new("kill")
                        .args(["-KILL", "--", &format!("-{group}")])
                        .status();
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let out = child.wait_with_output().expect("wait");
    done.store(true, Ordering::Relaxed);
    dog.join().unwrap();
    assert!(
        !fired.load(Ordering::Relaxed),
        "{argv:?} (preload {preload}) hung: killed after {WATCHDOG:?}"
    );
    Ran {
        status: out.status,
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

thread_local! {
    /// The environment `same` gives the runs under `shmpipe run` (and only
    /// those): empty, or the hand-over switch while
    /// `stage_one_tests_with_handover_on` runs other tests.
    static RUN_ENV: std::cell::RefCell<Vec<(&'static str, String)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `argv` natively and under `shmpipe run`; both must exit alike and
/// write the same bytes. Returns the run under `shmpipe run`.
fn same(argv: &[&str]) -> Ran {
    let native = watched(argv, false, &[]);
    let env = RUN_ENV.with(|e| e.borrow().clone());
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let under = watched(argv, true, &env);
    assert_eq!(
        native.status, under.status,
        "{argv:?}: exit status differs; stderr natively: {}; under shmpipe run: {}",
        native.stderr, under.stderr
    );
    assert!(
        native.stdout == under.stdout,
        "{argv:?}: output differs ({} bytes natively, {} under shmpipe run); stderr: {}",
        native.stdout.len(),
        under.stdout.len(),
        under.stderr
    );
    assert!(
        !native.stdout.is_empty(),
        "{argv:?} wrote nothing: {}",
        native.stderr
    );
    under
}

fn bash(script: &str) -> Ran {
    same(&["bash", "-c", script])
}

fn python(code: &str) -> Ran {
    same(&["python3", "-c", code])
}

#[test]
fn sort_uniq_pipeline() {
    bash("seq 1 100000 | sort -n | uniq -c | sort -rn | head");
}

#[test]
fn gzip_round_trip() {
    let dir = tempdir("gzip");
    let big = dir.join("big");
    let mut f = std::fs::File::create(&big).unwrap();
    // 8 MiB that compress somewhat: counters, not zeros.
    for i in 0..(1u32 << 20) {
        f.write_all(&u64::from(i).wrapping_mul(0x9e37_79b9).to_le_bytes())
            .unwrap();
    }
    drop(f);
    bash(&format!(
        "cat {} | gzip -1 | gunzip | sha256sum",
        big.display()
    ));
}

#[test]
fn tar_to_tar() {
    let dir = tempdir("tar");
    let script = format!(
        "set -e; d={d}; rm -rf $d/out; mkdir -p $d/src/a $d/out; seq 1 50000 > $d/src/a/n; \
         head -c 300000 /dev/zero > $d/src/z; tar c -C $d/src . | tar x -C $d/out; \
         cd $d/out && find . -type f | sort | xargs sha256sum",
        d = dir.display()
    );
    bash(&script);
}

#[test]
fn process_substitution() {
    bash("cat <(seq 1 3000) <(seq 5 -1 1); diff <(seq 1 2000) <(seq 1 2000 | cat); echo diff=$?");
}

/// `yes` learns at once that `head` is gone (SIGPIPE): the watchdog fails
/// the test if it does not stop.
#[test]
fn yes_head_stops() {
    let r = bash("yes | head -1; echo ${PIPESTATUS[@]}");
    assert_eq!(r.stdout, b"y\n141 0\n");
}

#[test]
fn python_communicate_with_several_children() {
    python(
        "import subprocess\n\
         ps = [subprocess.Popen(['sort', '-n'], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(4)]\n\
         for i, p in enumerate(ps):\n    out, err = p.communicate(''.join(f'{n}\\n' for n in range(10000 * (i + 1), 0, -1)).encode())\n    print(i, p.returncode, len(out), out[:20], err)\n\
         print(subprocess.run(['sh', '-c', 'echo out; echo err >&2; exit 3'], capture_output=True))",
    );
}

/// Closing fd 1 and reopening it: first as the read end of a new pipe (the
/// lowest free number), then as a file. The table must follow.
#[test]
fn close_and_reopen_stdout() {
    let dir = tempdir("reopen");
    let file = dir.join("out");
    let r = python(&format!(
        "import os, sys\n\
         saved = os.dup(1)\n\
         os.close(1)\n\
         r, w = os.pipe()\n\
         assert r == 1, r\n\
         os.write(w, b'through fd 1\\n'); os.close(w)\n\
         got = os.read(1, 100); os.close(1)\n\
         fd = os.open({file:?}, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)\n\
         assert fd == 1, fd\n\
         os.write(1, got + b'and to a file\\n')\n\
         os.close(1)\n\
         os.dup2(saved, 1)\n\
         print(open({file:?}).read(), end='')"
    ));
    assert_eq!(r.stdout, b"through fd 1\nand to a file\n");
}

#[test]
fn dup2_pipe_onto_stdin_of_exec() {
    python(
        "import os\n\
         r, w = os.pipe()\n\
         pid = os.fork()\n\
         if pid == 0:\n    os.dup2(r, 0); os.close(r); os.close(w)\n    os.execvp('sort', ['sort', '-rn'])\n\
         os.close(r)\n\
         os.write(w, b''.join(b'%d\\n' % i for i in range(5000)))\n\
         os.close(w)\n\
         print(os.waitpid(pid, 0)[1])",
    );
}

#[test]
fn exit_status_and_signal_death() {
    let r = same(&["sh", "-c", "echo before; exit 7"]);
    assert_eq!(r.status.code(), Some(7));
    let r = same(&["sh", "-c", "echo before; kill -TERM $$"]);
    assert_eq!(r.status.signal(), Some(15));
    let r = watched(&["no-such-program-here"], true, &[]);
    assert_eq!(r.status.code(), Some(127), "{}", r.stderr);
}

/// A reader killed with SIGKILL mid-transfer: its writer dies of SIGPIPE;
/// a writer killed mid-transfer: its reader sees what was written, then
/// end of file.
#[test]
fn reader_and_writer_killed_mid_transfer() {
    let r = bash(
        "yes | sh -c 'head -c 100000 >/dev/null; kill -KILL $$'; echo ${PIPESTATUS[@]}; \
         sh -c 'seq 1 100000; kill -KILL $$' | wc -l; echo ${PIPESTATUS[@]}",
    );
    assert_eq!(r.stdout, b"141 137\n100000\n137 0\n");
}

/// `posix_spawn` with file actions (a `dup2` of a pipe onto stdin), which
/// glibc carries out in the child with its own internal calls.
#[test]
fn posix_spawn_with_file_actions() {
    python(
        "import os\n\
         r, w = os.pipe()\n\
         pid = os.posix_spawnp('sort', ['sort', '-n'], os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, r, 0), (os.POSIX_SPAWN_CLOSE, w)])\n\
         os.close(r)\n\
         os.write(w, b''.join(b'%d\\n' % i for i in range(3000, 0, -1)))\n\
         os.close(w)\n\
         print(os.waitpid(pid, 0)[1])",
    );
}

/// 10^5 pipes made and closed leave no descriptor and no mapping behind.
#[test]
fn many_pipes_leave_nothing() {
    let r = python(
        "import os\n\
         def count():\n    return len([f for f in os.listdir('/proc/self/fd') if int(f) < 1000]), len(open('/proc/self/maps').read().splitlines())\n\
         before = count()\n\
         for _ in range(100000):\n    r, w = os.pipe(); os.write(w, b'x'); os.read(r, 1); os.close(r); os.close(w)\n\
         print(before == count(), before[0])",
    );
    assert!(r.stdout.starts_with(b"True"), "{:?}", r.stdout);
}

/// A token passed around a ring of 64 processes, 20 laps.
#[test]
fn token_ring_of_64() {
    python(
        "import os\n\
         N, LAPS = 64, 20\n\
         pipes = [os.pipe() for _ in range(N)]\n\
         kids = []\n\
         for i in range(1, N):\n    pid = os.fork()\n    if pid == 0:\n        r, w = pipes[i][0], pipes[(i + 1) % N][1]\n        for j, (pr, pw) in enumerate(pipes):\n            if pr != r: os.close(pr)\n            if pw != w: os.close(pw)\n        while True:\n            t = os.read(r, 8)\n            if not t: os._exit(0)\n            os.write(w, (int.from_bytes(t, 'little') + 1).to_bytes(8, 'little'))\n    kids.append(pid)\n\
         r, w = pipes[0][0], pipes[1][1]\n\
         for i in range(2, N): os.close(pipes[i][0]); os.close(pipes[i][1])\n\
         os.close(pipes[0][1]); os.close(pipes[1][0])\n\
         t = 0\n\
         for _ in range(LAPS):\n    os.write(w, (t + 1).to_bytes(8, 'little'))\n    t = int.from_bytes(os.read(r, 8), 'little')\n\
         os.close(w)\n\
         print(t, all(os.waitpid(k, 0)[1] == 0 for k in kids))",
    );
}

/// select, poll and epoll over a pipe, a socket pair, a regular file and
/// an eventfd-less mix: what is ready, level- and edge-triggered.
#[test]
fn select_poll_epoll_on_mixed_descriptors() {
    python(
        "import os, select, socket\n\
         r, w = os.pipe()\n\
         a, b = socket.socketpair()\n\
         f = open('/dev/null', 'rb')\n\
         fds = [r, a.fileno(), f.fileno()]\n\
         def sel(): return [fds.index(x) for x in select.select(fds, [], [], 0)[0]]\n\
         print('select', sel())\n\
         os.write(w, b'x'); b.send(b'y')\n\
         print('select', sel())\n\
         p = select.poll()\n\
         for x in fds: p.register(x, select.POLLIN)\n\
         print('poll', sorted((fds.index(x), e) for x, e in p.poll(0)))\n\
         ep = select.epoll()\n\
         ep.register(r, select.EPOLLIN | select.EPOLLET); ep.register(a.fileno(), select.EPOLLIN)\n\
         print('epoll', sorted((fds.index(x), e) for x, e in ep.poll(0)))\n\
         print('epoll again', sorted((fds.index(x), e) for x, e in ep.poll(0)))\n\
         os.read(r, 1); a.recv(1); os.close(w); b.close()\n\
         print('hang-up', sorted((fds.index(x), e) for x, e in p.poll(0)))\n\
         print('epoll after', sorted((fds.index(x), e) for x, e in ep.poll(0)))",
    );
}

/// Under `shmpipe run` with `SHMPIPE_RUN_STATS`, the library counts the
/// bytes written to pipes and socket pairs: a pipe's through its ring (with
/// two CPUs, by default; written by the parent and its child), a socket
/// pair's written with no reader waiting through the kernel; with
/// `SHMPIPE_RUN_RINGS=0`, every byte through the kernel.
#[test]
fn byte_counts_go_to_the_stats_file() {
    let dir = tempdir("stats");
    let stats = dir.join("stats");
    let code = "import os, socket\n\
         r, w = os.pipe(); os.write(w, b'x' * 1000); os.read(r, 1000)\n\
         a, b = socket.socketpair(); a.send(b'y' * 24)\n\
         open('/dev/null', 'wb').write(b'z' * 4096)\n\
         if os.fork() == 0:\n    os.write(w, b'q' * 100); os._exit(0)\n\
         os.wait()";
    let counted = |switch: Option<&str>| {
        std::fs::write(&stats, vec![0u8; 64 * 1024]).unwrap();
        let mut env = vec![("SHMPIPE_RUN_STATS", stats.to_str().unwrap())];
        env.extend(switch.map(|v| ("SHMPIPE_RUN_RINGS", v)));
        let r = watched(&["python3", "-c", code], true, &env);
        assert!(r.status.success(), "{}", r.stderr);
        let slots = u64::from_le_bytes(std::fs::read(&stats).unwrap()[..8].try_into().unwrap());
        assert!(slots >= 2, "the parent and its child take a slot each");
        ring_and_kernel_bytes(&stats)
    };
    let by_default = if usable_cpus() >= 2 {
        (1100, 24)
    } else {
        (0, 1124)
    };
    assert_eq!(counted(None), by_default);
    assert_eq!(counted(Some("0")), (0, 1124));
}

/// The static busybox in the middle of a pipeline: a process the library
/// cannot enter.
#[test]
fn static_binary_in_a_pipeline() {
    let Some(busybox) = static_busybox() else {
        eprintln!(
            "SKIPPED static_binary_in_a_pipeline: no busybox-static and it could not be installed"
        );
        return;
    };
    bash(&format!(
        "seq 1 20000 | {busybox} sort -rn | {busybox} head -c 100000 | sha256sum"
    ));
}

/// `make -j4` whose recipes print, and share make's jobserver pipe.
#[test]
fn make_j4_recipes_print() {
    if Command::new("make").arg("--version").output().is_err() {
        eprintln!("SKIPPED make_j4_recipes_print: make is not installed");
        return;
    }
    let dir = tempdir("make");
    let mut mk = String::from("all:");
    for i in 0..16 {
        mk += &format!(" t{i}");
    }
    mk += "\n\t@echo done\n";
    for i in 0..16 {
        mk += &format!("t{i}:\n\t@seq 1 {} | tail -1\n", 1000 * (i + 1));
    }
    std::fs::write(dir.join("Makefile"), mk).unwrap();
    // Recipes run in parallel: compare their lines sorted.
    bash(&format!("make -s -j4 -C {} | sort", dir.display()));
}

/// A directory of the test's, removed when it ends.
struct TempDir(std::path::PathBuf);

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh directory, removed when dropped; named by this process and a
/// count, as tests that run others (`stage_two_b_tests`) may use one name
/// at once.
fn tempdir(name: &str) -> TempDir {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let k = NEXT.fetch_add(1, Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!(
        "shmpipe-run-test-{}-{k}-{name}",
        std::process::id()
    ));
    std::fs::create_dir_all(&d).unwrap();
    TempDir(d)
}

/// The path of a statically linked busybox, installing Debian's
/// `busybox-static` if it is missing and we may.
fn static_busybox() -> Option<String> {
    let path = "/bin/busybox";
    let is_static = |p: &str| {
        Path::new(p).exists()
            && Command::new("file")
                .arg("-L")
                .arg(p)
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).contains("statically linked"))
                .unwrap_or(true)
    };
    if !is_static(path) {
        apt_install("busybox-static", || is_static(path));
    }
    is_static(path).then(|| path.into())
}

/// Installs Debian's `package` unless `there` says it is, refreshing the
/// package lists once if the first try fails; each step is given five
/// minutes, so that a slow or absent mirror makes the caller skip rather
/// than hang. Quiet: the caller says what it skips.
fn apt_install(package: &str, there: impl Fn() -> bool) {
    let apt = |args: &[&str]| {
        let _ = Command::new("timeout")
            .arg("300")
            .arg("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    };
    for refresh in [false, true] {
        if there() {
            return;
        }
        if refresh {
            apt(&["update", "-qq"]);
        }
        apt(&["install", "-y", "-qq", package]);
    }
}

/// The library is written only into a directory of this user's with mode
/// 0700: one that others may write is refused (status 125, saying why),
/// never used.
#[test]
fn library_goes_only_into_a_private_directory() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempdir("place-open");
    let open = dir.join("shmpipe");
    std::fs::create_dir_all(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    // Our uid: the owner of the directory we just made.
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&tmp).unwrap());
    let also_open = tmp.join(format!("shmpipe-{uid}"));
    std::fs::create_dir_all(&also_open).unwrap();
    std::fs::set_permissions(&also_open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let env = [
        ("XDG_RUNTIME_DIR", dir.to_str().unwrap()),
        ("TMPDIR", tmp.to_str().unwrap()),
    ];
    let r = watched(&["true"], true, &env);
    assert_eq!(r.status.code(), Some(125), "{}", r.stderr);
    assert!(r.stderr.contains("mode 0700"), "{}", r.stderr);
    assert_eq!(std::fs::read_dir(&open).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(&also_open).unwrap().count(), 0);
    // Made private, the second is used.
    std::fs::set_permissions(&also_open, std::fs::Permissions::from_mode(0o700)).unwrap();
    let r = watched(&["sh", "-c", "echo $LD_PRELOAD"], true, &env);
    assert!(r.status.success(), "{}", r.stderr);
    assert!(String::from_utf8_lossy(&r.stdout).contains(also_open.to_str().unwrap()));
}

/// A library file that is not byte-for-byte the embedded one (changed by
/// anything) is written again before it is used.
#[test]
fn a_changed_library_file_is_written_again() {
    let dir = tempdir("place-changed");
    let env = [("XDG_RUNTIME_DIR", dir.to_str().unwrap())];
    let r = watched(&["sh", "-c", "echo ${LD_PRELOAD##*:}"], true, &env);
    let lib = String::from_utf8(r.stdout).unwrap().trim().to_owned();
    let good = std::fs::read(&lib).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut bad = good.clone();
    bad[good.len() / 2] ^= 0xff;
    std::fs::write(&lib, &bad).unwrap();
    let r = watched(&["sh", "-c", "echo ran"], true, &env);
    assert_eq!(r.stdout, b"ran\n", "{}", r.stderr);
    assert!(std::fs::read(&lib).unwrap() == good);
}

/// `SHMPIPE_RUN_STATS` naming a file of another size leaves it untouched.
#[test]
fn a_stats_variable_naming_another_file_leaves_it_alone() {
    let dir = tempdir("stats-other");
    let other = dir.join("notes");
    let text = vec![b'n'; 64 * 1024 + 1];
    std::fs::write(&other, &text).unwrap();
    let code = "import os\nr, w = os.pipe(); os.write(w, b'x' * 100)";
    let r = watched(
        &["python3", "-c", code],
        true,
        &[("SHMPIPE_RUN_STATS", other.to_str().unwrap())],
    );
    assert!(r.status.success(), "{}", r.stderr);
    assert!(std::fs::read(&other).unwrap() == text);
}

thread_local! {
    /// The value `with_handover` gives `SHMPIPE_RUN_RINGS`: "1" (stage 2a,
    /// hand-over), "2" while `stage_two_b_tests` runs other tests
    /// (resident rings), or "0" while `stage_one_tests_with_rings_off` does.
    static SWITCH: std::cell::Cell<&'static str> = const { std::cell::Cell::new("1") };
}

/// Runs `f` (other tests of this file) with hand-over on under `shmpipe
/// run` (or resident rings, `SWITCH`), each run also counting bytes into
/// `stats`.
fn with_handover(stats: &Path, f: impl FnOnce()) {
    RUN_ENV.with(|e| {
        *e.borrow_mut() = vec![
            ("SHMPIPE_RUN_RINGS", SWITCH.with(|s| s.get()).into()),
            ("SHMPIPE_RUN_STATS", stats.to_str().unwrap().into()),
        ]
    });
    f();
    RUN_ENV.with(|e| e.borrow_mut().clear());
}

/// Bytes written through hand-overs and through the kernel, summed over
/// the processes that counted into a statistics file.
fn ring_and_kernel_bytes(stats: &Path) -> (u64, u64) {
    let file = std::fs::read(stats).unwrap();
    let word = |slot: usize, w: usize| {
        u64::from_le_bytes(file[slot * 64 + w * 8..][..8].try_into().unwrap())
    };
    let slots = (word(0, 0) as usize).min(1023);
    let ring = (1..=slots).map(|s| word(s, 1)).sum();
    let kernel = (1..=slots).map(|s| word(s, 2)).sum();
    (ring, kernel)
}

fn new_stats(dir: &Path) -> std::path::PathBuf {
    let stats = dir.join("stats");
    std::fs::write(&stats, vec![0u8; 64 * 1024]).unwrap();
    stats
}

fn usable_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Stage 2a: a parent and its child, on two CPUs, pass messages over two
/// pipes with plain `read` and `write`; with `SHMPIPE_RUN_RINGS=1` the
/// bytes are handed over, and the output is the same as natively, byte for
/// byte.
#[test]
fn handover_between_parent_and_child() {
    let dir = tempdir("handover");
    let stats = new_stats(&dir);
    let mut r = None;
    with_handover(&stats, || {
        r = Some(python(
            "import os, hashlib\n\
             cpus = sorted(os.sched_getaffinity(0))\n\
             a_r, a_w = os.pipe(); b_r, b_w = os.pipe()\n\
             pid = os.fork()\n\
             os.sched_setaffinity(0, {cpus[-1] if pid == 0 else cpus[0]})\n\
             if pid == 0:\n    os.close(a_w); os.close(b_r)\n    while True:\n        m = os.read(a_r, 65536)\n        if not m: os._exit(0)\n        os.write(b_w, m.swapcase())\n\
             os.close(a_r); os.close(b_w)\n\
             h = hashlib.sha256(); total = 0\n\
             for i in range(3000):\n    n = 1 + (i * 7919) % 6000\n    m = bytes(65 + (i + k) % 58 for k in range(n))\n    os.write(a_w, m)\n    got = b''\n    while len(got) < n:\n        got += os.read(b_r, 65536)\n    assert got == m.swapcase(), i\n    h.update(got); total += len(got)\n\
             os.close(a_w)\n\
             print(total, h.hexdigest(), os.read(b_r, 1), os.waitpid(pid, 0)[1])",
        ));
    });
    assert!(r.unwrap().status.success());
    let (ring, _) = ring_and_kernel_bytes(&stats);
    if usable_cpus() < 2 {
        eprintln!("one usable CPU: hand-over stays off, nothing to count");
    } else {
        assert!(ring > 0, "no byte was handed over");
    }
}

/// Stage 2a on a Unix stream socket pair: a parent and its child, on two
/// CPUs, pass messages both ways over one pair with plain `read` and
/// `write`; with hand-over on, the bytes are handed over in both
/// directions (each end's reader waits under its own inode, its writer
/// hands over to the other end's), and the output is the same as
/// natively, byte for byte.
#[test]
fn handover_socket_pair_between_parent_and_child() {
    let dir = tempdir("handover-socket");
    let stats = new_stats(&dir);
    with_handover(&stats, || {
        python(
            "import os, socket, hashlib\n\
             cpus = sorted(os.sched_getaffinity(0))\n\
             a, b = socket.socketpair()\n\
             pid = os.fork()\n\
             os.sched_setaffinity(0, {cpus[-1] if pid == 0 else cpus[0]})\n\
             if pid == 0:\n    a.close(); s = b.fileno()\n    while True:\n        m = os.read(s, 65536)\n        if not m: os._exit(0)\n        os.write(s, m.swapcase())\n\
             b.close(); s = a.fileno()\n\
             h = hashlib.sha256(); total = 0\n\
             for i in range(3000):\n    n = 1 + (i * 7919) % 6000\n    m = bytes(65 + (i + k) % 58 for k in range(n))\n    os.write(s, m)\n    got = b''\n    while len(got) < n:\n        got += os.read(s, 65536)\n    assert got == m.swapcase(), i\n    h.update(got); total += len(got)\n\
             a.shutdown(socket.SHUT_WR)\n\
             print(total, h.hexdigest(), os.read(s, 1), os.waitpid(pid, 0)[1])",
        );
    });
    let (ring, kernel) = ring_and_kernel_bytes(&stats);
    eprintln!("socket pair: {ring} bytes handed over, {kernel} by the kernel");
    if usable_cpus() >= 2 {
        assert!(ring > 0, "no byte was handed over");
    }
}

/// A socket-pair end shut down for writing fails a later `write` with
/// `EPIPE` also while the other end's reader waits in the library (the
/// writer asks the kernel with an empty send before it hands over; 100
/// pairs, the child reading as the parent shuts down and writes), and a
/// reader whose low-water mark is 10 bytes gets 10, not the first 5 that
/// a hand-over would give it.
#[test]
fn handover_socket_pair_keeps_shutdown_and_low_water_mark() {
    let dir = tempdir("handover-socket-rules");
    let stats = new_stats(&dir);
    with_handover(&stats, || {
        python(
            "import os, socket, time\n\
             cpus = sorted(os.sched_getaffinity(0))\n\
             def child(s, pid):\n    os.sched_setaffinity(0, {cpus[-1] if pid == 0 else cpus[0]})\n\
             epipe = 0\n\
             for i in range(100):\n    a, b = socket.socketpair()\n    pid = os.fork()\n    child(b, pid)\n    if pid == 0:\n        a.close()\n        for k in range(50):\n            os.write(b.fileno(), b'k'); assert os.read(b.fileno(), 100) == b'ping'\n        os.write(b.fileno(), b'r')\n        os._exit(0 if os.read(b.fileno(), 100) == b'' else 1)\n    b.close()\n    for k in range(50):\n        assert os.read(a.fileno(), 1) == b'k'; os.write(a.fileno(), b'ping')\n    assert os.read(a.fileno(), 1) == b'r'\n    a.shutdown(socket.SHUT_WR)\n    try:\n        os.write(a.fileno(), b'late')\n    except BrokenPipeError:\n        epipe += 1\n    assert os.waitpid(pid, 0)[1] == 0\n    a.close()\n\
             print('EPIPE', epipe)\n\
             a, b = socket.socketpair()\n\
             pid = os.fork()\n\
             child(b, pid)\n\
             if pid == 0:\n    a.close(); s = b.fileno()\n    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 10)\n    for i in range(100):\n        os.write(s, b'k')\n        m = os.read(s, 100)\n        assert m == b'0123456789', m\n    os._exit(0)\n\
             b.close(); s = a.fileno()\n\
             for i in range(100):\n    assert os.read(s, 1) == b'k'\n    os.write(s, b'01234'); time.sleep(0.0002); os.write(s, b'56789')\n\
             print(os.waitpid(pid, 0)[1])",
        );
    });
    let (ring, kernel) = ring_and_kernel_bytes(&stats);
    eprintln!("socket rules: {ring} bytes handed over, {kernel} by the kernel");
}

/// A socket end's reads stop asking the kernel for its low-water mark,
/// receive timeout and blocking once they found it plain
/// (`socket_options`); a change made afterwards must still count. Here the
/// parent's end gets a low-water mark of 10 bytes, after 200 round trips
/// on it, first from the child (a process of the tree: its wrapped
/// `setsockopt` makes every note stale) and then from an `exec`'d Python
/// without the library (no wrapper sees it: the `exec` made the tree stop
/// trusting notes). Each time the parent's next read must get all 10
/// bytes, not the first 5 a hand-over would give it.
#[test]
fn handover_socket_pair_sees_options_changed_after_reads() {
    let dir = tempdir("handover-socket-options");
    let stats = new_stats(&dir);
    with_handover(&stats, || {
        python(
            "import os, socket, subprocess, sys, time\n\
             cpus = sorted(os.sched_getaffinity(0))\n\
             a, b = socket.socketpair()\n\
             ctl_r, ctl_w = os.pipe()\n\
             pid = os.fork()\n\
             os.sched_setaffinity(0, {cpus[-1] if pid == 0 else cpus[0]})\n\
             def halves(s):\n    os.write(s, b'01234'); time.sleep(0.002); os.write(s, b'56789')\n\
             if pid == 0:\n    s = b.fileno()\n    for round in range(2):\n        for i in range(200):\n            assert os.read(s, 1) == b'p'; os.write(s, b'k')\n        if round == 0:\n            a.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 10); a.close()\n            os.write(ctl_w, b's')\n        assert os.read(s, 2) == b'go'\n        halves(s)\n    os._exit(0)\n\
             s = a.fileno()\n\
             for round in range(2):\n    a.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)\n    for i in range(200):\n        os.write(s, b'p'); assert os.read(s, 1) == b'k'\n    if round == 0:\n        assert os.read(ctl_r, 1) == b's'\n    else:\n        env = {k: v for k, v in os.environ.items() if k != 'LD_PRELOAD'}\n        code = 'import socket, sys; socket.socket(fileno=int(sys.argv[1])).setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 10); print(\"set\", flush=True)'\n        subprocess.run([sys.executable, '-c', code, str(s)], pass_fds=[s], env=env, check=True)\n    os.write(s, b'go')\n    print(round, os.read(s, 100))\n\
             print(os.waitpid(pid, 0)[1])",
        );
    });
    let (ring, kernel) = ring_and_kernel_bytes(&stats);
    eprintln!("socket options: {ring} bytes handed over, {kernel} by the kernel");
    if usable_cpus() >= 2 {
        assert!(ring > 0, "no byte was handed over");
    }
}

/// A hand-over's writer takes a socket end at 3 or above whose note is
/// current to be its socket without an `fstat` (`table` in the preload
/// crate). glibc's `fclose` of a stream `fdopen` made on it closes it
/// where no wrapper sees, so `fdopen` ends that trust: here a socket the
/// library never saw made (a `socketpair` by the `syscall` instruction
/// itself) takes the number, and all 100 bytes written there must reach
/// it, none the old pair's other end,
/// whose reader still waits (tests/c/unseen_close.c; without `fdopen`'s
/// distrust one byte went astray in 4 runs of 4).
#[test]
fn handover_writer_trusts_no_socket_end_given_to_fdopen() {
    let dir = tempdir("handover-unseen-close");
    let stats = new_stats(&dir);
    let prog = c_program(&dir, "unseen_close");
    let prog = prog.to_str().unwrap();
    with_handover(&stats, || {
        // Closed inside `fclose`, then by `syscall(SYS_close)` (seen by
        // the library's `syscall`: before it, one byte went astray in 4
        // runs of 4).
        for how in [&[prog][..], &[prog, "raw"]] {
            let r = same(how);
            assert_eq!(
                String::from_utf8_lossy(&r.stdout),
                "arrived at the new socket: 100\nastray at the old pair's other end: 0\n"
            );
        }
    });
}

/// Stage 2a: a reader whose writer runs on its CPU does not wait in the
/// library (its writer could not run while it waited) but reads the kernel
/// pipe: a parent and child pinned to one CPU after start, passing 2000
/// one-byte messages each way, hand over only while the reader has not
/// yet seen where its writer runs (the first message or two of each
/// pipe), and their output is the same as natively.
#[test]
fn handover_on_one_cpu_leaves_the_bytes_to_the_kernel() {
    let dir = tempdir("handover-one-cpu");
    let stats = new_stats(&dir);
    with_handover(&stats, || {
        python(
            "import os\n\
             cpu = min(os.sched_getaffinity(0))\n\
             a_r, a_w = os.pipe(); b_r, b_w = os.pipe()\n\
             pid = os.fork()\n\
             os.sched_setaffinity(0, {cpu})\n\
             if pid == 0:\n    os.close(a_w); os.close(b_r)\n    while True:\n        m = os.read(a_r, 1)\n        if not m: os._exit(0)\n        os.write(b_w, m)\n\
             os.close(a_r); os.close(b_w)\n\
             got = bytearray()\n\
             for i in range(2000):\n    os.write(a_w, bytes([65 + i % 26]))\n    got += os.read(b_r, 1)\n\
             os.close(a_w)\n\
             print(got.decode(), os.read(b_r, 1), os.waitpid(pid, 0)[1])",
        );
    });
    let (ring, kernel) = ring_and_kernel_bytes(&stats);
    if usable_cpus() >= 2 {
        // 4000 bytes in all; a reader that waited whatever the CPU got
        // 2000 of them handed over (its writer ran when it yielded).
        assert!(
            ring <= 40,
            "{ring} bytes handed over on one CPU ({kernel} by the kernel)"
        );
    }
}

/// Stage 2a keeps the order of bytes a writer sends through `write`
/// (seen, may be handed over) and through glibc's `dprintf` (its internal
/// `__write`, which the library never sees) on one pipe.
#[test]
fn handover_keeps_order_with_unseen_writes() {
    let dir = tempdir("handover-unseen");
    let stats = new_stats(&dir);
    with_handover(&stats, || {
        python(
            "import os, ctypes\n\
             libc = ctypes.CDLL(None)\n\
             r, w = os.pipe(); back_r, back_w = os.pipe()\n\
             pid = os.fork()\n\
             if pid == 0:\n    os.close(r); os.close(back_w)\n    for i in range(5000):\n        os.write(w, b'write %d\\n' % i)\n        libc.dprintf(w, b'dprintf %d\\n', ctypes.c_int(i))\n        if i % 10 == 0: os.read(back_r, 1)\n    os._exit(0)\n\
             os.close(w); os.close(back_r)\n\
             out = []; lines = 0\n\
             for i in range(5000):\n    if i % 10 == 0: os.write(back_w, b'k')\n    while lines < 2 * (i + 1):\n        m = os.read(r, 65536)\n        if not m: break\n        out.append(m); lines += m.count(b'\\n')\n\
             rest = os.read(r, 65536)\n\
             os.waitpid(pid, 0)\n\
             print(b''.join(out).decode() + rest.decode(), end='')",
        );
    });
}

/// The stage 1 tests that use pipes between processes, again with
/// hand-over on: nothing they print may change.
#[test]
fn stage_one_tests_with_handover_on() {
    let dir = tempdir("handover-stage1");
    let stats = new_stats(&dir);
    with_handover(&stats, || {
        yes_head_stops();
        token_ring_of_64();
        select_poll_epoll_on_mixed_descriptors();
        python_communicate_with_several_children();
        reader_and_writer_killed_mid_transfer();
        process_substitution();
        sort_uniq_pipeline();
        dup2_pipe_onto_stdin_of_exec();
        close_and_reopen_stdout();
        many_pipes_leave_nothing();
        posix_spawn_with_file_actions();
        static_binary_in_a_pipeline();
        make_j4_recipes_print();
    });
}

/// The stage 1 tests that use pipes between processes, again with the
/// library's fast paths off (`SHMPIPE_RUN_RINGS=0`: the hooks alone).
#[test]
fn stage_one_tests_with_rings_off() {
    SWITCH.with(|s| s.set("0"));
    stage_one_tests_with_handover_on();
    SWITCH.with(|s| s.set("1"));
}

/// Stage 2b: bytes resting in a ring reach, ahead of every later byte, a
/// reader the ring's process hands the pipe to: an exec'd `cat` (through
/// Python's `subprocess`, a `vfork` and `execve`), a `select` that must see
/// the pipe readable, a stream `fdopen`ed on it, a `dup2` onto stdin, and
/// a shell's `exec` of a program given the descriptor. Some bytes must
/// have gone through a ring first (on two CPUs).
#[test]
fn rings_hand_pipes_to_the_kernel_before_others_touch_them() {
    let dir = tempdir("rings-spill");
    let stats = new_stats(&dir);
    SWITCH.with(|s| s.set("2"));
    with_handover(&stats, || {
        python(
            "import os, select, subprocess, sys\n\
             out = []\n\
             r, w = os.pipe()\n\
             os.write(w, b'in the ring, ')\n\
             c = subprocess.Popen(['cat'], stdin=r, stdout=subprocess.PIPE)\n\
             os.write(w, b'then the kernel\\n'); os.close(w); os.close(r)\n\
             out.append(c.communicate()[0])\n\
             r, w = os.pipe()\n\
             os.write(w, b'select sees ')\n\
             print(select.select([r], [], [], 5)[0] == [r], end=' ')\n\
             out.append(os.read(r, 100))\n\
             os.write(w, b'a ring, then fdopen reads ')\n\
             out.append(os.read(r, 9))\n\
             f = os.fdopen(r, 'rb', buffering=0)\n\
             os.write(w, b'on\\n'); os.close(w)\n\
             out.append(f.read())\n\
             r, w = os.pipe()\n\
             os.write(w, b'dup2 onto stdin, ')\n\
             pid = os.fork()\n\
             if pid == 0:\n    os.dup2(r, 0); os.close(r); os.close(w)\n    os.write(1, os.read(0, 17)); os._exit(0)\n\
             os.waitpid(pid, 0)\n\
             os.write(w, b'then a shell\\n')\n\
             out.append(subprocess.run(['sh', '-c', 'exec head -c 13 <&%d' % r], pass_fds=[r], stdout=subprocess.PIPE).stdout)\n\
             sys.stdout.flush()\n\
             print(b''.join(out).decode(), end='')",
        );
    });
    SWITCH.with(|s| s.set("1"));
    let (ring, _) = ring_and_kernel_bytes(&stats);
    if usable_cpus() >= 2 {
        assert!(ring > 0, "no byte went through a ring");
    }
}

/// Stage 2b: the hand-overs a review found missing or wrong, in one C
/// program (tests/c/ring_spills.c): `execl` (a variadic wrapper, whose
/// stack was misaligned) with an inherited read end, a `vfork` child's
/// `dup2` then `execl`, a fortified `read` (`__read_chk`), a writer that
/// fills the ring in a process with a handler without `SA_RESTART` (the
/// ring's bytes once went behind later ones), a spill of a write end
/// whose reader is gone (no SIGPIPE), and `write` mixed with `dprintf`.
#[test]
fn rings_hand_over_what_a_review_found() {
    let dir = tempdir("rings-review");
    let prog = c_program(&dir, "ring_spills");
    let stats = new_stats(&dir);
    SWITCH.with(|s| s.set("2"));
    with_handover(&stats, || {
        same(&[prog.to_str().unwrap()]);
    });
    SWITCH.with(|s| s.set("1"));
}

/// Stage 2b: Unix stream socket pairs on rings (tests/c/socket_rings.c):
/// both ends kept by both processes (lmbench's way), 120 KiB written with
/// nobody reading (more than a ring: the writer must not wait for a
/// reader the kernel would not wait for), a child that closes its copy of
/// one end half-way, `shutdown` after ring bytes, a fortified `recv`,
/// `recvmmsg`, `sendmmsg` then `write`, a `close_range` the kernel refuses
/// (each of these four hung or reordered before they spilled), and a
/// `vfork` child that moves its end onto stdin and runs `head`. The output is the same as
/// natively; on two CPUs some bytes go through rings.
#[test]
fn rings_carry_socket_pairs() {
    let (ring, kernel) = same_with_rings("socket_rings", &[]);
    eprintln!("socket rings: {ring} bytes through rings, {kernel} by the kernel");
    if usable_cpus() >= 2 {
        assert!(ring > 0, "no byte went through a ring");
    }
}

/// Stage 2b on one CPU (tests/c/one_cpu_rings.c): every process pinned
/// to one CPU after it starts, where each waiting side yields to its peer
/// once, and a writer lets its reader empty a KERNEL pipe, before either
/// sleeps: one-byte round trips, 16 MiB in writes and reads of mixed
/// sizes up to 200 KiB, for pipes and socket pairs, and a token ring of
/// 8. The output is the same as natively; on two CPUs (the library's
/// rings need them at start) some bytes go through rings.
#[test]
fn rings_on_one_cpu() {
    let (ring, kernel) = same_with_rings("one_cpu_rings", &[]);
    eprintln!("one CPU: {ring} bytes through rings, {kernel} by the kernel");
    if usable_cpus() >= 2 {
        assert!(ring > 0, "no byte went through a ring");
    }
}

/// Stage 2b with a writer that has a second thread
/// (tests/c/threaded_writers.c): its write spins for room with signals
/// left alone, then leaves the rest to the kernel, and the pipe comes
/// back to the ring once the reader has caught up. 1 MiB to a reader that
/// sleeps, 50 rounds of 64 KiB answered one by one, 64 MiB streamed: the
/// output is the same as natively, and on two CPUs more bytes go through
/// the ring than the one ring's worth before the first wait (before, the
/// first write that found the ring full gave the pipe to the kernel for
/// good).
#[test]
fn rings_stay_with_threaded_writers() {
    let (ring, kernel) = same_with_rings("threaded_writers", &[]);
    eprintln!("threaded writers: {ring} bytes through rings, {kernel} by the kernel");
    if usable_cpus() >= 2 {
        // Step 1's ring is 64 KiB; the answers' pipe adds 50 bytes.
        assert!(
            ring > 68 * 1024,
            "the pipe did not come back to the ring: {ring} bytes"
        );
    }
}

/// Handlers without `SA_RESTART` installed by `sigaction`
/// (tests/c/counted_handlers.c): Rust's `SIGSEGV` and `SIGBUS` handlers,
/// a `SIGUSR1` one that reads its siginfo, then a ping-pong, then a read
/// that a `SIGALRM` without `SA_RESTART` must interrupt, and the old
/// handler that `signal` and its kind return, a handler that ends its
/// thread, two threads installing at once, a handler changed while its
/// signal comes (each runs with its own mask), a `vfork` child's
/// handler (not the parent's), and a handler that `system` puts back. The
/// output is
/// the same as natively, and on two CPUs the ping-pong goes through
/// rings; before the library counted such handlers (its trampoline), a
/// process with one never waited in a ring (1545 ring bytes of 1054178 in
/// `lat_pipe` with Rust's handlers).
#[test]
fn rings_stay_with_handlers_without_sa_restart() {
    let (ring, kernel) = same_with_rings("counted_handlers", &[]);
    eprintln!("counted handlers: {ring} bytes through rings, {kernel} by the kernel");
    if usable_cpus() >= 2 {
        assert!(
            ring >= 2000,
            "the round trips stayed in the kernel: {ring} ring bytes"
        );
    }
}

/// Calls made by number (`syscall(2)`), an io_uring and `pidfd_getfd`
/// (tests/c/raw_calls.c): raw reads and writes mixed with the C calls on
/// one pipe, a raw close of a pipe's write end, an io_uring reading a pipe
/// whose gone writer left its bytes on a ring, and a read end taken from
/// a child by `pidfd_getfd`. The output is the same as natively, with
/// rings and with hand-over only. Before the library wrapped `syscall`,
/// the records came out of order and the io_uring and the taken end read
/// 0 bytes. (A socket pair's end closed by number:
/// `handover_writer_trusts_no_socket_end_given_to_fdopen`.)
///
/// With rings, the raw reads and writes (part 1), the raw close (part 2,
/// with a copy made by `SYS_fcntl` and closed by `SYS_close_range`) and
/// the io_uring's pipe (part 3) run alone, each asserting that bytes went
/// through a ring (on two CPUs), so that each reads what a ring carried.
#[test]
fn calls_made_by_number_take_the_wrappers_paths() {
    for part in ["1", "2", "3"] {
        let (ring, kernel) = same_with_rings("raw_calls", &[part]);
        eprintln!("raw calls, part {part}: {ring} bytes through rings, {kernel} by the kernel");
        if usable_cpus() >= 2 {
            assert!(ring > 0, "part {part}: no byte went through a ring");
        }
    }
    let (ring, kernel) = same_with_rings("raw_calls", &[]);
    eprintln!("raw calls: {ring} bytes through rings, {kernel} by the kernel");
    let dir = tempdir("handover-raw-calls");
    let prog = c_program(&dir, "raw_calls");
    let stats = new_stats(&dir);
    with_handover(&stats, || {
        same(&[prog.to_str().unwrap()]);
    });
}

/// An io_uring made through liburing (tests/c/liburing_read.c), whose
/// `io_uring_setup` is its own system call instruction, so the library
/// wraps liburing's calls that make one: it reads all 20000 bytes a gone
/// writer left on a pipe's ring, and a pipe written through the io_uring
/// and by `write` in turn keeps its order. Before those wrappers the read
/// got 0 bytes and the other pipe's checksum differed. Installs Debian's
/// `liburing-dev` if it is missing and may; skipped without it.
#[test]
fn io_urings_made_by_liburing_take_the_pipes_to_the_kernel() {
    apt_install("liburing-dev", || {
        Path::new("/usr/include/liburing.h").exists()
    });
    if !Path::new("/usr/include/liburing.h").exists() {
        eprintln!(
            "SKIPPED io_urings_made_by_liburing: no liburing-dev and it could not be installed"
        );
        return;
    }
    let (ring, kernel) = same_with_rings_linked("liburing_read", &["-luring"], &[]);
    eprintln!("liburing: {ring} bytes through rings, {kernel} by the kernel");
    if usable_cpus() >= 2 {
        assert!(ring > 0, "no byte went through a ring");
    }
}

/// Runs `tests/c/NAME.c` with `args` natively and under `shmpipe run`
/// with rings on (`same`): the bytes the run wrote through rings and the
/// kernel.
fn same_with_rings(name: &str, args: &[&str]) -> (u64, u64) {
    same_with_rings_linked(name, &[], args)
}

/// `same_with_rings`, the program linked with `libs` (`-luring`).
fn same_with_rings_linked(name: &str, libs: &[&str], args: &[&str]) -> (u64, u64) {
    let dir = tempdir(&format!("rings-{name}"));
    let prog = c_program_with(&dir, name, libs);
    let stats = new_stats(&dir);
    let argv: Vec<&str> = [prog.to_str().unwrap()]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    SWITCH.with(|s| s.set("2"));
    with_handover(&stats, || {
        same(&argv);
    });
    SWITCH.with(|s| s.set("1"));
    ring_and_kernel_bytes(&stats)
}

/// Stage 2b: 300 children, each ending by `exit`, `_exit` or a return
/// from `main` while it still holds a pipe's write end
/// (tests/c/exits.c), give their rings back to the tree's pool of 128, so
/// that the 1000 bytes the parent then sends itself on a new pipe travel
/// on a ring (on two CPUs, as `byte_counts_go_to_the_stats_file`'s do).
/// Before the library counted out what a process holds at exit, each
/// such child kept a ring for good and the last pipe went to the kernel.
#[test]
fn rings_held_at_exit_are_given_back() {
    let dir = tempdir("rings-exits");
    let prog = c_program(&dir, "exits");
    SWITCH.with(|s| s.set("2"));
    for how in ["exit", "_exit", "return"] {
        let stats = new_stats(&dir);
        with_handover(&stats, || {
            let r = same(&[prog.to_str().unwrap(), how]);
            assert!(
                String::from_utf8_lossy(&r.stdout)
                    == format!("{how}: 300 bytes from 300 children, then 1000 bytes intact\n"),
                "{}",
                String::from_utf8_lossy(&r.stdout)
            );
        });
        let (ring, _) = ring_and_kernel_bytes(&stats);
        if usable_cpus() >= 2 {
            assert!(
                ring >= 1000,
                "{how}: the last pipe found no ring ({ring} bytes on rings)"
            );
        }
    }
    SWITCH.with(|s| s.set("1"));
}

/// Stage 2b: a `write` longer than `PIPE_BUF` that waits for room in a
/// ring ends with the count so far when a signal with a handler comes, as
/// the kernel's does under `SA_RESTART` too (tests/c/long_writes.c): a
/// reader that reads nothing until the writer's timer fired (before the
/// write held its signals, the handler ran in its wait for room and the
/// write went on waiting: a hang); the same without `SA_RESTART`, whose
/// second write, which can put nothing, fails with `EINTR`; a reader
/// that signals the writer and at once gives its end to the kernel (the
/// write's held signal once went unseen and it hung: a reviewer's case),
/// and the same with the signal later, whose handler's `errno` stays;
/// a writer with an idle second thread, whose signal must still end the
/// write on the writing thread; and a slow reader under a fast timer.
#[test]
fn rings_end_a_long_write_short_when_a_signal_comes() {
    let dir = tempdir("rings-long-writes");
    let prog = c_program(&dir, "long_writes");
    let prog = prog.to_str().unwrap();
    let stats = new_stats(&dir);
    SWITCH.with(|s| s.set("2"));
    with_handover(&stats, || {
        let r = same(&[prog, "stalled"]);
        assert_eq!(
            String::from_utf8_lossy(&r.stdout),
            "stalled: write short yes, after a tick yes, reader got the count yes\n"
        );
        let r = same(&[prog, "eintr"]);
        assert_eq!(
            String::from_utf8_lossy(&r.stdout),
            "eintr: write short yes, after a tick yes, reader got the count yes\n\
             eintr: a second write fails with EINTR yes\n"
        );
        let r = same(&[prog, "spill"]);
        assert_eq!(
            String::from_utf8_lossy(&r.stdout),
            "spill: write short yes, after the signal yes, reader got the count yes\n"
        );
        let r = same(&[prog, "errno"]);
        assert_eq!(
            String::from_utf8_lossy(&r.stdout),
            "errno: write short yes, after the signal yes, reader got the count yes\n\
             errno: as the handler left it yes\n"
        );
        let r = same(&[prog, "threaded"]);
        assert_eq!(
            String::from_utf8_lossy(&r.stdout),
            "threaded: write short yes, handled by the writing thread yes\n"
        );
        let r = same(&[prog, "slow"]);
        assert_eq!(
            String::from_utf8_lossy(&r.stdout),
            "slow: some writes short yes, every byte came in order yes\n"
        );
    });
    SWITCH.with(|s| s.set("1"));
}

/// Stage 2b (`SHMPIPE_RUN_RINGS=2`, resident rings, as by default): every
/// test of 2a, again (the tests of stage 1 run so by default): nothing they
/// print may change, and between a parent and child on two CPUs some bytes
/// must go through rings.
#[test]
fn stage_two_b_tests() {
    SWITCH.with(|s| s.set("2"));
    handover_between_parent_and_child();
    handover_keeps_order_with_unseen_writes();
    handover_reads_see_eintr_and_eagain();
    several_writers_keep_their_records_whole();
    handover_reads_restart_under_sa_restart();
    handover_bad_buffers_fail_with_efault();
    handover_of_stack_buffers_keeps_efault_after_mprotect();
    handover_reads_and_signal_handlers_installed_any_way();
    handover_socket_pair_between_parent_and_child();
    handover_socket_pair_keeps_shutdown_and_low_water_mark();
    handover_socket_pair_sees_options_changed_after_reads();
    handover_writer_trusts_no_socket_end_given_to_fdopen();
    SWITCH.with(|s| s.set("1"));
}

/// With hand-over on, a `read` with nothing to read is interrupted by a
/// signal whose handler lacks `SA_RESTART` (Python installs its handlers
/// so) also when the signal comes while the reader waits in the library
/// (the timers fire within its 200 us wait or just after), and a
/// non-blocking read still fails with `EAGAIN` at once. A read that went
/// on waiting instead would hang until the timer's next signal, a second
/// later (the one that also rescues a native `read` whose signal
/// came just before it entered the kernel, a race Python cannot close):
/// 200 of those outlast the watchdog.
#[test]
fn handover_reads_see_eintr_and_eagain() {
    let dir = tempdir("handover-eintr");
    let stats = new_stats(&dir);
    with_handover(&stats, || {
        python(
            "import os, signal\n\
             class Alarm(Exception): pass\n\
             armed = False\n\
             def on_alarm(*_):\n    global armed\n    if armed:\n        armed = False\n        raise Alarm()\n\
             signal.signal(signal.SIGALRM, on_alarm)\n\
             r, w = os.pipe()\n\
             pid = os.fork()\n\
             if pid == 0:\n    os.close(r); os.read(os.pipe()[0], 1)\n\
             interrupted = 0\n\
             for i in range(200):\n    try:\n        armed = True\n        signal.setitimer(signal.ITIMER_REAL, 0.00005 * (1 + i % 8), 1)\n        os.read(r, 10)\n    except Alarm:\n        interrupted += 1\n    signal.setitimer(signal.ITIMER_REAL, 0)\n\
             os.set_blocking(r, False)\n\
             try:\n    os.read(r, 10)\nexcept BlockingIOError:\n    print('EAGAIN')\n\
             os.kill(pid, signal.SIGKILL); os.waitpid(pid, 0)\n\
             print('interrupted', interrupted)",
        );
    });
}

/// `PIPE_BUF` atomicity with several writers: four processes write 500
/// records of 4096 bytes each (one letter per writer) into one pipe, and
/// the reader finds every record whole, natively, under `shmpipe run` and
/// with hand-over on.
#[test]
fn several_writers_keep_their_records_whole() {
    let code = "import os\n\
         r, w = os.pipe()\n\
         kids = []\n\
         for k in range(4):\n    pid = os.fork()\n    if pid == 0:\n        os.close(r)\n        for i in range(500):\n            os.write(w, bytes([65 + k]) * 4096)\n        os._exit(0)\n    kids.append(pid)\n\
         os.close(w)\n\
         buf = bytearray(); counts = [0] * 4\n\
         while True:\n    m = os.read(r, 65536)\n    if not m: break\n    buf += m\n    while len(buf) >= 4096:\n        rec = bytes(buf[:4096]); del buf[:4096]\n        assert rec == rec[:1] * 4096, 'a torn record'\n        counts[rec[0] - 65] += 1\n\
         print(counts, len(buf), [os.waitpid(p, 0)[1] for p in kids])";
    python(code);
    let dir = tempdir("handover-pipe-buf");
    let stats = new_stats(&dir);
    with_handover(&stats, || {
        python(code);
    });
    let (ring, kernel) = ring_and_kernel_bytes(&stats);
    eprintln!("several writers, hand-over on: {ring} bytes handed over, {kernel} by the kernel");
}

/// With hand-over on, a `read` with nothing to read whose signal handler
/// has `SA_RESTART` is restarted, as the kernel's is, whenever the signal
/// comes: libc's `read` (called directly, so Python's own retry on EINTR
/// cannot hide one) never fails with `EINTR` while timers fire during
/// its wait.
#[test]
fn handover_reads_restart_under_sa_restart() {
    let dir = tempdir("handover-restart");
    let stats = new_stats(&dir);
    with_handover(&stats, || {
        python(
            "import os, signal, ctypes, errno, time\n\
             libc = ctypes.CDLL(None, use_errno=True)\n\
             signal.signal(signal.SIGALRM, lambda *_: None)\n\
             signal.siginterrupt(signal.SIGALRM, False)\n\
             r, w = os.pipe(); go_r, go_w = os.pipe()\n\
             pid = os.fork()\n\
             if pid == 0:\n    os.close(r)\n    for i in range(100):\n        os.read(go_r, 1)\n        time.sleep(0.002)\n        os.write(w, b'x')\n    os._exit(0)\n\
             buf = ctypes.create_string_buffer(10)\n\
             eintr = 0; got = 0\n\
             for i in range(100):\n    os.write(go_w, b'g')\n    signal.setitimer(signal.ITIMER_REAL, 0.0001 * (1 + i % 8), 0.0003)\n    n = libc.read(r, buf, 10)\n    e = ctypes.get_errno()\n    signal.setitimer(signal.ITIMER_REAL, 0)\n    if n < 0 and e == errno.EINTR: eintr += 1\n    elif n > 0: got += n\n\
             os.waitpid(pid, 0)\n\
             print('eintr', eintr, 'got', got)",
        );
    });
}

/// With hand-over on, a `write` from a buffer that is not mapped and a
/// `read` into one that is not writable fail with `EFAULT`, as natively,
/// and lose no byte, also when the other side waits in the library (the
/// hand-over copied with plain loads and stores and died of SIGSEGV).
/// Odd rounds test the writer (a bad write, then a good one, to a reader
/// waiting with a good buffer), even rounds the reader (a read into a
/// read-only page while the writer writes good bytes, then a good read).
#[test]
fn handover_bad_buffers_fail_with_efault() {
    let dir = tempdir("handover-efault");
    let stats = new_stats(&dir);
    with_handover(&stats, || {
        python(
            "import os, ctypes, errno, time\n\
             libc = ctypes.CDLL(None, use_errno=True)\n\
             libc.mmap.restype = ctypes.c_void_p\n\
             libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]\n\
             ro = ctypes.c_void_p(libc.mmap(None, 4096, 1, 0x22, -1, 0))\n\
             bad = ctypes.c_void_p(16)\n\
             r, w = os.pipe(); go_r, go_w = os.pipe()\n\
             cpus = sorted(os.sched_getaffinity(0))\n\
             pid = os.fork()\n\
             os.sched_setaffinity(0, {cpus[-1] if pid == 0 else cpus[0]})\n\
             if pid == 0:\n    os.close(r); os.close(go_w)\n    ok = True\n    for i in range(2000):\n        if os.read(go_r, 1) == b'w':\n            n = libc.write(w, bad, 4)\n            ok = ok and n == -1 and ctypes.get_errno() == errno.EFAULT\n        else:\n            time.sleep(0.00005)\n        os.write(w, b'%04d' % i)\n    os._exit(0 if ok else 1)\n\
             os.close(w); os.close(go_r)\n\
             reads = set(); good = []\n\
             for i in range(2000):\n    os.write(go_w, b'rw'[i % 2:][:1])\n    if i % 2 == 0:\n        n = libc.read(r, ro, 4)\n        reads.add((n, errno.errorcode.get(ctypes.get_errno())))\n    m = os.read(r, 4)\n    while len(m) < 4: m += os.read(r, 4 - len(m))\n    good.append(m)\n\
             print(sorted(reads), good == [b'%04d' % i for i in range(2000)], os.waitpid(pid, 0)[1])",
        );
    });
    let (ring, kernel) = ring_and_kernel_bytes(&stats);
    eprintln!("bad buffers, hand-over on: {ring} bytes handed over, {kernel} by the kernel");
}

/// With hand-over on, an `exec`'d program meets the processes from before
/// its `exec`: a parent and a child that `exec`s a new Python (as a shell
/// runs each stage of a pipeline; it moves to another CPU once started)
/// hand bytes over, through the arena at
/// descriptor 1000 that `shmpipe run` leaves and the library shares; the
/// program sees no other descriptor of the library's, and one that
/// closes 1000 (`subprocess`' `close_fds`) still runs alike.
#[test]
fn handover_reaches_across_exec() {
    let dir = tempdir("handover-exec");
    let stats = new_stats(&dir);
    let mut r = None;
    with_handover(&stats, || {
        r = Some(python(
            "import os, sys, subprocess\n\
             cpus = sorted(os.sched_getaffinity(0))\n\
             print(sorted(int(f) for f in os.listdir('/proc/self/fd') if int(f) < 1000))\n\
             a_r, a_w = os.pipe(); b_r, b_w = os.pipe()\n\
             echo = 'import os, sys\\nos.sched_setaffinity(0, {int(sys.argv[1])})\\nwhile True:\\n    m = os.read(0, 65536)\\n    if not m: break\\n    os.write(1, m.upper())'\n\
             pid = os.fork()\n\
             if pid == 0:\n    os.dup2(a_r, 0); os.dup2(b_w, 1)\n    for fd in (a_r, a_w, b_r, b_w): os.close(fd)\n    os.execv(sys.executable, [sys.executable, '-c', echo, str(cpus[-1])])\n\
             os.sched_setaffinity(0, {cpus[0]})\n\
             os.close(a_r); os.close(b_w)\n\
             for i in range(3000):\n    m = b'message %d' % i\n    os.write(a_w, m)\n    got = b''\n    while len(got) < len(m): got += os.read(b_r, 65536)\n    assert got == m.upper(), (i, got)\n\
             os.close(a_w)\n\
             print(os.read(b_r, 1), os.waitpid(pid, 0)[1])\n\
             print(subprocess.run([sys.executable, '-c', 'print(input()[::-1])'], input=b'close_fds', capture_output=True).stdout)",
        ));
    });
    assert!(r.unwrap().status.success());
    let (ring, kernel) = ring_and_kernel_bytes(&stats);
    eprintln!("across exec: {ring} bytes handed over, {kernel} by the kernel");
    if usable_cpus() < 2 {
        eprintln!("one usable CPU: hand-over stays off, nothing to count");
    } else {
        assert!(ring > 0, "no byte was handed over across the exec");
    }
}

/// Compiles `tests/c/NAME.c` into `dir`, with threads.
fn c_program(dir: &Path, name: &str) -> std::path::PathBuf {
    c_program_with(dir, name, &[])
}

/// `c_program`, linked with `libs` (`-luring`).
fn c_program_with(dir: &Path, name: &str, libs: &[&str]) -> std::path::PathBuf {
    let prog = dir.join(name);
    let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let out = Command::new(&cc)
        .args(["-O2", "-pthread", "-o"])
        .arg(&prog)
        .arg(format!("{}/tests/c/{name}.c", env!("CARGO_MANIFEST_DIR")))
        .args(libs)
        .output()
        .expect("the C compiler");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    prog
}

/// Buffers on the main thread's stack are handed over without the
/// kernel's check (main_stack in the preload crate), so a C program
/// (tests/c/stack_buffers.c) that makes a page of its own stack read-only
/// or inaccessible with `mprotect` must still get `EFAULT` for a `read`
/// into it or a `write` from it, losing no byte, as natively: the
/// library's `mprotect` hook turns the shortcut off. (With the hook's
/// effect removed, the reader died of SIGSEGV in 3 runs of 3.)
#[test]
fn handover_of_stack_buffers_keeps_efault_after_mprotect() {
    let dir = tempdir("handover-stack");
    let prog = c_program(&dir, "stack_buffers");
    let stats = new_stats(&dir);
    with_handover(&stats, || {
        let r = same(&[prog.to_str().unwrap()]);
        assert_eq!(
            String::from_utf8_lossy(&r.stdout),
            "round trips 600 of 600, read-only page: EFAULT 100 of 100, \
             no-access page: child's EFAULTs all, after 600 of 600\n"
        );
    });
    let (ring, kernel) = ring_and_kernel_bytes(&stats);
    eprintln!("stack buffers, hand-over on: {ring} bytes handed over, {kernel} by the kernel");
    if usable_cpus() >= 2 {
        assert!(ring > 0, "no byte was handed over");
    }
}

/// The signal mask of a read that waits in the library (wait_signals in
/// the preload crate): a C program (tests/c/signals.c) whose handlers all
/// have `SA_RESTART` (the library then leaves the mask alone) sees no
/// `EINTR` and every byte while timers fire during its reads; one that
/// installs a handler without it while another thread waits in `read`,
/// and one that installs it where no wrapper sees it, get `EINTR`; so
/// does a socket-pair read with a receive timeout under a handler with
/// `SA_RESTART` (signal(7); such a read went on waiting in the library,
/// before and after the mask change, and timed out instead). The same
/// output natively and with hand-over on.
#[test]
fn handover_reads_and_signal_handlers_installed_any_way() {
    let dir = tempdir("handover-signals");
    let prog = c_program(&dir, "signals");
    let prog = prog.to_str().unwrap();
    let stats = new_stats(&dir);
    with_handover(&stats, || {
        let r = same(&[prog, "restart"]);
        assert_eq!(
            String::from_utf8_lossy(&r.stdout),
            "restart: eintr 0, got 300\n"
        );
        for delay_us in ["0", "30", "80", "150", "400"] {
            let r = same(&[prog, "install", delay_us]);
            assert_eq!(
                String::from_utf8_lossy(&r.stdout),
                "install: read -1, EINTR\n"
            );
        }
        let r = same(&[prog, "unseen"]);
        assert_eq!(
            String::from_utf8_lossy(&r.stdout),
            "unseen: eintr 20 of 20\n"
        );
        let r = same(&[prog, "rcvtimeo"]);
        assert_eq!(
            String::from_utf8_lossy(&r.stdout),
            "rcvtimeo: at least 12 of 20 reads interrupted: yes\n"
        );
    });
    let (ring, kernel) = ring_and_kernel_bytes(&stats);
    eprintln!("signals, hand-over on: {ring} bytes handed over, {kernel} by the kernel");
}
