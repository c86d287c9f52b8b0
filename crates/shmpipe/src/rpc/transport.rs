//! How a client's frames travel: through shmpipe's rings, or a Unix
//! socket (the same stubs over kernel IPC, for comparison).

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use super::wire::HEADER;
use crate::{Connection, Reader, Writer};

/// A byte stream each way, as the generated client stubs use it. The
/// stubs call these in this order: `put`s (a request), `flush` or `call`
/// (which also waits for a reply's header), `take`s and `done` (the
/// reply).
pub trait Transport {
    /// Appends request bytes, not yet sent.
    fn put(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Sends what was put.
    fn flush(&mut self) -> io::Result<()>;
    /// Sends what was put and waits for the next reply's header (as the
    /// little-endian word it is: see [`wire`](super::wire)).
    fn call(&mut self) -> io::Result<u64>;
    /// Reads exactly `dst.len()` reply bytes.
    fn take(&mut self, dst: &mut [u8]) -> io::Result<()>;
    /// Drops `n` reply bytes.
    fn skip(&mut self, n: usize) -> io::Result<()> {
        let mut buf = [0u8; 512];
        let mut left = n;
        while left > 0 {
            let k = left.min(buf.len());
            self.take(&mut buf[..k])?;
            left -= k;
        }
        Ok(())
    }
    /// The reply has been read.
    fn done(&mut self);
}

/// Frames through a shmpipe connection: requests are written in place in
/// the request ring and published with one store; replies are read in
/// place from the reply ring. No system call while both sides are busy.
///
/// # Examples
///
/// ```no_run
/// #[shmpipe::service]
/// pub trait Ping { fn ping(&self); }
/// let t = shmpipe::rpc::ShmTransport::new(shmpipe::connect("/tmp/ping.sock")?);
/// let client = PingClient::with_transport(t)?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct ShmTransport {
    reader: Reader,
    writer: Writer,
}

impl ShmTransport {
    /// Uses `conn`'s two pipes.
    pub fn new(conn: Connection) -> Self {
        let (reader, writer) = conn.split();
        ShmTransport { reader, writer }
    }

    #[cold]
    #[inline(never)]
    fn put_slow(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.writer.write_all(bytes)
    }

    #[cold]
    #[inline(never)]
    fn take_slow(&mut self, dst: &mut [u8]) -> io::Result<()> {
        // A reply is usually on its way or there already: look at the
        // server's index once at once (a wait would pause before its first
        // look, which suits streams of small items, not a reply awaited).
        let ring = &mut self.reader.end.ring;
        if matches!(ring.available(dst.len()), Ok(n) if n >= dst.len()) {
            ring.pop(dst);
            return Ok(());
        }
        // Free what was read so far: the server may be waiting for room
        // to write the rest of a large reply.
        self.reader.end.publish();
        self.reader.read_exact(dst)
    }
}

impl Transport for ShmTransport {
    #[inline(always)]
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.writer.end.ring.try_push(bytes) {
            return Ok(());
        }
        self.put_slow(bytes)
    }

    #[inline]
    fn flush(&mut self) -> io::Result<()> {
        self.writer.end.publish();
        self.reader.end.publish();
        Ok(())
    }

    /// Kept out of line: it is the publishing and the waiting, which the
    /// stub's instruction count leaves out (see the bench's `rpc-stub`).
    /// The replies read since the last call are released here too, with
    /// the request: one publish of each index per call.
    #[inline(never)]
    fn call(&mut self) -> io::Result<u64> {
        self.writer.end.publish();
        self.reader.end.publish();
        let mut h = [0u8; HEADER];
        self.take(&mut h)?;
        Ok(u64::from_le_bytes(h))
    }

    #[inline(always)]
    fn take(&mut self, dst: &mut [u8]) -> io::Result<()> {
        let ring = &mut self.reader.end.ring;
        if ring.available_cached() >= dst.len() {
            ring.pop(dst);
            return Ok(());
        }
        self.take_slow(dst)
    }

    /// Nothing to do: the reply's room is released with the next request
    /// (or when more is awaited, or the transport is dropped).
    #[inline(always)]
    fn done(&mut self) {}
}

/// Frames through a Unix stream socket, buffered: one `write` per request
/// and as few `read`s as the replies allow.
///
/// # Examples
///
/// ```
/// #[shmpipe::service]
/// pub trait Ping { fn ping(&self, x: u32) -> u32; }
/// struct P;
/// impl Ping for P { fn ping(&self, x: u32) -> u32 { x + 1 } }
///
/// let path = std::env::temp_dir().join(format!("shmpipe-unix-doc-{}.sock", std::process::id()));
/// let listener = std::os::unix::net::UnixListener::bind(&path)?;
/// std::thread::spawn(move || shmpipe::rpc::serve_unix(listener, || PingServer(P)));
/// let client = PingClient::with_transport(shmpipe::rpc::UnixTransport::connect(&path)?)?;
/// assert_eq!(client.ping(41), 42);
/// # std::fs::remove_file(&path)?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct UnixTransport {
    stream: UnixStream,
    out: Vec<u8>,
    buf: Box<[u8]>,
    pos: usize,
    end: usize,
}

impl UnixTransport {
    /// Uses a connected socket.
    pub fn new(stream: UnixStream) -> Self {
        UnixTransport {
            stream,
            out: Vec::with_capacity(64 * 1024),
            buf: vec![0u8; 64 * 1024].into_boxed_slice(),
            pos: 0,
            end: 0,
        }
    }

    /// Connects to a server from [`serve_unix`](super::serve_unix).
    pub fn connect(path: impl AsRef<Path>) -> io::Result<Self> {
        Ok(Self::new(UnixStream::connect(path)?))
    }

    fn fill(&mut self) -> io::Result<()> {
        self.pos = 0;
        self.end = 0;
        loop {
            match self.stream.read(&mut self.buf) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    self.end = n;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

impl Transport for UnixTransport {
    #[inline]
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.extend_from_slice(bytes);
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.out.is_empty() {
            self.stream.write_all(&self.out)?;
            self.out.clear();
        }
        Ok(())
    }

    #[inline(never)]
    fn call(&mut self) -> io::Result<u64> {
        self.flush()?;
        let mut h = [0u8; HEADER];
        self.take(&mut h)?;
        Ok(u64::from_le_bytes(h))
    }

    fn take(&mut self, mut dst: &mut [u8]) -> io::Result<()> {
        while !dst.is_empty() {
            if self.pos == self.end {
                if dst.len() >= self.buf.len() {
                    // Large: straight into the caller's buffer.
                    self.stream.read_exact(dst)?;
                    return Ok(());
                }
                self.fill()?;
            }
            let n = dst.len().min(self.end - self.pos);
            dst[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
            self.pos += n;
            dst = &mut dst[n..];
        }
        Ok(())
    }

    fn done(&mut self) {}
}
