//! The file server's client: [`Client`] and its [`File`]s, with read-ahead
//! for sequential readers.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

use super::{FileServiceClient, FsError, MAX_READ, READ_AHEAD, READ_CHUNK};

/// The capacity of a file client's rings: room for the read-ahead.
const RING: usize = 512 << 10;
use crate::rpc::{ShmTransport, Transport};

/// A connection to a file server.
///
/// # Examples
///
/// ```no_run
/// use std::io::Read;
/// let client = shmpipe::fs::Client::connect("/tmp/files.sock")?;
/// let mut text = String::new();
/// client.open("notes.txt")?.read_to_string(&mut text)?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Client<T: Transport = ShmTransport> {
    rpc: FileServiceClient<T>,
    ahead: RefCell<Ahead>,
}

/// Read-ahead state: chunk requests in flight (handle, offset, length),
/// oldest first; the offset the next one would read; and the last chunk
/// received, from which records are copied out.
#[derive(Debug, Default)]
struct Ahead {
    queue: VecDeque<(u32, u64, usize)>,
    next: u64,
    /// The file whose reader came back to offset 0 after reading to the
    /// end (a reread): its read-ahead goes on from 0 past the end.
    wrap: Option<u32>,
    /// The chunk received last: its handle, file offset and valid bytes.
    handle: u32,
    offset: u64,
    valid: usize,
    chunk: Vec<u8>,
}

impl Client {
    /// Connects to the file server listening at `path`.
    pub fn connect(path: impl AsRef<Path>) -> io::Result<Client> {
        // Rings of RING bytes: the read-ahead fits, so that the server can
        // fill it in one go while the client runs or sleeps.
        let conn = crate::Options::new().capacity(RING).connect(path)?;
        Client::with_transport(ShmTransport::new(conn))
    }
}

impl<T: Transport> Client<T> {
    /// A client over any transport (say a Unix socket, for comparison).
    pub fn with_transport(t: T) -> io::Result<Self> {
        Ok(Client {
            rpc: FileServiceClient::with_transport(t)?,
            ahead: RefCell::new(Ahead::default()),
        })
    }

    /// Opens the regular file `name`, relative to the server's root.
    pub fn open(&self, name: &str) -> io::Result<File<'_, T>> {
        self.drain()?;
        let info = self.rpc.try_open(name)?.map_err(|e| e.into_io(name))?;
        Ok(File {
            client: self,
            handle: info.handle,
            len: info.len,
            pos: 0,
        })
    }

    /// The names in directory `dir` of the root ("" for the root itself).
    pub fn list(&self, dir: &str) -> io::Result<Vec<String>> {
        self.drain()?;
        let text = self.rpc.try_list(dir)?.map_err(|e| e.into_io(dir))?;
        Ok(text.lines().map(str::to_owned).collect())
    }

    /// Receives and drops the replies to read-ahead requests, so that the
    /// next call's reply is its own.
    fn drain(&self) -> io::Result<()> {
        let mut ahead = self.ahead.borrow_mut();
        let ahead = &mut *ahead;
        ahead.valid = 0;
        ahead.wrap = None;
        while let Some((_, _, len)) = ahead.queue.pop_front() {
            ahead.chunk.resize(len, 0);
            let _ = self.rpc.recv_read(&mut ahead.chunk)?;
        }
        Ok(())
    }

    /// A sequential read of up to `buf.len()` bytes at `offset` of a file
    /// of `len` bytes: copied from the chunk received last when it holds
    /// `offset`, else from the next chunk read ahead (asked for here if
    /// the read-ahead is elsewhere).
    fn read_ahead(&self, handle: u32, offset: u64, buf: &mut [u8], len: u64) -> io::Result<usize> {
        let mut guard = self.ahead.borrow_mut();
        let ahead = &mut *guard;
        if let Some(n) = ahead.copy_out(handle, offset, buf) {
            return Ok(n);
        }
        let front = ahead.queue.front().copied();
        if !matches!(front, Some((h, o, _)) if h == handle && o == offset) {
            let wrap = ahead.wrap;
            drop(guard);
            self.drain()?;
            guard = self.ahead.borrow_mut();
            guard.next = offset;
            guard.wrap = wrap;
        }
        let ahead = &mut *guard;
        // Keep READ_AHEAD bytes asked for; on a reread, go on from 0.
        let mut asked: usize = ahead.queue.iter().map(|q| q.2).sum();
        while asked < READ_AHEAD {
            if ahead.next >= len {
                if ahead.wrap != Some(handle) || len == 0 {
                    break;
                }
                ahead.next = 0;
            }
            let n = READ_CHUNK.min((len - ahead.next) as usize);
            let next = ahead.next;
            self.rpc.send_read(handle, next, n)?;
            ahead.queue.push_back((handle, next, n));
            ahead.next += n as u64;
            asked += n;
        }
        let Some((h, o, n)) = ahead.queue.pop_front() else {
            return Ok(0);
        };
        ahead.chunk.resize(n, 0);
        ahead.valid = 0;
        let got = self
            .rpc
            .recv_read(&mut ahead.chunk)?
            .map_err(|e| e.into_io("read"))?;
        ahead.valid = check_len(got, n)?;
        ahead.handle = h;
        ahead.offset = o;
        Ok(ahead.copy_out(handle, offset, buf).unwrap_or(0))
    }

    /// Notes a seek of a file: back to 0 after its end starts a reread.
    /// The chunk received is not reused after a seek: the records read
    /// after one come from a later reply (as fresh as any read-ahead).
    fn seeked(&self, handle: u32, from: u64, to: u64, len: u64) {
        if let Ok(mut ahead) = self.ahead.try_borrow_mut() {
            if ahead.handle == handle {
                ahead.valid = 0;
                if to == 0 && from >= len {
                    ahead.wrap = Some(handle);
                }
            }
        }
    }
}

impl Ahead {
    /// Copies what the last chunk holds at `offset` of `handle`, if any.
    fn copy_out(&self, handle: u32, offset: u64, buf: &mut [u8]) -> Option<usize> {
        if self.valid == 0 || self.handle != handle {
            return None;
        }
        let at = usize::try_from(offset.checked_sub(self.offset)?).ok()?;
        if at >= self.valid {
            return None;
        }
        let n = buf.len().min(self.valid - at);
        buf[..n].copy_from_slice(&self.chunk[at..at + n]);
        Some(n)
    }
}

/// An open file of a file server. Dropping it closes it.
#[derive(Debug)]
pub struct File<'a, T: Transport = ShmTransport> {
    client: &'a Client<T>,
    handle: u32,
    len: u64,
    pos: u64,
}

impl<T: Transport> File<'_, T> {
    /// The file's length when it was opened.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file was empty when opened.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Reads up to `buf.len()` bytes (at most [`MAX_READ`]) from `offset`,
    /// without moving the cursor; 0 at the end of the file.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let want = buf.len().min(MAX_READ);
        self.client.drain()?;
        let n = self
            .client
            .rpc
            .try_read(self.handle, offset, &mut buf[..want])?
            .map_err(|e| e.into_io("read"))?;
        check_len(n, want)
    }

    /// The file's current length, asked of the server.
    pub fn size(&self) -> io::Result<u64> {
        self.client.drain()?;
        self.client
            .rpc
            .try_size(self.handle)?
            .map_err(|e| e.into_io("size"))
    }
}

fn check_len(n: u32, want: usize) -> io::Result<usize> {
    if n as usize > want {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "file server: read returned more than asked",
        ));
    }
    Ok(n as usize)
}

impl<T: Transport> Read for File<'_, T> {
    /// Reads sequentially, with requests for the next records in flight.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.len.saturating_sub(self.pos);
        let want = (buf.len() as u64).min(left).min(MAX_READ as u64) as usize;
        if want == 0 {
            return Ok(0);
        }
        let n = self
            .client
            .read_ahead(self.handle, self.pos, &mut buf[..want], self.len)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl<T: Transport> Seek for File<'_, T> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let pos = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        let to = pos
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start"))?;
        self.client.seeked(self.handle, self.pos, to, self.len);
        self.pos = to;
        Ok(self.pos)
    }
}

impl<T: Transport> Drop for File<'_, T> {
    fn drop(&mut self) {
        if self.client.drain().is_ok() {
            let _ = self.client.rpc.try_close(self.handle);
        }
    }
}

impl From<FsError> for io::Error {
    fn from(e: FsError) -> io::Error {
        e.into_io("file server")
    }
}
