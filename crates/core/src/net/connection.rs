//! What a handshake makes: a [`Connection`] (a pipe each way) and the
//! [`PeerCredentials`] of the process at the other end. Both sides build
//! these (the listener in `accept`, the client in `exchange`), so they
//! live below both.

use std::io;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;

use crate::sys;
use crate::{Reader, Receiver, Sender, Writer};

/// What the kernel recorded about the process at the other end when it
/// connected (`SO_PEERCRED`).
///
/// # Examples
///
/// ```
/// let path = std::env::temp_dir().join(format!("shmpipe-doc-peer-{}.sock", std::process::id()));
/// let listener = shmpipe::Listener::bind(&path)?;
/// let client = std::thread::spawn(move || shmpipe::connect(&path).map(|c| c.peer));
/// let conn = listener.accept()?;
/// // Both ends are this process here.
/// assert_eq!(conn.peer.pid, std::process::id() as i32);
/// assert_eq!(client.join().unwrap()?, conn.peer);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCredentials {
    /// Process id, as seen in this process's pid namespace: 0 when the
    /// peer runs in a namespace this one cannot see (a client on the
    /// host of a server in a container).
    pub pid: i32,
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

impl PeerCredentials {
    /// The credentials the kernel recorded for the peer of a connected
    /// Unix socket (`getsockopt(SO_PEERCRED)`), for a server that accepts
    /// on a plain socket and bounds its clients per process or user.
    ///
    /// # Examples
    ///
    /// ```
    /// let (a, _b) = std::os::unix::net::UnixStream::pair()?;
    /// let peer = shmpipe::PeerCredentials::of(&a)?;
    /// assert_eq!(peer.pid, std::process::id() as i32);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn of(socket: &UnixStream) -> io::Result<PeerCredentials> {
        credentials(socket)
    }
}

/// One connection: a pipe each way.
///
/// # Examples
///
/// ```
/// use std::io::{Read, Write};
/// let path = std::env::temp_dir().join(format!("shmpipe-doc-conn-{}.sock", std::process::id()));
/// let listener = shmpipe::Listener::bind(&path)?;
/// let client = std::thread::spawn(move || -> std::io::Result<()> {
///     let mut conn = shmpipe::connect(&path)?;
///     conn.writer.write_all(b"hi")?;
///     Ok(())
/// });
/// let mut conn = listener.accept()?;
/// let mut text = String::new();
/// conn.reader.read_to_string(&mut text)?; // until the client hangs up
/// assert_eq!(text, "hi");
/// client.join().unwrap()?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Connection {
    /// Bytes from the peer.
    pub reader: Reader,
    /// Bytes to the peer.
    pub writer: Writer,
    /// Who the peer is.
    pub peer: PeerCredentials,
}

impl Connection {
    /// Splits the connection into its two pipe ends.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// let path = std::env::temp_dir().join(format!("shmpipe-doc-split-{}.sock", std::process::id()));
    /// let listener = shmpipe::Listener::bind(&path)?;
    /// let client = std::thread::spawn(move || -> std::io::Result<()> {
    ///     let (mut reader, mut writer) = shmpipe::connect(&path)?.split();
    ///     writer.write_all(b"ping")?;
    ///     let mut buf = [0; 4];
    ///     reader.read_exact(&mut buf)?;
    ///     assert_eq!(&buf, b"pong");
    ///     Ok(())
    /// });
    /// let (mut reader, mut writer) = listener.accept()?.split();
    /// let mut buf = [0; 4];
    /// reader.read_exact(&mut buf)?;
    /// writer.write_all(b"pong")?;
    /// client.join().unwrap()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn split(self) -> (Reader, Writer) {
        (self.reader, self.writer)
    }

    /// Uses both pipes for messages instead of bytes. Both sides must do
    /// so before sending anything; a side that reads messages from a
    /// byte stream gets `InvalidData`.
    ///
    /// # Examples
    ///
    /// ```
    /// let path = std::env::temp_dir().join(format!("shmpipe-doc-msgs-{}.sock", std::process::id()));
    /// let listener = shmpipe::Listener::bind(&path)?;
    /// let client = std::thread::spawn(move || -> std::io::Result<()> {
    ///     let (_rx, mut tx) = shmpipe::connect(&path)?.into_messages();
    ///     tx.send(b"one message")?;
    ///     Ok(())
    /// });
    /// let (mut rx, _tx) = listener.accept()?.into_messages();
    /// let mut buf = Vec::new();
    /// rx.recv_vec(&mut buf)?;
    /// assert_eq!(buf, b"one message");
    /// client.join().unwrap()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn into_messages(self) -> (Receiver, Sender) {
        (
            Receiver {
                end: self.reader.end,
            },
            Sender {
                end: self.writer.end,
            },
        )
    }
}

/// The credentials the kernel recorded for the peer of `stream`.
pub(crate) fn credentials(stream: &UnixStream) -> io::Result<PeerCredentials> {
    let c = sys::peer_credentials(stream.as_fd())?;
    Ok(PeerCredentials {
        pid: c.pid,
        uid: c.uid,
        gid: c.gid,
    })
}
