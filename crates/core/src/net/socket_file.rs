//! The listener's socket file: binding it, reclaiming one that a dead
//! listener left behind, and removing it when the listener goes, only
//! while it is still the listener's own.
//!
//! Why the file appears only once it accepts: `bind` makes the file and
//! `listen` comes after, and a `connect` in between is refused. A client
//! that waits for the file (as scripts and tests wait for a server) could
//! be refused by a server that is starting, and a reclaimer (below) could
//! take the starting server's file for stale. So the socket is bound and
//! listening under a staging name in the same directory first, with its
//! final mode, and then hard-linked at the path, which fails with
//! `EEXIST` where the path is taken, as `bind` does. Where that cannot be
//! done (a path too long for a staging name beside it, a file system
//! without hard links), the socket is bound at the path directly. A
//! process killed between the two steps leaves its staging file behind;
//! it serves no one and is never taken for the path.
//!
//! Why reclaim: a socket file outlives its listener when the process is
//! killed (SIGKILL, a crash, a Ctrl-C the program does not catch), and a
//! new `bind` at that path then fails with `EADDRINUSE` although nobody
//! listens there. Such a file serves no one: a `connect` to it is refused
//! (`ECONNREFUSED`). So, as the `interprocess` crate does, a `bind` that
//! finds the path taken connects to it first: refused means stale, and
//! the file is removed and the bind made again; a listener that answers
//! is a server still running, and the bind fails with an error that
//! names the path and says so. Anything but a socket (a regular file, a
//! directory, a symlink) is never removed, whatever it is.
//!
//! Races: two servers that find the same stale file at once take turns
//! (an exclusive `flock` on the directory that holds it, which only
//! reclaimers take), and each checks again under the lock, so the second
//! finds the first's live listener rather than unlinking it. The file is
//! removed only if it is still the very inode probed (device and inode
//! compared just before `unlink`); Linux has no unlink-if-this-inode, so
//! a process that replaces it in the microseconds between that check and
//! the `unlink`, without taking the lock, can still lose its name.

use std::fs;
use std::io::{self, ErrorKind};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use rustix::fs::{FlockOperation, Mode, OFlags};
use rustix::io::Errno;
use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

use crate::error;

/// Which file a socket file is: its device and inode.
pub(super) type Identity = (u64, u64);

/// What a connect to a socket file says about it.
enum Probe {
    /// Refused: no listener behind it.
    Stale,
    /// Accepted, or queued: a listener is there.
    Live,
    /// Anything else (not ours to enter, say): left alone.
    Unknown(io::Error),
}

/// Binds a listening socket at `path`, reclaiming a stale socket file
/// there (see the module's doc), with the file's permission bits `mode`;
/// returns it with its file's identity.
pub(super) fn bind(path: &Path, mode: u32) -> io::Result<(UnixListener, Identity)> {
    // Each turn either fails with the reason or frees the path of a stale
    // file; another server may bind it first (then the next turn finds it
    // listening), so a few turns settle every race but endless churn.
    let mut turns = 0;
    let socket = loop {
        match bind_listening(path, mode) {
            Ok(socket) => break socket,
            Err(e) if e.kind() == ErrorKind::AddrInUse && turns < 3 => {
                turns += 1;
                clear_stale(path)?;
            }
            Err(e) if e.kind() == ErrorKind::AddrInUse => {
                return Err(error::addr_in_use(format!(
                    "{} is in use: other processes keep taking it; try again",
                    path.display()
                )))
            }
            Err(e) => return Err(e),
        }
    };
    let meta = fs::symlink_metadata(path)?;
    Ok((socket, (meta.dev(), meta.ino())))
}

/// Binds a listening socket with mode `mode` whose file appears at `path`
/// only once it listens; `AddrInUse` if something is at `path`.
fn bind_listening(path: &Path, mode: u32) -> io::Result<UnixListener> {
    let tries = if path.file_name().is_some() { 4 } else { 0 };
    for _ in 0..tries {
        let staging = staging_name(path);
        let socket = match UnixListener::bind(&staging) {
            Ok(socket) => socket,
            // Left by a process killed while binding: another name.
            Err(e) if e.kind() == ErrorKind::AddrInUse => continue,
            // Too long for a socket address, or not allowed here: the
            // path's own bind says what is wrong, if anything.
            Err(_) => break,
        };
        let linked = fs::set_permissions(&staging, fs::Permissions::from_mode(mode))
            .and_then(|()| fs::hard_link(&staging, path));
        let _ = fs::remove_file(&staging);
        return match linked {
            Ok(()) => Ok(socket),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                Err(io::Error::from(ErrorKind::AddrInUse))
            }
            Err(_) => break, // no hard links here: bind in place
        };
    }
    let socket = UnixListener::bind(path)?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
    Ok(socket)
}

/// A name beside `path` that no other binder in this process or any live
/// process uses now.
fn staging_name(path: &Path) -> std::path::PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".shmpipe-{}-{n}", std::process::id()))
}

/// Removes the socket file at `path` if it is still `ours`: a listener
/// whose path was taken over (by a copy of it in another process, say,
/// dropped later) must not remove the new owner's file.
pub(super) fn remove(path: &Path, ours: Identity) {
    if let Ok(meta) = fs::symlink_metadata(path) {
        if meta.file_type().is_socket() && (meta.dev(), meta.ino()) == ours {
            let _ = fs::remove_file(path);
        }
    }
}

/// A bind found `path` taken: removes it if it is a socket file nobody
/// listens on (or finds it gone), or says why it stays.
fn clear_stale(path: &Path) -> io::Result<()> {
    let _turn = lock_dir(path).map_err(|e| {
        error::annotated(
            e,
            format_args!(
                "{} is in use, and its directory cannot be locked to check it",
                path.display()
            ),
        )
    })?;
    let Some(before) = socket_identity(path)? else {
        return Ok(()); // gone since
    };
    match probe(path) {
        Probe::Live => Err(error::addr_in_use(format!(
            "{} is in use: another server is listening there (stop it, or choose another path)",
            path.display()
        ))),
        Probe::Unknown(e) => Err(error::addr_in_use(format!(
            "{} is in use, and whether a server listens there is unknown ({e}); \
             remove it if none does",
            path.display()
        ))),
        Probe::Stale if socket_identity(path)? != Some(before) => Ok(()), // replaced: look again
        Probe::Stale => match fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(error::annotated(
                e,
                format_args!(
                    "{} is a stale socket file (nobody listens there) and removing it failed",
                    path.display()
                ),
            )),
        },
    }
}

/// The identity of the socket file at `path`; `None` if nothing is
/// there; an error naming the path if something else than a socket is.
fn socket_identity(path: &Path) -> io::Result<Option<Identity>> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if !meta.file_type().is_socket() {
        return Err(error::already_exists(format!(
            "{} exists and is not a socket; it is left alone (choose another path, \
             or remove it yourself)",
            path.display()
        )));
    }
    Ok(Some((meta.dev(), meta.ino())))
}

/// Connects to the socket file at `path` without waiting (a listener
/// whose queue is full answers `EAGAIN`, not a wait). A running shmpipe
/// listener counts the probe as a client that hung up before its hello.
fn probe(path: &Path) -> Probe {
    let attempt = || -> rustix::io::Result<()> {
        let fd = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            None,
        )?;
        rustix::net::connect(&fd, &SocketAddrUnix::new(path)?)
    };
    match attempt() {
        Ok(()) | Err(Errno::INPROGRESS | Errno::AGAIN) => Probe::Live,
        Err(Errno::CONNREFUSED) => Probe::Stale,
        Err(e) => Probe::Unknown(e.into()),
    }
}

/// Takes this process's turn at reclaiming in the directory that holds
/// `path`: an exclusive `flock` on the directory, held until the returned
/// descriptor is dropped.
fn lock_dir(path: &Path) -> io::Result<std::os::fd::OwnedFd> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    loop {
        match rustix::fs::flock(&fd, FlockOperation::LockExclusive) {
            Ok(()) => return Ok(fd),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}
