//! Connections by filesystem path: `shmpipe_listen`, `shmpipe_accept`,
//! `shmpipe_connect`. Each connection is a pipe each way, and each side
//! learns the other's credentials as the kernel recorded them.

use std::ffi::{c_char, c_int};
use std::io::{self, ErrorKind};
use std::os::fd::{AsFd, AsRawFd};

use shmpipe::{Connection, Listener};

use crate::args;
use crate::error::{guard_int, guard_void, Errno};
use crate::handle::{self, handle, Guard, Handle, Prepare, Slot};
use crate::wait::SLICE;
use crate::{shmpipe_reader, shmpipe_receiver, shmpipe_sender, shmpipe_writer};

/// A listener bound to a filesystem path.
#[derive(Debug)]
#[repr(C)]
pub struct shmpipe_listener {
    magic: u32,
    guard: Guard,
    slot: Slot<Listener>,
    next: *mut shmpipe_listener,
}

handle!(shmpipe_listener, Listener, 0x5348_4C49); // "SHLI"

impl Prepare for Listener {
    fn prepare(&mut self) {
        // `accept` waits in `poll` itself, a slice at a time (see `accept`).
        self.set_nonblocking(true);
    }
}

/// Who is at the other end of a connection (`SO_PEERCRED`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct shmpipe_peer {
    /// Process id.
    pub pid: i32,
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

/// Binds a listener at `path`, accepting peers of this user. A socket file
/// left there by a listener that is gone is reclaimed; a live listener's
/// (-EADDRINUSE) or any other file (-EEXIST) is left alone. The socket
/// file is made mode 0600 and removed on close.
///
/// # Safety
///
/// `path` is NULL or a NUL-terminated string; `listener` is writable.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_listen(
    path: *const c_char,
    listener: *mut *mut shmpipe_listener,
) -> c_int {
    guard_int(|| {
        let out = args::out(listener)?;
        // SAFETY: the caller's promise.
        let path = unsafe { args::path(path)? };
        let l = Listener::bind(path).errno()?;
        // SAFETY: a checked out-pointer.
        unsafe { args::put(out, handle::open(l)) };
        Ok(0)
    })
}

/// The peer's credentials, stored if `peer` is not NULL.
///
/// # Safety
///
/// `peer` is NULL or writable.
unsafe fn tell_peer(conn: &Connection, peer: *mut shmpipe_peer) {
    if !peer.is_null() {
        let p = shmpipe_peer {
            pid: conn.peer.pid,
            uid: conn.peer.uid,
            gid: conn.peer.gid,
        };
        // SAFETY: the caller's promise.
        unsafe { args::put(peer, p) };
    }
}

/// The body of the accept and connect calls: checks the out-pointers,
/// opens the connection, and hands its two ends (as `split` makes them)
/// and the peer to C.
///
/// # Safety
///
/// `peer` is NULL or writable.
unsafe fn hand_over<A: Handle, B: Handle>(
    first: *mut *mut A,
    second: *mut *mut B,
    peer: *mut shmpipe_peer,
    open: impl FnOnce() -> Result<Connection, i32>,
    split: fn(Connection) -> (A::End, B::End),
) -> c_int {
    // SAFETY: the caller's promise.
    guard_int(|| unsafe {
        handle::open_pair(first, second, || {
            let conn = open()?;
            tell_peer(&conn, peer);
            Ok(split(conn))
        })
    })
}

/// The next peer's connection.
///
/// # Safety
///
/// `listener` is NULL or a listener handle.
unsafe fn accept(listener: *mut shmpipe_listener) -> Result<Connection, i32> {
    // SAFETY: the caller's promise.
    let mut u = unsafe { handle::using(listener)? };
    loop {
        let l = u.end()?;
        match l.accept() {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            done => return done.errno(),
        }
        let mut fd = libc::pollfd {
            fd: l.as_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // `poll(listener, POLLIN, SLICE)`: readable once a client connects
        // or a pending one speaks (see `Listener::accept`). The closing
        // mark is looked at once a slice, as in `wait`.
        // SAFETY: one pollfd, ours, for the call's duration.
        if unsafe { libc::poll(&mut fd, 1, SLICE.as_millis() as c_int) } < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != ErrorKind::Interrupted {
                return Err(crate::error::errno(&e));
            }
        }
        if u.closing() {
            return Err(libc::EBADF);
        }
    }
}

/// A connection to the listener at `path`.
///
/// # Safety
///
/// `path` is NULL or a NUL-terminated string.
unsafe fn connect(path: *const c_char) -> Result<Connection, i32> {
    // SAFETY: the caller's promise.
    shmpipe::connect(unsafe { args::path(path)? }).errno()
}

/// Waits for the next peer and completes the handshake: `reader` gets the
/// bytes it sends, `writer` sends to it, `peer` (if not NULL) says who it
/// is. Returns 0 or a negative errno.
///
/// # Safety
///
/// `listener` is NULL or a listener handle; `reader` and `writer` are
/// writable; `peer` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_accept(
    listener: *mut shmpipe_listener,
    reader: *mut *mut shmpipe_reader,
    writer: *mut *mut shmpipe_writer,
    peer: *mut shmpipe_peer,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { hand_over(reader, writer, peer, || accept(listener), Connection::split) }
}

/// Connects to the listener at `path` (which must run as this user or
/// root). Returns 0 or a negative errno (`-EACCES` if refused).
///
/// # Safety
///
/// `path` is NULL or a NUL-terminated string; `reader` and `writer` are
/// writable; `peer` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_connect(
    path: *const c_char,
    reader: *mut *mut shmpipe_reader,
    writer: *mut *mut shmpipe_writer,
    peer: *mut shmpipe_peer,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { hand_over(reader, writer, peer, || connect(path), Connection::split) }
}

/// As `shmpipe_accept`, with both pipes used for messages (the peer
/// connects with `shmpipe_connect_messages`; a side that reads messages
/// from a peer writing bytes gets `-EPROTO`).
///
/// # Safety
///
/// As `shmpipe_accept`.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_accept_messages(
    listener: *mut shmpipe_listener,
    receiver: *mut *mut shmpipe_receiver,
    sender: *mut *mut shmpipe_sender,
    peer: *mut shmpipe_peer,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe {
        hand_over(
            receiver,
            sender,
            peer,
            || accept(listener),
            Connection::into_messages,
        )
    }
}

/// As `shmpipe_connect`, with both pipes used for messages.
///
/// # Safety
///
/// As `shmpipe_connect`.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_connect_messages(
    path: *const c_char,
    receiver: *mut *mut shmpipe_receiver,
    sender: *mut *mut shmpipe_sender,
    peer: *mut shmpipe_peer,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe {
        hand_over(
            receiver,
            sender,
            peer,
            || connect(path),
            Connection::into_messages,
        )
    }
}

/// Closes a listener and removes its socket file.
///
/// # Safety
///
/// `listener` is NULL or a listener handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_listener_close(listener: *mut shmpipe_listener) {
    // SAFETY: the caller's promise.
    guard_void(|| unsafe { handle::close(listener) })
}
