//! The file server's client: [`Client`] and its [`File`]s, with read-ahead
//! for sequential readers.

use std::cell::RefCell;
use std::collections::{HashSet, VecDeque};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use zerocopy::TryFromBytes;

use super::{
    chunk_prefix, FileServiceClient, FsError, CHUNK_PREFIX, MAX_READ, READ_AHEAD, READ_CHUNK,
};
use shmpipe_rpc::{self as rpc, ShmTransport, Transport};

/// The capacity of a file client's request ring: requests are small (a
/// read is 28 bytes); the replies' ring is the server's (see
/// [`Server::bind`](super::Server::bind)).
const RING: usize = 64 << 10;
/// Room left free in the reply ring beside the read-ahead.
const SLACK: usize = 4 << 10;
/// What a read reply takes in the ring beside its data, at least (a
/// header, the result): counted per request against the window.
const REPLY_COST: usize = 32;
/// Read-ahead requests in flight at most.
const MAX_IN_FLIGHT: usize = 64;

/// A connection to a file server.
///
/// # Examples
///
/// ```
/// use std::io::Read;
/// # let root = std::env::temp_dir().join(format!("shmpipe-fs-client-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&root)?;
/// # for (name, text) in [("notes.txt", &b"hello, file server"[..])] { std::fs::write(root.join(name), text)?; }
/// # let path = root.with_extension("sock");
/// # let _ = std::fs::remove_file(&path);
/// # let server = shmpipe::fs::Server::new(&root)?;
/// # let listener = shmpipe::fs::Server::bind(&path)?;
/// # std::thread::spawn(move || server.serve(listener));
/// let client = shmpipe::fs::Client::connect(&path)?;
/// let mut text = String::new();
/// client.open("notes.txt")?.read_to_string(&mut text)?;
/// assert_eq!(text, "hello, file server");
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Client<T: Transport = ShmTransport> {
    rpc: FileServiceClient<Batching<T>>,
    /// Set while a batch of read-ahead requests is being put: see [`Batching`].
    hold: Arc<AtomicBool>,
    ahead: RefCell<Ahead>,
}

/// A transport whose `flush` does nothing while `hold` is set, so that a
/// batch of read-ahead requests goes out with one publish: one wake of a
/// sleeping server for the batch, not one per request (with the server
/// on the client's CPU, every wake can cost a switch there and back).
#[derive(Debug)]
struct Batching<T> {
    inner: T,
    hold: Arc<AtomicBool>,
}

impl<T: Transport> Transport for Batching<T> {
    type Lanes = ();
    #[inline(always)]
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.inner.put(bytes)
    }
    #[inline]
    fn flush(&mut self) -> io::Result<()> {
        if self.hold.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.inner.flush()
    }
    #[inline]
    fn call(&mut self) -> io::Result<u64> {
        self.inner.call()
    }
    #[inline(always)]
    fn take(&mut self, dst: &mut [u8]) -> io::Result<()> {
        self.inner.take(dst)
    }
    #[inline]
    fn skip(&mut self, n: usize) -> io::Result<()> {
        self.inner.skip(n)
    }
    #[inline(always)]
    fn done(&mut self) {
        self.inner.done()
    }
}

/// Read-ahead state: chunk requests in flight (handle, offset, length),
/// oldest first; the offset the next one would read; and the reply being
/// read, from which records are copied straight into the caller's buffer.
#[derive(Debug, Default)]
struct Ahead {
    queue: VecDeque<(u32, u64, usize)>,
    next: u64,
    /// Bytes kept asked for ahead, at most (replies' headers counted).
    window: usize,
    /// More is asked for once no more than this is: half the window over
    /// shmpipe (batches: one wake of a sleeping server each), a chunk
    /// less than the window over a socket (kept full: the kernel copies
    /// and wakes per write anyway).
    refill: usize,
    /// The file whose reader came back to offset 0 after reading to the
    /// end (a reread): its read-ahead goes on from 0 past the end.
    wrap: Option<u32>,
    /// The reply being read, if one is: see [`Stream`].
    cur: Option<Stream>,
    /// The handle of the last reply read.
    last: Option<u32>,
}

/// A `read_chunk` reply read part by part: its prefix is taken (so the
/// result is known), `left` bytes of file data at file offset `offset`
/// are still in the ring, and then `rest` more bytes of the body (the
/// unused part of the chunk and the trailing result, `n` again).
#[derive(Debug, Clone, Copy)]
struct Stream {
    handle: u32,
    offset: u64,
    left: usize,
    rest: usize,
    n: u32,
    /// The server's error, in the prefix: the trailer must say so too.
    failed: bool,
}

/// The bytes of the trailing result of a `read_chunk` reply: the wire's
/// `Result<u32, FsError>`, a tag byte and a u32 (the count or the error;
/// see [`rpc::wire`]).
const TRAILER: usize = 5;

impl Client {
    /// Connects to the file server listening at `path`.
    ///
    /// # Examples
    ///
    /// ```
    /// # let root = std::env::temp_dir().join(format!("shmpipe-fs-connect-doc-{}", std::process::id()));
    /// # std::fs::create_dir_all(&root)?;
    /// # for (name, text) in [("notes.txt", &b"hello, file server"[..])] { std::fs::write(root.join(name), text)?; }
    /// # let path = root.with_extension("sock");
    /// # let _ = std::fs::remove_file(&path);
    /// # let server = shmpipe::fs::Server::new(&root)?;
    /// # let listener = shmpipe::fs::Server::bind(&path)?;
    /// # std::thread::spawn(move || server.serve(listener));
    /// let client = shmpipe::fs::Client::connect(&path)?;
    /// assert_eq!(client.list("")?, ["notes.txt"]);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn connect(path: impl AsRef<Path>) -> io::Result<Client> {
        let conn = shmpipe_core::Options::new().capacity(RING).connect(path)?;
        // The read-ahead fits in the server's reply ring, so that the
        // server answers a whole batch in one go while the client runs or
        // sleeps, and never waits for room in the middle of one.
        let window = conn.reader.capacity().saturating_sub(SLACK);
        Client::with_window(ShmTransport::new(conn), window, window / 2)
    }
}

impl<T: Transport> Client<T> {
    /// A client over any transport (say a Unix socket, for comparison).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::Read;
    /// use shmpipe::fs::{Client, Server};
    /// let root = std::env::temp_dir().join(format!("shmpipe-fs-unix-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&root)?;
    /// std::fs::write(root.join("a.txt"), b"over a socket")?;
    /// let path = root.with_extension("sock");
    /// let _ = std::fs::remove_file(&path);
    /// let server = Server::new(&root)?;
    /// let listener = std::os::unix::net::UnixListener::bind(&path)?;
    /// std::thread::spawn(move || server.serve_unix(listener));
    ///
    /// let client = Client::with_transport(shmpipe::rpc::UnixTransport::connect(&path)?)?;
    /// let mut text = String::new();
    /// client.open("a.txt")?.read_to_string(&mut text)?;
    /// assert_eq!(text, "over a socket");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn with_transport(t: T) -> io::Result<Self> {
        let window = READ_AHEAD + SLACK;
        Client::with_window(t, window, window - READ_CHUNK - REPLY_COST)
    }

    fn with_window(t: T, window: usize, refill: usize) -> io::Result<Self> {
        let hold = Arc::new(AtomicBool::new(false));
        let batching = Batching {
            inner: t,
            hold: hold.clone(),
        };
        Ok(Client {
            rpc: FileServiceClient::with_transport(batching)?,
            hold,
            ahead: RefCell::new(Ahead {
                window: window.max(READ_CHUNK),
                refill,
                ..Ahead::default()
            }),
        })
    }

    /// Opens the regular file `name`, relative to the server's root.
    ///
    /// # Examples
    ///
    /// ```
    /// # let root = std::env::temp_dir().join(format!("shmpipe-fs-open-doc-{}", std::process::id()));
    /// # std::fs::create_dir_all(&root)?;
    /// # for (name, text) in [("notes.txt", &b"hello, file server"[..])] { std::fs::write(root.join(name), text)?; }
    /// # let path = root.with_extension("sock");
    /// # let _ = std::fs::remove_file(&path);
    /// # let server = shmpipe::fs::Server::new(&root)?;
    /// # let listener = shmpipe::fs::Server::bind(&path)?;
    /// # std::thread::spawn(move || server.serve(listener));
    /// let client = shmpipe::fs::Client::connect(&path)?;
    /// assert_eq!(client.open("notes.txt")?.len(), 18);
    /// let e = client.open("../etc/passwd").unwrap_err();
    /// assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
    /// assert_eq!(client.open("missing").unwrap_err().kind(), std::io::ErrorKind::NotFound);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn open(&self, name: &str) -> io::Result<File<'_, T>> {
        self.drain()?;
        let info = self.rpc.open(name)?.map_err(|e| e.into_io(name))?;
        Ok(File {
            client: self,
            handle: info.handle,
            len: info.len,
            pos: 0,
        })
    }

    /// The names in directory `dir` of the root ("" for the root itself),
    /// sorted. Asked for in pages of at most [`LIST_PAGE`](super::LIST_PAGE) entries, so
    /// that no request makes the server read a whole large directory.
    ///
    /// # Examples
    ///
    /// ```
    /// # let root = std::env::temp_dir().join(format!("shmpipe-fs-list-doc-{}", std::process::id()));
    /// # std::fs::create_dir_all(&root)?;
    /// # for (name, text) in [("a", &b"1"[..]), ("b", &b"2"[..])] { std::fs::write(root.join(name), text)?; }
    /// # let path = root.with_extension("sock");
    /// # let _ = std::fs::remove_file(&path);
    /// # let server = shmpipe::fs::Server::new(&root)?;
    /// # let listener = shmpipe::fs::Server::bind(&path)?;
    /// # std::thread::spawn(move || server.serve(listener));
    /// let client = shmpipe::fs::Client::connect(&path)?;
    /// assert_eq!(client.list("")?, ["a", "b"]);
    /// assert!(client.list("..").is_err());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn list(&self, dir: &str) -> io::Result<Vec<String>> {
        self.drain()?;
        let mut names = Vec::new();
        let mut cursor = 0;
        let mut seen = HashSet::new();
        loop {
            let page = self.rpc.list(dir, cursor)?.map_err(|e| e.into_io(dir))?;
            let (next, page) = page
                .split_once('\n')
                .and_then(|(n, page)| Some((n.parse::<u64>().ok()?, page)))
                .ok_or_else(|| rpc::wire::bad_reply("list page without a cursor"))?;
            names.extend(page.lines().map(str::to_owned));
            if next == 0 {
                break;
            }
            // A server that sends us round in circles is broken.
            if !seen.insert(next) {
                return Err(rpc::wire::bad_reply("list cursors go round"));
            }
            cursor = next;
        }
        names.sort_unstable();
        Ok(names)
    }

    // The read-ahead reads its replies itself, part by part, through the
    // generated client's transport (its `inner`, visible in this module):
    // the stubs would take a whole reply at once.

    /// Receives and drops the replies to read-ahead requests (and the
    /// rest of the one being read), so that the next call's reply is its
    /// own.
    fn drain(&self) -> io::Result<()> {
        let mut ahead = self.ahead.borrow_mut();
        let ahead = &mut *ahead;
        ahead.wrap = None;
        if ahead.cur.is_none() && ahead.queue.is_empty() {
            return Ok(());
        }
        let mut t = self.rpc.inner.transport()?;
        if let Some(cur) = ahead.cur.take() {
            t.skip(cur.left)?;
            end_stream(&mut *t, cur)?;
        }
        while let Some((h, o, n)) = ahead.queue.pop_front() {
            // An error of the server's is dropped with its reply.
            if let Ok(Some(cur)) = begin_stream(&mut *t, h, o, n)? {
                t.skip(cur.left)?;
                end_stream(&mut *t, cur)?;
            }
        }
        Ok(())
    }

    /// A sequential read of up to `buf.len()` bytes at `offset` of a file
    /// of `len` bytes: copied from the reply being read when it goes on at
    /// `offset`, else from the next reply read ahead (asked for here if
    /// the read-ahead is elsewhere).
    fn read_ahead(&self, handle: u32, offset: u64, buf: &mut [u8], len: u64) -> io::Result<usize> {
        let mut guard = self.ahead.borrow_mut();
        let ahead = &mut *guard;
        if matches!(ahead.cur, Some(c) if c.handle == handle && c.offset == offset) {
            let mut t = self.rpc.inner.transport()?;
            return copy_out(&mut *t, &mut ahead.cur, buf);
        }
        let front = ahead.queue.front().copied();
        if ahead.cur.is_some() || !matches!(front, Some((h, o, _)) if h == handle && o == offset) {
            let wrap = ahead.wrap;
            drop(guard);
            self.drain()?;
            guard = self.ahead.borrow_mut();
            guard.next = offset;
            guard.wrap = wrap;
        }
        let ahead = &mut *guard;
        // Keep up to a window asked for; on a reread, go on from 0. Over
        // shmpipe, refill only once half of it is used, and in one batch:
        // the server, woken once, answers many chunks in one turn.
        // What the replies asked for take in the reply ring, headers too;
        // and at most MAX_IN_FLIGHT of them (a reread of a tiny file would
        // otherwise ask for it thousands of times at once).
        let mut asked: usize = ahead.queue.iter().map(|q| q.2 + REPLY_COST).sum();
        if asked <= ahead.refill && ahead.queue.len() <= MAX_IN_FLIGHT / 2 {
            // Each request is sent when the next is known: all but the
            // last with the flush held, the last publishing them all.
            let mut pending: Option<(u64, usize)> = None;
            let mut count = ahead.queue.len();
            loop {
                if ahead.next >= len {
                    if ahead.wrap != Some(handle) || len == 0 {
                        break;
                    }
                    ahead.next = 0;
                }
                let n = READ_CHUNK.min((len - ahead.next) as usize);
                // Past the window only when nothing at all is asked for.
                if (asked + n + REPLY_COST > ahead.window && asked > 0) || count == MAX_IN_FLIGHT {
                    break;
                }
                if let Some((o, k)) = pending.take() {
                    self.send_read(handle, o, k, true)?;
                    ahead.queue.push_back((handle, o, k));
                }
                pending = Some((ahead.next, n));
                ahead.next += n as u64;
                asked += n + REPLY_COST;
                count += 1;
            }
            if let Some((o, k)) = pending {
                self.send_read(handle, o, k, false)?;
                ahead.queue.push_back((handle, o, k));
            }
        }
        let Some((h, o, n)) = ahead.queue.pop_front() else {
            return Ok(0);
        };
        let mut t = self.rpc.inner.transport()?;
        ahead.last = Some(h);
        ahead.cur = begin_stream(&mut *t, h, o, n)?.map_err(|e| e.into_io("read"))?;
        copy_out(&mut *t, &mut ahead.cur, buf)
    }

    /// Sends one read request; with `held`, not yet published.
    fn send_read(&self, handle: u32, offset: u64, n: usize, held: bool) -> io::Result<()> {
        self.hold.store(held, Ordering::Relaxed);
        let r = self.rpc.send_read_chunk(handle, offset, CHUNK_PREFIX + n);
        self.hold.store(false, Ordering::Relaxed);
        r
    }

    /// Notes a seek of a file: back to 0 after its end starts a reread.
    /// (A seek elsewhere ends the read-ahead at the next read: the reply
    /// being read goes on at its own offset only.)
    fn seeked(&self, handle: u32, from: u64, to: u64, len: u64) {
        if let Ok(mut ahead) = self.ahead.try_borrow_mut() {
            if ahead.last == Some(handle) && to == 0 && from >= len {
                ahead.wrap = Some(handle);
            }
        }
    }
}

/// Begins reading the reply to a `read_chunk` of `n` bytes at `offset`
/// of `handle`: checks its length and takes its prefix. The server's
/// error (with the reply read whole) or the reply to read on; `None` if
/// it holds no data (it is read whole then too).
fn begin_stream<T: Transport>(
    t: &mut T,
    handle: u32,
    offset: u64,
    n: usize,
) -> io::Result<Result<Option<Stream>, FsError>> {
    let h = t.call()?;
    let body = rpc::__private::expect_ok(t, h, FileServiceClient::<T>::INTERFACE.max_frame)?;
    if body != CHUNK_PREFIX + n + TRAILER {
        return Err(rpc::wire::bad_reply("read_chunk of another length"));
    }
    let mut p = [0u8; CHUNK_PREFIX];
    t.take(&mut p)?;
    let (got, err) = chunk_prefix(&p);
    let got = check_len(got, n)?;
    let cur = Stream {
        handle,
        offset,
        left: got,
        rest: n - got + TRAILER,
        n: got as u32,
        failed: err != 0,
    };
    if err != 0 || got == 0 {
        t.skip(got)?;
        end_stream(t, cur)?;
        if err != 0 {
            let e = FsError::try_read_from_bytes(&err.to_ne_bytes())
                .map_err(|_| rpc::wire::bad_reply("read_chunk error"))?;
            return Ok(Err(e));
        }
        return Ok(Ok(None));
    }
    Ok(Ok(Some(cur)))
}

/// Copies the next bytes of the reply being read into `buf`, straight
/// from the ring; ends the reply once its data is all read.
#[inline]
fn copy_out<T: Transport>(
    t: &mut T,
    cur: &mut Option<Stream>,
    buf: &mut [u8],
) -> io::Result<usize> {
    let Some(s) = cur else {
        return Ok(0);
    };
    let k = buf.len().min(s.left);
    t.take(&mut buf[..k])?;
    s.left -= k;
    s.offset += k as u64;
    if s.left == 0 {
        let s = *s;
        *cur = None;
        end_stream(t, s)?;
    }
    Ok(k)
}

/// Reads the end of a reply whose data is read: the unused part of the
/// chunk and the trailing result, which must agree with the prefix.
fn end_stream<T: Transport>(t: &mut T, s: Stream) -> io::Result<()> {
    t.skip(s.rest - TRAILER)?;
    let mut r = [0u8; TRAILER];
    t.take(&mut r)?;
    t.done();
    let agrees = match r[0] {
        0 => !s.failed && u32::from_ne_bytes([r[1], r[2], r[3], r[4]]) == s.n,
        1 => s.failed,
        _ => false,
    };
    if agrees {
        Ok(())
    } else {
        Err(rpc::wire::bad_reply("read_chunk result"))
    }
}

/// An open file of a file server. Dropping it closes it.
///
/// # Examples
///
/// ```
/// use std::io::{Read, Seek, SeekFrom};
/// # let root = std::env::temp_dir().join(format!("shmpipe-fs-file-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&root)?;
/// # for (name, text) in [("notes.txt", &b"hello, file server"[..])] { std::fs::write(root.join(name), text)?; }
/// # let path = root.with_extension("sock");
/// # let _ = std::fs::remove_file(&path);
/// # let server = shmpipe::fs::Server::new(&root)?;
/// # let listener = shmpipe::fs::Server::bind(&path)?;
/// # std::thread::spawn(move || server.serve(listener));
/// let client = shmpipe::fs::Client::connect(&path)?;
/// let mut file = client.open("notes.txt")?;
/// file.seek(SeekFrom::Start(7))?;
/// let mut word = [0u8; 4];
/// file.read_exact(&mut word)?;
/// assert_eq!(&word, b"file");
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct File<'a, T: Transport = ShmTransport> {
    client: &'a Client<T>,
    handle: u32,
    len: u64,
    pos: u64,
}

impl<T: Transport> File<'_, T> {
    /// The file's length when it was opened.
    ///
    /// # Examples
    ///
    /// ```
    /// # let root = std::env::temp_dir().join(format!("shmpipe-fs-len-doc-{}", std::process::id()));
    /// # std::fs::create_dir_all(&root)?;
    /// # for (name, text) in [("notes.txt", &b"hello, file server"[..])] { std::fs::write(root.join(name), text)?; }
    /// # let path = root.with_extension("sock");
    /// # let _ = std::fs::remove_file(&path);
    /// # let server = shmpipe::fs::Server::new(&root)?;
    /// # let listener = shmpipe::fs::Server::bind(&path)?;
    /// # std::thread::spawn(move || server.serve(listener));
    /// let client = shmpipe::fs::Client::connect(&path)?;
    /// assert_eq!(client.open("notes.txt")?.len(), 18);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file was empty when opened.
    ///
    /// # Examples
    ///
    /// ```
    /// # let root = std::env::temp_dir().join(format!("shmpipe-fs-empty-doc-{}", std::process::id()));
    /// # std::fs::create_dir_all(&root)?;
    /// # for (name, text) in [("empty", &b""[..])] { std::fs::write(root.join(name), text)?; }
    /// # let path = root.with_extension("sock");
    /// # let _ = std::fs::remove_file(&path);
    /// # let server = shmpipe::fs::Server::new(&root)?;
    /// # let listener = shmpipe::fs::Server::bind(&path)?;
    /// # std::thread::spawn(move || server.serve(listener));
    /// let client = shmpipe::fs::Client::connect(&path)?;
    /// assert!(client.open("empty")?.is_empty());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Reads up to `buf.len()` bytes (at most [`MAX_READ`]) from `offset`,
    /// without moving the cursor; 0 at the end of the file.
    ///
    /// # Examples
    ///
    /// ```
    /// # let root = std::env::temp_dir().join(format!("shmpipe-fs-read-at-doc-{}", std::process::id()));
    /// # std::fs::create_dir_all(&root)?;
    /// # for (name, text) in [("notes.txt", &b"hello, file server"[..])] { std::fs::write(root.join(name), text)?; }
    /// # let path = root.with_extension("sock");
    /// # let _ = std::fs::remove_file(&path);
    /// # let server = shmpipe::fs::Server::new(&root)?;
    /// # let listener = shmpipe::fs::Server::bind(&path)?;
    /// # std::thread::spawn(move || server.serve(listener));
    /// let client = shmpipe::fs::Client::connect(&path)?;
    /// let file = client.open("notes.txt")?;
    /// let mut buf = [0u8; 6];
    /// assert_eq!(file.read_at(&mut buf, 12)?, 6);
    /// assert_eq!(&buf, b"server");
    /// assert_eq!(file.read_at(&mut buf, 18)?, 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let want = buf.len().min(MAX_READ);
        self.client.drain()?;
        let n = self
            .client
            .rpc
            .read(self.handle, offset, &mut buf[..want])?
            .map_err(|e| e.into_io("read"))?;
        check_len(n, want)
    }

    /// The file's current length, asked of the server.
    ///
    /// # Examples
    ///
    /// ```
    /// # let root = std::env::temp_dir().join(format!("shmpipe-fs-size-doc-{}", std::process::id()));
    /// # std::fs::create_dir_all(&root)?;
    /// # for (name, text) in [("notes.txt", &b"hello, file server"[..])] { std::fs::write(root.join(name), text)?; }
    /// # let path = root.with_extension("sock");
    /// # let _ = std::fs::remove_file(&path);
    /// # let server = shmpipe::fs::Server::new(&root)?;
    /// # let listener = shmpipe::fs::Server::bind(&path)?;
    /// # std::thread::spawn(move || server.serve(listener));
    /// let client = shmpipe::fs::Client::connect(&path)?;
    /// assert_eq!(client.open("notes.txt")?.size()?, 18);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn size(&self) -> io::Result<u64> {
        self.client.drain()?;
        self.client
            .rpc
            .size(self.handle)?
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
            let _ = self.client.rpc.close(self.handle);
        }
    }
}

impl From<FsError> for io::Error {
    fn from(e: FsError) -> io::Error {
        e.into_io("file server")
    }
}
