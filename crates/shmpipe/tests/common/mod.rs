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

/// Sets up SIGALRM every 2 ms with a handler installed without
/// SA_RESTART, as a profiler's SIGPROF or a periodic timer would be: each
/// signal interrupts a sleeping system call with EINTR.
pub fn signals_every_2ms() {
    extern "C" fn ignore(_: libc::c_int) {}
    // SAFETY: a zeroed sigaction with a handler that does nothing is
    // valid; setitimer takes a valid itimerval. Called in a forked,
    // single-threaded child.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = ignore as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGALRM, &sa, std::ptr::null_mut()), 0);
        let every = libc::timeval {
            tv_sec: 0,
            tv_usec: 2000,
        };
        let timer = libc::itimerval {
            it_interval: every,
            it_value: every,
        };
        assert_eq!(
            libc::setitimer(libc::ITIMER_REAL, &timer, std::ptr::null_mut()),
            0
        );
    }
}

/// FNV-1a, for message checksums.
pub fn checksum(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Serialises the tests of one test binary that fork or count process-wide
/// resources: a child forked by one test would otherwise inherit (and keep
/// open) the pipe ends of a test running beside it, delaying its EOF.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// An environment variable as a number, or `default`.
pub fn env_count(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// A listener at a fresh socket path for `tag`, whose pipes to clients
/// have `capacity` bytes.
pub fn listener(tag: &str, capacity: usize) -> (std::path::PathBuf, shmpipe::Listener) {
    let path = sock_path(tag);
    let mut listener = shmpipe::Listener::bind(&path).unwrap();
    let mut opts = shmpipe::Options::new();
    opts.capacity(capacity);
    listener.set_options(opts);
    (path, listener)
}

/// A unique socket path for a test.
pub fn sock_path(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("shmpipe-test-{tag}-{}.sock", std::process::id()))
}

/// This process's open descriptors (from `/proc/self/fd`, less the one
/// used to list them).
pub fn open_fds() -> Vec<i32> {
    let dir = std::fs::read_dir("/proc/self/fd").expect("read /proc/self/fd");
    let mut fds: Vec<i32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    // The directory's own descriptor is closed now; drop numbers that are.
    fds.retain(|&fd| std::fs::metadata(format!("/proc/self/fdinfo/{fd}")).is_ok());
    fds.sort_unstable();
    fds
}

/// The `flags:` field of `/proc/self/fdinfo/FD` (octal open flags, with
/// `O_CLOEXEC` = 0o2000000 for a close-on-exec descriptor).
pub fn fd_flags(fd: i32) -> Option<u32> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
    let line = info.lines().find(|l| l.starts_with("flags:"))?;
    u32::from_str_radix(line["flags:".len()..].trim(), 8).ok()
}

/// What a descriptor points at (`readlink /proc/self/fd/FD`).
pub fn fd_target(fd: i32) -> String {
    std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The lines of `/proc/self/maps`.
pub fn maps() -> Vec<String> {
    std::fs::read_to_string("/proc/self/maps")
        .expect("read /proc/self/maps")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A hand-made shmpipe peer: speaks the `Listener` handshake byte by byte
/// and builds its own regions, so a test can make it lie about anything.
///
/// The handshake is `shmpipe::handshake` (see its diagram): the server
/// sends a verdict hello without descriptors; the client sends a hello
/// with three descriptors: the region it writes for the pipe it sends on
/// (writer region: control block + data), the region it writes for the
/// pipe it receives on (reader region: the head), and one end of a
/// socketpair whose other end it keeps as the liveness/wake channel of the
/// pipe it sends on; the server answers with its own three.
pub mod raw {
    use std::io;
    use std::mem::MaybeUninit;
    use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
    use std::os::unix::net::UnixStream;
    use std::path::Path;
    use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
    use std::time::Duration;

    use rustix::fs::{MemfdFlags, SealFlags};
    use rustix::mm::{MapFlags, ProtFlags};
    use rustix::net::{
        AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
        SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
    };
    use shmpipe::handshake::{self, Hello, HELLO_LEN};
    use shmpipe_ring::layout::{offset, Role, DATA_OFFSET, MAGIC, READER_REGION_LEN, VERSION};

    pub const WRITER: u32 = Role::Writer as u32;
    pub const READER: u32 = Role::Reader as u32;

    /// A hello with `status` for a ring of `capacity` bytes, accepting a
    /// peer ring of any size.
    pub fn hello(status: u8, capacity: u64) -> [u8; HELLO_LEN] {
        Hello {
            status,
            capacity,
            max_capacity: u64::MAX,
        }
        .encode()
    }

    /// Sends `bytes` with `fds` attached (SCM_RIGHTS).
    pub fn send_msg(sock: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(32))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !fds.is_empty() {
            assert!(control.push(SendAncillaryMessage::ScmRights(fds)));
        }
        let iov = [io::IoSlice::new(bytes)];
        rustix::net::sendmsg(sock, &iov, &mut control, SendFlags::NOSIGNAL)?;
        Ok(())
    }

    /// Receives up to `buf.len()` bytes and any descriptors (CLOEXEC).
    pub fn recv_msg(sock: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(32))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let mut iov = [io::IoSliceMut::new(buf)];
        let msg = rustix::net::recvmsg(sock, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC)?;
        let mut fds = Vec::new();
        for m in control.drain() {
            if let RecvAncillaryMessage::ScmRights(rights) = m {
                fds.extend(rights);
            }
        }
        Ok((msg.bytes, fds))
    }

    /// A socketpair like the library's wake channel.
    pub fn socket_pair() -> (OwnedFd, OwnedFd) {
        rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .expect("socketpair")
    }

    /// Sends wake bytes without blocking; errors (full, closed) are ignored.
    pub fn poke(sock: BorrowedFd<'_>, n: usize) {
        let buf = vec![1u8; n.max(1)];
        let _ = rustix::net::send(sock, &buf, SendFlags::DONTWAIT | SendFlags::NOSIGNAL);
    }

    /// Connects to a listener and reads its verdict; returns the stream and
    /// the verdict.
    pub fn dial(path: &Path) -> io::Result<(UnixStream, Hello)> {
        let stream = UnixStream::connect(path)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut msg = [0u8; HELLO_LEN];
        let (n, _) = recv_msg(stream.as_fd(), &mut msg)?;
        assert_eq!(n, HELLO_LEN, "short verdict");
        Ok((stream, Hello::decode(&msg).expect("verdict")))
    }

    /// Reads the server's hello and its three descriptors.
    pub fn server_hello(stream: &UnixStream) -> io::Result<[OwnedFd; 3]> {
        let mut msg = [0u8; HELLO_LEN];
        let (n, fds) = recv_msg(stream.as_fd(), &mut msg)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let hello = Hello::decode(&msg[..n])?;
        if hello.status != handshake::STATUS_OK {
            return Err(io::Error::other(format!(
                "server says {}",
                hello.status as char
            )));
        }
        Ok(fds.try_into().expect("the server sends three descriptors"))
    }

    /// Whether the other side of `stream` closed it (reads until EOF or
    /// an error; bytes sent before the close are skipped).
    pub fn closed_by_peer(stream: &UnixStream) -> bool {
        let mut buf = [0u8; 64];
        loop {
            match recv_msg(stream.as_fd(), &mut buf) {
                Ok((0, _)) => return true,
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
    }

    /// A memfd of ours with a writable shared mapping: the hostile peer
    /// keeps write access to everything it hands over. All accesses are
    /// atomic (relaxed unless said), so a racing thread in the same hostile
    /// process is no data race.
    #[derive(Debug)]
    pub struct Region {
        pub fd: OwnedFd,
        ptr: *mut u8,
        pub len: usize,
    }

    // SAFETY: the mapping is only accessed through atomics.
    unsafe impl Send for Region {}
    // SAFETY: as above.
    unsafe impl Sync for Region {}

    impl Region {
        /// A memfd of `len` bytes, mapped writable, then sealed with `seals`
        /// (`None`: created without `ALLOW_SEALING`).
        pub fn new(len: usize, seals: Option<SealFlags>) -> Region {
            let flags = if seals.is_some() {
                MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING
            } else {
                MemfdFlags::CLOEXEC
            };
            let fd = rustix::fs::memfd_create("hostile", flags).expect("memfd_create");
            rustix::fs::ftruncate(&fd, len as u64).expect("ftruncate");
            let map_len = len.max(1);
            // SAFETY: a fresh shared mapping at an address the kernel picks
            // aliases nothing; we unmap exactly it in Drop. (A zero-length
            // memfd is mapped for one page; it is never touched.)
            let ptr = unsafe {
                rustix::mm::mmap(
                    std::ptr::null_mut(),
                    map_len,
                    ProtFlags::READ | ProtFlags::WRITE,
                    MapFlags::SHARED,
                    &fd,
                    0,
                )
            }
            .expect("mmap") as *mut u8;
            if let Some(s) = seals {
                rustix::fs::fcntl_add_seals(&fd, s).expect("add seals");
            }
            Region { fd, ptr, len }
        }

        /// A second writable mapping of a region of ours (for a racing thread).
        pub fn alias(fd: OwnedFd) -> Region {
            let len = rustix::fs::fstat(&fd).expect("fstat").st_size as usize;
            // SAFETY: a fresh shared mapping, unmapped exactly in Drop.
            let ptr = unsafe {
                rustix::mm::mmap(
                    std::ptr::null_mut(),
                    len.max(1),
                    ProtFlags::READ | ProtFlags::WRITE,
                    MapFlags::SHARED,
                    &fd,
                    0,
                )
            }
            .expect("mmap") as *mut u8;
            Region { fd, ptr, len }
        }

        /// The seals the library itself puts on a connection's regions.
        pub fn sealed(len: usize) -> Region {
            Region::new(
                len,
                Some(SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL),
            )
        }

        /// A writer region for a ring of `capacity` bytes, with a valid
        /// header, as long as shmpipe makes one: the ring's part rounded up
        /// to a page, then the mark page only its holders map.
        pub fn writer(capacity: u64) -> Region {
            let ring = (DATA_OFFSET + capacity as usize).next_multiple_of(4096);
            let r = Region::sealed(ring + 4096);
            r.init(WRITER, capacity);
            r
        }

        /// A reader region with a valid header, and its mark page.
        pub fn reader(capacity: u64) -> Region {
            let r = Region::sealed(READER_REGION_LEN + 4096);
            r.init(READER, capacity);
            r
        }

        /// Writes a valid header (what `Control::init` writes).
        pub fn init(&self, role: u32, capacity: u64) {
            self.store_u64(offset::MAGIC, MAGIC);
            self.store_u32(offset::VERSION, VERSION);
            self.store_u32(offset::ROLE, role);
            self.store_u64(offset::CAPACITY, capacity);
        }

        fn at<T>(&self, off: usize) -> *mut T {
            assert!(off + std::mem::size_of::<T>() <= self.len, "offset {off}");
            assert_eq!(off % std::mem::align_of::<T>(), 0);
            // SAFETY: inside the mapping (checked above).
            unsafe { self.ptr.add(off).cast() }
        }

        pub fn store_u64(&self, off: usize, v: u64) {
            // SAFETY: in bounds and aligned (`at`); the mapping lives as
            // long as `self`; every access to it is atomic.
            unsafe { AtomicU64::from_ptr(self.at(off)) }.store(v, Ordering::Release);
        }

        pub fn load_u64(&self, off: usize) -> u64 {
            // SAFETY: as in store_u64.
            unsafe { AtomicU64::from_ptr(self.at(off)) }.load(Ordering::Acquire)
        }

        pub fn store_u32(&self, off: usize, v: u32) {
            // SAFETY: as in store_u64.
            unsafe { AtomicU32::from_ptr(self.at(off)) }.store(v, Ordering::Relaxed);
        }

        pub fn store_u8(&self, off: usize, v: u8) {
            // SAFETY: as in store_u64.
            unsafe { AtomicU8::from_ptr(self.at(off)) }.store(v, Ordering::Relaxed);
        }

        /// Writes `bytes` into the ring data at free-running position `pos`
        /// (masked, wrapping), for a ring of `capacity` bytes.
        pub fn ring_write(&self, capacity: u64, pos: u64, bytes: &[u8]) {
            for (k, &b) in bytes.iter().enumerate() {
                let slot = (pos.wrapping_add(k as u64) & (capacity - 1)) as usize;
                self.store_u8(DATA_OFFSET + slot, b);
            }
        }

        pub fn index(&self) -> u64 {
            self.load_u64(offset::INDEX)
        }

        /// Publishes an index (Release, as the library's publish).
        pub fn set_index(&self, v: u64) {
            self.store_u64(offset::INDEX, v);
        }
    }

    impl Drop for Region {
        fn drop(&mut self) {
            // SAFETY: exactly the range mmap returned in `new`.
            let _ = unsafe { rustix::mm::munmap(self.ptr.cast(), self.len.max(1)) };
        }
    }

    /// A read-only shared mapping of a region the other side sent us.
    #[derive(Debug)]
    pub struct View {
        ptr: *const u8,
        pub len: usize,
    }

    // SAFETY: only accessed through atomics.
    unsafe impl Send for View {}
    // SAFETY: as above.
    unsafe impl Sync for View {}

    impl View {
        pub fn new(fd: BorrowedFd<'_>) -> io::Result<View> {
            let len = rustix::fs::fstat(fd)?.st_size as usize;
            // SAFETY: a fresh read-only mapping; the memfd is sealed against
            // shrinking by its owner, so it never faults.
            let ptr = unsafe {
                rustix::mm::mmap(
                    std::ptr::null_mut(),
                    len,
                    ProtFlags::READ,
                    MapFlags::SHARED,
                    fd,
                    0,
                )
            }? as *const u8;
            Ok(View { ptr, len })
        }

        pub fn ptr(&self) -> *const u8 {
            self.ptr
        }

        pub fn load_u64(&self, off: usize) -> u64 {
            assert!(off + 8 <= self.len && off % 8 == 0);
            // SAFETY: in bounds, aligned, mapped while self lives; an
            // atomic load through a read-only mapping never writes.
            unsafe { AtomicU64::from_ptr(self.ptr.add(off) as *mut u64) }.load(Ordering::Acquire)
        }

        pub fn load_u8(&self, off: usize) -> u8 {
            assert!(off < self.len);
            // SAFETY: as in load_u64.
            unsafe { AtomicU8::from_ptr(self.ptr.add(off) as *mut u8) }.load(Ordering::Relaxed)
        }

        pub fn index(&self) -> u64 {
            self.load_u64(offset::INDEX)
        }
    }

    impl Drop for View {
        fn drop(&mut self) {
            // SAFETY: exactly the range mmap returned in `new`.
            let _ = unsafe { rustix::mm::munmap(self.ptr as *mut _, self.len) };
        }
    }

    /// A connected hand-made client: both its regions (writable), the
    /// server's regions (read-only views) and both wake sockets.
    #[derive(Debug)]
    pub struct Peer {
        pub stream: UnixStream,
        pub capacity: u64,
        /// Our writer region: tail and data of the pipe to the server.
        pub w: Region,
        /// Our reader region: head of the pipe from the server.
        pub r: Region,
        /// Our end of the wake/liveness socket of the pipe we write; the
        /// server's Reader sleeps on the other end.
        pub w_sock: Option<OwnedFd>,
        /// The server's socket end for the pipe it writes (its Writer
        /// sleeps on the other end).
        pub r_sock: Option<OwnedFd>,
        /// The server's writer region (data it sends us) and reader region
        /// (its head of our pipe), as received.
        pub server_w: OwnedFd,
        pub server_r: OwnedFd,
    }

    impl Peer {
        /// Does the handshake with regions `w`, `r` (their headers are
        /// whatever the caller left in them) and waits until the server
        /// has attached (or refused them).
        pub fn connect_with(path: &Path, capacity: u64, w: Region, r: Region) -> io::Result<Peer> {
            let (stream, verdict) = dial(path)?;
            if verdict.status != handshake::STATUS_OK {
                return Err(io::ErrorKind::PermissionDenied.into());
            }
            let (w_sock, theirs) = socket_pair();
            send_msg(
                stream.as_fd(),
                &hello(handshake::STATUS_OK, capacity),
                &[w.fd.as_fd(), r.fd.as_fd(), theirs.as_fd()],
            )?;
            let [server_w, server_r, r_sock] = server_hello(&stream)?;
            // The server closes the handshake stream once it has attached
            // to our regions (or refused them): only then may we start
            // lying, or our lies would merely fail the handshake.
            if !closed_by_peer(&stream) {
                return Err(io::ErrorKind::TimedOut.into());
            }
            Ok(Peer {
                stream,
                capacity,
                w,
                r,
                w_sock: Some(w_sock),
                r_sock: Some(r_sock),
                server_w,
                server_r,
            })
        }

        /// An honest handshake for rings of `capacity` bytes (which must be
        /// the listener's capacity).
        pub fn connect(path: &Path, capacity: u64) -> io::Result<Peer> {
            Peer::connect_with(
                path,
                capacity,
                Region::writer(capacity),
                Region::reader(capacity),
            )
        }

        /// Wakes the server's Reader (a byte on our writer-side socket).
        pub fn wake_reader(&self, n: usize) {
            if let Some(s) = &self.w_sock {
                poke(s.as_fd(), n);
            }
        }

        /// Blocks until the server's Reader is gone (its end of our
        /// writer-side socket hangs up).
        pub fn wait_hangup(&self) {
            if let Some(s) = &self.w_sock {
                let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 64];
                while let Ok(((got, _), _)) = rustix::net::recv(s, &mut buf[..], RecvFlags::empty())
                {
                    if got.is_empty() {
                        break;
                    }
                }
            }
        }

        /// Wakes the server's Writer.
        pub fn wake_writer(&self, n: usize) {
            if let Some(s) = &self.r_sock {
                poke(s.as_fd(), n);
            }
        }
    }
}
