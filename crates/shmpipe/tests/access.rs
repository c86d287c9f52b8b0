//! Access: no shared memory reachable by name; the seals that keep each
//! side's pages its own, tried by a hostile peer holding the other side's
//! descriptors; the client's check of the server's user.
//!
//! (That a peer of another uid is refused by the `Listener` by default is
//! `tests/listener.rs::other_user_refused_by_default`.)

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

use common::raw::{self, Peer};
use common::{fd_target, fork, listener, maps, open_fds, serial, sock_path, watchdog};
use rustix::fs::SealFlags;
use rustix::io::Errno;
use rustix::mm::{MapFlags, MprotectFlags, ProtFlags};
use shmpipe_ring::layout::offset;

const LIMIT: Duration = Duration::from_secs(60);
const CAP: u64 = 4096;

fn dev_shm() -> BTreeSet<String> {
    match std::fs::read_dir("/dev/shm") {
        Ok(d) => d
            .filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
            .collect(),
        Err(_) => BTreeSet::new(),
    }
}

/// A listener with small rings and a connection to it from this process.
fn local_connection(tag: &str) -> (shmpipe::Listener, shmpipe::Connection, shmpipe::Connection) {
    let path = sock_path(tag);
    let mut listener = shmpipe::Listener::bind(&path).unwrap();
    let mut opts = shmpipe::Options::new();
    opts.capacity(CAP as usize);
    listener.set_options(opts.clone());
    let client = std::thread::spawn(move || opts.connect(&path).unwrap());
    let server = listener.accept().unwrap();
    (listener, server, client.join().unwrap())
}

/// Nothing under /dev/shm, no named file: every region is a memfd, and
/// shows as one in /proc/self/maps and /proc/self/fd.
#[test]
fn no_shared_memory_reachable_by_name() {
    let _s = serial();
    let before = dev_shm();
    let fds_before: BTreeSet<i32> = open_fds().into_iter().collect();
    let p = shmpipe::pipe().unwrap();
    let m = shmpipe::message_pipe().unwrap();
    let (_l, s, c) = local_connection("access-names");
    assert_eq!(
        dev_shm(),
        before,
        "shmpipe created something under /dev/shm"
    );
    let shared: Vec<String> = maps()
        .into_iter()
        .filter(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|p| p.ends_with('s'))
        })
        .collect();
    assert!(!shared.is_empty());
    for l in &shared {
        let file = l.split_whitespace().nth(5).unwrap_or("");
        assert!(
            file.starts_with("/memfd:"),
            "a shared mapping that is not a memfd: {l}"
        );
        assert!(!l.contains("/dev/shm"), "{l}");
    }
    for fd in open_fds() {
        if !fds_before.contains(&fd) {
            let t = fd_target(fd);
            assert!(
                // (Pipes: the ends' wake pipes; an epoll instance: the
                // listener's readiness descriptor; /dev/null: its spare,
                // for running out of descriptors.)
                t.starts_with("/memfd:shmpipe")
                    || t.starts_with("pipe:")
                    || t.starts_with("socket:")
                    || t == "anon_inode:[eventpoll]"
                    || t == "/dev/null",
                "descriptor {fd} -> {t}"
            );
        }
    }
    drop((p, m, s, c));
}

/// In this process, with both sides of a connection here: each region is
/// mapped writable once (by its owner) and read-only once (by the peer),
/// and nothing else.
#[test]
fn peer_regions_are_mapped_read_only() {
    let _s = serial();
    let before: BTreeSet<String> = maps().into_iter().collect();
    let (_l, s, c) = local_connection("access-ro");
    let mut by_inode: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for l in maps().into_iter().filter(|l| !before.contains(l)) {
        if !l.contains("/memfd:shmpipe") {
            continue;
        }
        let f: Vec<&str> = l.split_whitespace().collect();
        by_inode
            .entry(f[4].to_string())
            .or_default()
            .push(f[1].to_string());
    }
    assert_eq!(by_inode.len(), 4, "two pipes of two regions: {by_inode:?}");
    for (inode, mut perms) in by_inode {
        perms.sort();
        assert_eq!(perms, ["r--s", "rw-s"], "region {inode}");
    }
    drop((s, c));
}

/// A `pipe()`'s regions may be mapped writable by whoever holds them (no
/// `F_SEAL_FUTURE_WRITE`), and its reader maps the writer's region
/// writable, for speed (see `setup::open_peer_view`): the ring's part of
/// it, without the mark page that only a holder maps, and nothing of the
/// reader's region.
#[test]
fn pipe_reader_maps_the_writers_ring_writable_without_its_mark() {
    let _s = serial();
    let before: BTreeSet<String> = maps().into_iter().collect();
    let (r, w) = shmpipe::pipe().unwrap();
    let mut by_name: BTreeMap<(String, String), Vec<(String, usize)>> = BTreeMap::new();
    for l in maps().into_iter().filter(|l| !before.contains(l)) {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 6 || !f[5].starts_with("/memfd:shmpipe") {
            continue;
        }
        let (start, end) = f[0].split_once('-').unwrap();
        let len =
            usize::from_str_radix(end, 16).unwrap() - usize::from_str_radix(start, 16).unwrap();
        let key = (f[5].to_string(), f[4].to_string());
        by_name
            .entry(key)
            .or_default()
            .push((f[1].to_string(), len));
    }
    assert_eq!(by_name.len(), 2, "one pipe of two regions: {by_name:?}");
    for ((name, _), mut maps) in by_name {
        maps.sort();
        let data = shmpipe::DEFAULT_CAPACITY;
        if name.starts_with("/memfd:shmpipe-data") {
            // The reader's view of the ring, the writer's whole region.
            assert_eq!(
                maps,
                [
                    ("rw-s".into(), 4096 + data),
                    ("rw-s".into(), 2 * 4096 + data)
                ],
                "{name}"
            );
        } else {
            assert_eq!(
                maps,
                [("r--s".into(), 4096), ("rw-s".into(), 2 * 4096)],
                "{name}"
            );
        }
    }
    drop((r, w));
}

/// The seals a region carries, for a descriptor this process holds.
fn seals_of(fd: i32) -> SealFlags {
    // SAFETY: `fd` is one of ours, open for the duration of the call (the
    // caller holds the pipe or connection that owns it).
    rustix::fs::fcntl_get_seals(unsafe { BorrowedFd::borrow_raw(fd) }).unwrap()
}

/// Connection regions are sealed SHRINK | GROW | SEAL | FUTURE_WRITE; a
/// pipe() made in one process lacks FUTURE_WRITE (both ends are ours, and
/// a forked or spawned holder of an end must be able to map its own
/// region writable), as SECURITY.md says.
#[test]
fn connection_regions_are_future_write_sealed_pipe_regions_not() {
    let _s = serial();
    let size = SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL;
    let before: BTreeSet<i32> = open_fds().into_iter().collect();
    let p = shmpipe::pipe().unwrap();
    let memfds: Vec<i32> = open_fds()
        .into_iter()
        .filter(|fd| !before.contains(fd) && fd_target(*fd).starts_with("/memfd:"))
        .collect();
    assert!(!memfds.is_empty());
    for &fd in &memfds {
        let s = seals_of(fd);
        assert!(s.contains(size), "pipe region seals {s:?}");
        assert!(
            !s.contains(SealFlags::FUTURE_WRITE),
            "pipe region seals {s:?}"
        );
    }
    drop(p);
    let before: BTreeSet<i32> = open_fds().into_iter().collect();
    let (_l, s, c) = local_connection("access-seals");
    let memfds: Vec<i32> = open_fds()
        .into_iter()
        .filter(|fd| !before.contains(fd) && fd_target(*fd).starts_with("/memfd:"))
        .collect();
    // Each of the four ends holds its own region and its peer's.
    assert_eq!(memfds.len(), 8, "{memfds:?}");
    for &fd in &memfds {
        let s = seals_of(fd);
        assert!(
            s.contains(size | SealFlags::FUTURE_WRITE),
            "connection region seals {s:?}"
        );
    }
    drop((s, c));
}

/// Everything a hostile peer can try on the regions the server handed it
/// (its data+tail region and its head region): all refused by the kernel.
/// Returns a description of the first thing that was allowed.
fn try_to_write(fd: BorrowedFd<'_>) -> Result<(), String> {
    let len = rustix::fs::fstat(fd).unwrap().st_size as usize;
    // A writable shared mapping: EPERM (F_SEAL_FUTURE_WRITE).
    // SAFETY: a fresh mapping (if the kernel allowed it, which it must not);
    // unmapped at once.
    match unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED,
            fd,
            0,
        )
    } {
        Err(Errno::PERM) => {}
        Err(e) => {
            return Err(format!(
                "mmap(PROT_WRITE, MAP_SHARED): {e} instead of EPERM"
            ))
        }
        Ok(p) => {
            // SAFETY: exactly the mapping just made.
            let _ = unsafe { rustix::mm::munmap(p, len) };
            return Err("mmap(PROT_WRITE, MAP_SHARED) succeeded".into());
        }
    }
    // A read-only shared mapping is fine; making it writable is not.
    let ro = raw::View::new(fd).map_err(|e| format!("read-only mmap failed: {e}"))?;
    // SAFETY: changes the protection of our own mapping only (it is
    // unmapped right after, when `ro` drops).
    let r = unsafe {
        rustix::mm::mprotect(
            ro.ptr() as *mut _,
            ro.len,
            MprotectFlags::READ | MprotectFlags::WRITE,
        )
    };
    drop(ro);
    match r {
        Err(Errno::ACCESS) => {}
        Err(e) => return Err(format!("mprotect(PROT_WRITE): {e} instead of EACCES")),
        Ok(()) => return Err("mprotect(PROT_WRITE) succeeded".into()),
    }
    // write(2) and pwrite(2): EPERM.
    match rustix::io::pwrite(fd, &[0xFF; 8], 128) {
        Err(Errno::PERM) => {}
        Err(Errno::BADF) => {} // if the descriptor itself is read-only
        other => return Err(format!("pwrite: {other:?} instead of EPERM")),
    }
    // Resizing either way: EPERM (F_SEAL_SHRINK, F_SEAL_GROW).
    for new_len in [0, len as u64 - 1, len as u64 + 4096] {
        match rustix::fs::ftruncate(fd, new_len) {
            Err(Errno::PERM) | Err(Errno::INVAL) => {}
            other => return Err(format!("ftruncate({new_len}): {other:?} instead of EPERM")),
        }
    }
    // fallocate past the end: EPERM (F_SEAL_GROW).
    match rustix::fs::fallocate(fd, rustix::fs::FallocateFlags::empty(), len as u64, 4096) {
        Err(Errno::PERM) => {}
        other => return Err(format!("fallocate: {other:?} instead of EPERM")),
    }
    // Punching a hole (zeroing the owner's pages): EPERM (FUTURE_WRITE).
    let punch = rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE;
    match rustix::fs::fallocate(fd, punch, 0, len as u64) {
        Err(Errno::PERM) => {}
        other => return Err(format!("fallocate(PUNCH_HOLE): {other:?} instead of EPERM")),
    }
    // The seals themselves cannot be changed (F_SEAL_SEAL).
    match rustix::fs::fcntl_add_seals(fd, SealFlags::WRITE) {
        Err(Errno::PERM) => {}
        other => return Err(format!("F_ADD_SEALS: {other:?} instead of EPERM")),
    }
    Ok(())
}

/// A hand-made client receives the server's regions in the handshake and
/// tries every way to write them; the kernel refuses each. Then a write
/// through a read-only mapping faults: the (grand)child dies by SIGSEGV.
#[test]
fn peer_cannot_write_our_pages() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (path, listener) = listener("access-seal", CAP as usize);
    let child = fork({
        let path = path.clone();
        move || {
            let peer = Peer::connect(&path, CAP).unwrap();
            for (name, fd) in [("data", &peer.server_w), ("head", &peer.server_r)] {
                if let Err(e) = try_to_write(fd.as_fd()) {
                    eprintln!("server's {name} region: {e}");
                    return 1;
                }
            }
            // A store through a read-only mapping of the server's data
            // page: the grandchild must die of SIGSEGV.
            let view = raw::View::new(peer.server_w.as_fd()).unwrap();
            let target = view.ptr() as usize + offset::INDEX;
            let grandchild = fork(move || {
                // SAFETY: deliberately unsound-looking but harmless: the
                // page is mapped read-only, so this store faults and the
                // process dies before anything is written.
                unsafe { std::ptr::write_volatile(target as *mut u64, 0xDEAD) };
                0
            });
            let status = grandchild.wait(LIMIT);
            if status != 128 + libc::SIGSEGV {
                eprintln!("a write through a read-only mapping ended with {status}");
                return 2;
            }
            // The server's tail is untouched (still what it published).
            if view.index() == 0xDEAD {
                return 3;
            }
            peer.wait_hangup();
            0
        }
    });
    let mut conn = listener.accept().unwrap();
    conn.writer.write_all(b"still mine").unwrap();
    drop(conn);
    assert_eq!(child.wait(LIMIT), 0, "see the child's message above");
}

/// A private writable mapping of the peer's region is allowed (copy on
/// write), but what is written there never reaches the owner's pages.
#[test]
fn private_copy_of_peer_pages_stays_private() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (path, listener) = listener("access-private", CAP as usize);
    let child = fork({
        let path = path.clone();
        move || {
            let peer = Peer::connect(&path, CAP).unwrap();
            let fd = peer.server_w.as_fd();
            let len = rustix::fs::fstat(fd).unwrap().st_size as usize;
            // SAFETY: a fresh private mapping, unmapped below; if the
            // kernel refuses it, nothing to check.
            let Ok(p) = (unsafe {
                rustix::mm::mmap(
                    std::ptr::null_mut(),
                    len,
                    ProtFlags::READ | ProtFlags::WRITE,
                    MapFlags::PRIVATE,
                    fd,
                    0,
                )
            }) else {
                return 0;
            };
            // SAFETY: inside our private mapping; aligned.
            unsafe {
                std::ptr::write_volatile(p.cast::<u8>().add(offset::INDEX).cast::<u64>(), 1 << 40)
            };
            // SAFETY: inside our private mapping.
            unsafe { std::ptr::write_bytes(p.cast::<u8>().add(4096), 0xEE, CAP as usize) };
            // SAFETY: exactly the mapping made above.
            let _ = unsafe { rustix::mm::munmap(p, len) };
            let view = raw::View::new(fd).unwrap();
            if view.index() == 1 << 40 || view.load_u8(4096) == 0xEE {
                return 1;
            }
            // Read the server's message honestly, through the shared view.
            while view.index() < 5 {
                std::thread::yield_now();
            }
            let got: Vec<u8> = (0..5).map(|i| view.load_u8(4096 + i)).collect();
            if got != b"hello" {
                return 2;
            }
            peer.wait_hangup();
            0
        }
    });
    let mut conn = listener.accept().unwrap();
    conn.writer.write_all(b"hello").unwrap();
    // Our own view of what we wrote is unchanged by the child's copy.
    let mut buf = [0u8; 1];
    conn.reader
        .set_read_timeout(Some(Duration::from_millis(10)))
        .unwrap();
    assert_eq!(
        conn.reader.read(&mut buf).unwrap_err().kind(),
        ErrorKind::TimedOut
    );
    std::thread::sleep(Duration::from_millis(50));
    drop(conn);
    assert_eq!(child.wait(LIMIT), 0);
}

/// The client refuses a listener run by another (non-root) user: the
/// server's uid, from SO_PEERCRED, must be ours or root's.
#[test]
fn client_refuses_server_of_other_uid() {
    if rustix::process::geteuid().as_raw() != 0 {
        eprintln!("skipped: needs root to change uid");
        return;
    }
    let _s = serial();
    let _w = watchdog(LIMIT);
    let path = sock_path("access-uid");
    let (mut ready_r, ready_w) = std::os::unix::net::UnixStream::pair().unwrap();
    let server = fork({
        let path = path.clone();
        move || {
            let mut ready_w = ready_w;
            // SAFETY: setgid/setuid in the forked child, before anything else.
            if unsafe { libc::setgid(65534) } != 0 || unsafe { libc::setuid(65534) } != 0 {
                return 3;
            }
            let listener = shmpipe::Listener::bind(&path).unwrap();
            ready_w.write_all(b"!").unwrap();
            let _ = listener.accept();
            0
        }
    });
    let mut b = [0u8; 1];
    ready_r.read_exact(&mut b).unwrap();
    let err = shmpipe::connect(&path).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{err}");
    drop(server);
    let _ = std::fs::remove_file(&path);
}
