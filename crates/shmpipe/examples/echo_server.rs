//! An echo server: `echo_server PATH`.
//!
//! Binds a [`shmpipe::Listener`] at `PATH` and serves any number of
//! clients from one thread with a [`shmpipe::WaitSet`]. A client connects
//! with `shmpipe::connect(PATH)?.into_messages()`, and every message it
//! sends comes back unchanged on the same connection.
//!
//! Clients come and go, are killed, send nothing, send garbage: the
//! server serves the rest, and drops a client (every descriptor and
//! mapping of it) as soon as it is gone or breaks the protocol. A client
//! that does not read its replies is not read from until it does, so it
//! cannot make the server wait or grow.
//!
//! Ctrl-C or SIGTERM stops it and removes its socket file; a server that
//! was killed outright leaves the file, and the next start replaces it.
//!
//! ```text
//! cargo run --release --example echo_server -- /tmp/echo.sock
//! ```

use std::io::{self, ErrorKind, Write};
use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;

use shmpipe::{Listener, Receiver, Sender, WaitSet};

/// The listener's token; client `id` has token `2 * id` for its requests
/// and `2 * id + 1` for its replies while they wait for room.
const LISTENER: u64 = u64::MAX;

/// One client's session: its ends and what waits to be sent.
struct Session {
    /// Its replies, unless waiting in the set for room.
    tx: Option<Sender>,
    /// Its requests, while taken out of the set (its replies are full).
    rx: Option<Receiver>,
    /// A reply that did not fit yet.
    unsent: Option<Vec<u8>>,
}

fn main() {
    let Some(path) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: echo_server PATH");
        std::process::exit(2);
    };
    if let Err(e) = serve(path) {
        eprintln!("echo_server: {e}");
        std::process::exit(1);
    }
}

fn serve(path: PathBuf) -> io::Result<()> {
    // Six descriptors per client (three per pipe end).
    shmpipe::raise_fd_limit()?;
    let mut listener = Listener::bind(&path)?;
    listener.set_nonblocking(true);
    remove_on_signal(path.clone())?;
    println!("echo_server: listening at {}; Ctrl-C stops", path.display());
    io::stdout().flush()?;
    let mut set = WaitSet::new()?;
    set.add(LISTENER, listener)?;
    let mut clients: Vec<Option<Session>> = Vec::new();
    let mut free: Vec<u64> = Vec::new();
    let mut ready = Vec::new();
    let mut buf = Vec::new();
    loop {
        set.wait(&mut ready, None)?;
        for token in ready.iter().map(|t| t.0) {
            if token == LISTENER {
                accept_all(&mut set, &mut clients, &mut free)?;
            } else if token % 2 == 0 {
                echo(&mut set, &mut clients, &mut free, token / 2, &mut buf);
            } else {
                resume(&mut set, &mut clients, &mut free, token / 2);
            }
        }
    }
}

/// On SIGINT or SIGTERM, removes the socket file at `path` (if a socket
/// is what is there) and exits with 128 + the signal, as a shell reports
/// a death by it. The serving loop never returns to drop the listener, so
/// this thread does what the drop would. The handler wakes it through a
/// pipe (signal-hook's iterator would hold a socket pair: sockets here
/// are clients', as `tests/servers.rs` counts them).
fn remove_on_signal(path: PathBuf) -> io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (reader, writer) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let caught = std::sync::Arc::new(AtomicUsize::new(0));
    for signal in [SIGINT, SIGTERM] {
        // Registered in this order, so the number is stored before the wake.
        signal_hook::flag::register_usize(signal, caught.clone(), signal as usize)?;
        signal_hook::low_level::pipe::register(signal, writer.try_clone()?)?;
    }
    drop(writer);
    std::thread::spawn(move || {
        let mut byte = [0u8];
        while let Err(rustix::io::Errno::INTR) = rustix::io::read(&reader, &mut byte) {}
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_socket()) {
            let _ = std::fs::remove_file(&path);
        }
        std::process::exit(128 + caught.load(Ordering::SeqCst) as i32);
    });
    Ok(())
}

/// Takes every client whose handshake completed.
fn accept_all(
    set: &mut WaitSet,
    clients: &mut Vec<Option<Session>>,
    free: &mut Vec<u64>,
) -> io::Result<()> {
    loop {
        let listener = set.listener_mut(LISTENER).expect("the listener");
        let conn = match listener.accept() {
            Ok(conn) => conn,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            // Out of descriptors (and no spare left to turn the client
            // away with): the clients we have are still served.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                return Ok(())
            }
            Err(e) => return Err(e),
        };
        let (mut rx, mut tx) = conn.into_messages();
        rx.set_nonblocking(true);
        tx.set_nonblocking(true);
        let id = free.pop().unwrap_or(clients.len() as u64);
        if set.add(2 * id, rx).is_err() {
            free.push(id);
            continue; // out of epoll room: this client is dropped
        }
        let client = Session {
            tx: Some(tx),
            rx: None,
            unsent: None,
        };
        match clients.get_mut(id as usize) {
            Some(slot) => *slot = Some(client),
            None => clients.push(Some(client)),
        }
    }
}

/// Echoes one message of client `id`.
fn echo(
    set: &mut WaitSet,
    clients: &mut [Option<Session>],
    free: &mut Vec<u64>,
    id: u64,
    buf: &mut Vec<u8>,
) {
    let Some(rx) = set.receiver_mut(2 * id) else {
        return;
    };
    match rx.recv_vec(buf) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::WouldBlock => return,
        // Gone, or broke the protocol.
        Err(_) => return drop_client(set, clients, free, id),
    }
    let client = clients[id as usize].as_mut().expect("a client");
    let tx = client.tx.as_mut().expect("its sender");
    match tx.send(buf) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::WouldBlock => {
            // Its replies are full: read no more from it until they drain.
            client.unsent = Some(std::mem::take(buf));
            let tx = client.tx.take().expect("its sender");
            let rx = set.remove(2 * id);
            client.rx = rx.and_then(|s| match s {
                shmpipe::waitset::Source::Receiver(rx) => Some(rx),
                _ => None,
            });
            if set.add(2 * id + 1, tx).is_err() {
                drop_client(set, clients, free, id);
            }
        }
        Err(_) => drop_client(set, clients, free, id),
    }
}

/// Client `id`'s replies have room again: send what waited, read on.
fn resume(set: &mut WaitSet, clients: &mut [Option<Session>], free: &mut Vec<u64>, id: u64) {
    let Some(tx) = set.sender_mut(2 * id + 1) else {
        return;
    };
    let client = clients[id as usize].as_mut().expect("a client");
    let msg = client.unsent.take().unwrap_or_default();
    match tx.send(&msg) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::WouldBlock => {
            client.unsent = Some(msg);
            return;
        }
        Err(_) => return drop_client(set, clients, free, id),
    }
    let tx = match set.remove(2 * id + 1) {
        Some(shmpipe::waitset::Source::Sender(tx)) => tx,
        _ => return drop_client(set, clients, free, id),
    };
    client.tx = Some(tx);
    let rx = client.rx.take().expect("its receiver");
    if set.add(2 * id, rx).is_err() {
        drop_client(set, clients, free, id);
    }
}

/// Closes everything of client `id`.
fn drop_client(set: &mut WaitSet, clients: &mut [Option<Session>], free: &mut Vec<u64>, id: u64) {
    set.remove(2 * id);
    set.remove(2 * id + 1);
    if clients[id as usize].take().is_some() {
        free.push(id);
    }
}
