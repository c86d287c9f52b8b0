//! The file server's client: [`Client`] and its [`File`]s, with read-ahead
//! for sequential readers.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

use super::{FileServiceClient, FsError, MAX_READ, READ_AHEAD};
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

/// Read requests in flight: (handle, offset, length), oldest first, and
/// the offset the next one would read.
#[derive(Debug, Default)]
struct Ahead {
    queue: VecDeque<(u32, u64, usize)>,
    next: u64,
}

impl Client {
    /// Connects to the file server listening at `path`.
    pub fn connect(path: impl AsRef<Path>) -> io::Result<Client> {
        Client::with_transport(ShmTransport::new(crate::connect(path)?))
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
        let mut scratch = Vec::new();
        while let Some((_, _, len)) = ahead.queue.pop_front() {
            scratch.resize(len, 0);
            let _ = self.rpc.recv_read(&mut scratch)?;
        }
        Ok(())
    }

    /// A sequential read of `buf.len()` bytes at `offset` of a file of
    /// `len` bytes, served from the read-ahead when it matches.
    fn read_ahead(&self, handle: u32, offset: u64, buf: &mut [u8], len: u64) -> io::Result<u32> {
        let mut ahead = self.ahead.borrow_mut();
        if ahead.queue.front() != Some(&(handle, offset, buf.len())) {
            drop(ahead);
            self.drain()?;
            ahead = self.ahead.borrow_mut();
            ahead.next = offset;
        }
        while ahead.queue.len() < READ_AHEAD && ahead.next < len {
            let n = buf.len().min((len - ahead.next) as usize);
            let next = ahead.next;
            self.rpc.send_read(handle, next, n)?;
            ahead.queue.push_back((handle, next, n));
            ahead.next += n as u64;
        }
        ahead.queue.pop_front();
        drop(ahead);
        let n = self.rpc.recv_read(buf)?.map_err(|e| e.into_io("read"))?;
        Ok(n)
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
        let n = check_len(n, want)?;
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
        self.pos = pos
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start"))?;
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
