//! Cross-process test helpers: fork with a child that is always killed and
//! reaped, re-exec of the test binary as a child, a watchdog that ends a
//! hung test (and its children) instead of hanging the suite, and a
//! checkable byte pattern.
#![allow(dead_code, unsafe_code)]

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Children of this test process that the watchdog kills if it fires.
static CHILDREN: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// A forked or spawned child: SIGKILLed and reaped on drop unless waited.
#[derive(Debug)]
pub struct Child {
    pid: i32,
    reaped: bool,
}

/// Forks; the child runs `f` and `_exit`s with its result (101 if it panics).
/// In the parent `f` is dropped unrun, so whatever it captured (say, the
/// end the child uses) is closed in the parent, as in the fork idiom.
pub fn fork(f: impl FnOnce() -> i32) -> Child {
    // SAFETY: the child runs only `f` and then `_exit`s; `f` in these tests
    // uses shmpipe, the allocator (fork-safe in glibc) and no lock another
    // thread of the test harness could hold.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = catch_unwind(AssertUnwindSafe(f)).unwrap_or(101);
        // SAFETY: ends the child without running the parent's atexit
        // handlers or unwinding into the harness.
        unsafe { libc::_exit(code) };
    }
    CHILDREN.lock().unwrap().push(pid);
    Child { pid, reaped: false }
}

/// Re-runs this test binary as a child that executes only test `name`,
/// with `SHMPIPE_TEST_ROLE=role`; `prepare` may add to the command.
pub fn spawn_role(name: &str, role: &str, prepare: impl FnOnce(&mut Command)) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env("SHMPIPE_TEST_ROLE", role);
    prepare(&mut cmd);
    let child = cmd.spawn().expect("spawn test child");
    let pid = child.id() as i32;
    std::mem::forget(child); // reaped by our Child instead
    CHILDREN.lock().unwrap().push(pid);
    Child { pid, reaped: false }
}

/// The role this process plays, if it is a child made by `spawn_role`.
pub fn role() -> Option<String> {
    std::env::var("SHMPIPE_TEST_ROLE").ok()
}

impl Child {
    /// The child's process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Sends SIGKILL.
    pub fn kill(&self) {
        // SAFETY: plain syscall on our own child's pid (not yet reaped, so
        // the pid cannot have been reused).
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
    }

    /// Waits up to `limit` for the child to end and returns its exit code
    /// (or 128 + signal). Past the limit the child is killed and the test
    /// fails.
    pub fn wait(mut self, limit: Duration) -> i32 {
        let start = Instant::now();
        loop {
            let mut status = 0;
            // SAFETY: waitpid on our own child with a valid status pointer.
            let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            assert!(r >= 0, "waitpid failed");
            if r == self.pid {
                self.reaped = true;
                CHILDREN.lock().unwrap().retain(|&p| p != self.pid);
                return if libc::WIFEXITED(status) {
                    libc::WEXITSTATUS(status)
                } else {
                    128 + libc::WTERMSIG(status)
                };
            }
            if start.elapsed() > limit {
                self.kill();
                panic!("child {} did not finish within {limit:?}", self.pid);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Waits and asserts a zero exit code.
    pub fn join(self) {
        let code = self.wait(Duration::from_secs(120));
        assert_eq!(code, 0, "child failed");
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if !self.reaped {
            self.kill();
            let mut status = 0;
            // SAFETY: reaping our own killed child.
            unsafe { libc::waitpid(self.pid, &mut status, 0) };
            CHILDREN.lock().unwrap().retain(|&p| p != self.pid);
        }
    }
}

/// Ends the whole test process (and its children) if the test holding
/// the guard runs longer than `limit`: a hung test fails, it never hangs.
#[must_use]
pub struct Watchdog(Arc<AtomicBool>);

pub fn watchdog(limit: Duration) -> Watchdog {
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    let name = std::thread::current().name().unwrap_or("?").to_string();
    std::thread::spawn(move || {
        let start = Instant::now();
        while start.elapsed() < limit {
            if flag.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!(
            "watchdog: test {name} still running after {limit:?}; killing its children and exiting"
        );
        for pid in CHILDREN.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            // SAFETY: plain syscall on a child pid we have not reaped.
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
        std::process::exit(99);
    });
    Watchdog(done)
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The byte at stream position `i` of the test pattern: cheap, and a
/// dropped, repeated or reordered byte shows up at once.
pub fn pattern(i: u64) -> u8 {
    let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 56) as u8 ^ (i as u8)
}

/// Fills `buf` with the pattern from position `start`.
pub fn fill(buf: &mut [u8], start: u64) {
    for (k, b) in buf.iter_mut().enumerate() {
        *b = pattern(start + k as u64);
    }
}

/// Checks `buf` against the pattern from position `start`.
pub fn check(buf: &[u8], start: u64) {
    for (k, &b) in buf.iter().enumerate() {
        let want = pattern(start + k as u64);
        assert_eq!(
            b,
            want,
            "wrong byte at stream position {}",
            start + k as u64
        );
    }
}

/// A small fast PRNG (xorshift64*) so children need no shared state.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `0..=max`.
    pub fn upto(&mut self, max: usize) -> usize {
        (self.next() % (max as u64 + 1)) as usize
    }
}

/// FNV-1a, for message checksums.
pub fn checksum(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}
