//! A read-only user-level file server over shmpipe RPC (feature `rpc`):
//! the server ([`Server`], run by `shmpipe fileserver --root DIR --socket
//! PATH`) serves the regular files beneath one directory; the client
//! ([`Client`]) opens them by relative name as [`File`]s with `Read`,
//! `Seek` and [`File::read_at`].
//!
//! Names are resolved strictly beneath the root (`openat2` with
//! `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`): a `..` that climbs out,
//! absolute names and symlinks that lead out are refused (`sub/../a.txt`,
//! which stays inside, is served), and so is anything that is not a
//! regular file. The files the server holds open are bounded per
//! connection ([`MAX_OPEN`] by default), per client process, per user and
//! in total ([`OpenLimits`]); a client reads at most [`MAX_READ`] bytes
//! and lists at most [`LIST_PAGE`] directory entries per request.
//!
//! The server keeps the contents of files up to [`CACHE_FILE_MAX`] bytes
//! in its own memory, and a client that reads sequentially keeps up to a
//! reply ring's worth of data asked for (see [`REPLY_RING`]), in requests of
//! [`READ_CHUNK`] bytes, and copies its records out of the chunk received,
//! so that a record costs no round trip and usually no system call on
//! either side. The client asks for more only once half of that is used,
//! all of it at once: a server on the client's CPU is woken once per half
//! ring, not once per chunk. A reader that seeks back to 0 after the end
//! (a reread) keeps the read-ahead going round the file.
//!
//! # Examples
//!
//! ```
//! use std::io::Read;
//! let root = std::env::temp_dir().join(format!("shmpipe-fs-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&root)?;
//! std::fs::write(root.join("hello.txt"), b"hello, file server")?;
//! let path = root.with_extension("sock");
//! let server = shmpipe::fs::Server::new(&root)?;
//! let listener = shmpipe::fs::Server::bind(&path)?;
//! std::thread::spawn(move || server.serve(listener));
//!
//! let client = shmpipe::fs::Client::connect(&path)?;
//! let mut file = client.open("hello.txt")?;
//! assert_eq!(file.len(), 18);
//! let mut text = String::new();
//! file.read_to_string(&mut text)?;
//! assert_eq!(text, "hello, file server");
//! assert!(client.open("../etc/passwd").is_err());
//! # Ok::<(), std::io::Error>(())
//! ```

#![forbid(unsafe_code)]

mod cache;
mod client;
mod limits;
mod server;

use std::io;

use zerocopy::{Immutable, IntoBytes, KnownLayout, TryFromBytes};

pub use client::{Client, File};
pub use limits::OpenLimits;
pub use server::{Server, Session};

/// Files one connection may hold open at once, by default (see
/// [`OpenLimits::per_connection`]).
///
/// # Examples
///
/// ```
/// let session = shmpipe::fs::Server::new(std::env::temp_dir())?.session();
/// # let name = format!("shmpipe-fs-max-open-doc-{}", std::process::id());
/// # std::fs::write(std::env::temp_dir().join(&name), b"x")?;
/// use shmpipe::fs::{FileService, FsError, MAX_OPEN};
/// for _ in 0..MAX_OPEN {
///     session.open(&name).unwrap();
/// }
/// assert_eq!(session.open(&name), Err(FsError::TooManyOpen));
/// # Ok::<(), std::io::Error>(())
/// ```
pub const MAX_OPEN: usize = 256;
/// The largest read one request may ask for (the interface's frame limit
/// less room for the reply's header and result).
///
/// # Examples
///
/// ```
/// use shmpipe::fs::{FileServiceClient, MAX_READ};
/// assert!(MAX_READ < FileServiceClient::<shmpipe::rpc::ShmTransport>::INTERFACE.max_frame as usize);
/// ```
pub const MAX_READ: usize = (1 << 20) - 64;
/// Files up to this size are kept in the server's memory.
///
/// # Examples
///
/// ```
/// assert_eq!(shmpipe::fs::CACHE_FILE_MAX, 64 << 20);
/// ```
pub const CACHE_FILE_MAX: u64 = 64 << 20;
/// Bytes a sequential reader keeps asked for ahead (in chunks) over a
/// transport other than shmpipe's; over shmpipe, as much as the server's
/// reply ring holds (see [`REPLY_RING`]).
///
/// # Examples
///
/// ```
/// use shmpipe::fs::{READ_AHEAD, READ_CHUNK, REPLY_RING};
/// assert!(READ_CHUNK <= READ_AHEAD && READ_AHEAD <= REPLY_RING);
/// ```
pub const READ_AHEAD: usize = 256 << 10;
/// The capacity of the reply ring of a listener made by
/// [`Server::bind`]: the read-ahead of a client of it fits.
///
/// # Examples
///
/// ```
/// let path = std::env::temp_dir().join(format!("shmpipe-fs-ring-doc-{}.sock", std::process::id()));
/// # let _ = std::fs::remove_file(&path);
/// let listener = shmpipe::fs::Server::bind(&path)?;
/// std::thread::spawn(move || listener.accept());
/// let conn = shmpipe::connect(&path)?;
/// assert_eq!(conn.reader.capacity(), shmpipe::fs::REPLY_RING);
/// # Ok::<(), std::io::Error>(())
/// ```
pub const REPLY_RING: usize = 1 << 20;
/// Bytes a sequential reader asks for per request; its records are then
/// copied out of the chunk received, with no round trip each.
///
/// # Examples
///
/// ```
/// use shmpipe::fs::{MAX_READ, READ_CHUNK};
/// assert!(READ_CHUNK % 4096 == 0 && READ_CHUNK <= MAX_READ);
/// ```
pub const READ_CHUNK: usize = 64 << 10;

/// Directory entries one `list` request reads, at most: the work one
/// request may make the server do, whatever the directory holds (a name
/// is at most 255 bytes, 765 as UTF-8 with every byte replaced, so a page
/// fits in one reply). [`Client::list`] asks for the pages in turn.
///
/// # Examples
///
/// ```
/// use shmpipe::fs::{FileService, LIST_PAGE};
/// # let root = std::env::temp_dir().join(format!("shmpipe-fs-page-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&root)?;
/// # for i in 0..LIST_PAGE + 10 { std::fs::write(root.join(format!("f{i}")), b"")?; }
/// let session = shmpipe::fs::Server::new(&root)?.session();
/// let page = session.list("", 0).unwrap();
/// let (next, names) = page.split_once('\n').unwrap();
/// assert_ne!(next, "0"); // more to come
/// assert!(names.lines().count() <= LIST_PAGE);
/// # Ok::<(), std::io::Error>(())
/// ```
pub const LIST_PAGE: usize = 1024;
const _: () = assert!(LIST_PAGE * (255 * 3 + 1) + 21 <= MAX_READ);

/// Bytes at the start of a `read_chunk` buffer that carry its result.
///
/// # Examples
///
/// ```
/// use shmpipe::fs::{FileService, CHUNK_PREFIX};
/// # let root = std::env::temp_dir().join(format!("shmpipe-fs-prefix-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&root)?;
/// # std::fs::write(root.join("notes.txt"), b"hello")?;
/// let session = shmpipe::fs::Server::new(&root)?.session();
/// let handle = session.open("notes.txt").unwrap().handle;
/// let mut buf = [0u8; CHUNK_PREFIX + 16];
/// assert_eq!(session.read_chunk(handle, 0, &mut buf), Ok(5));
/// assert_eq!(shmpipe::fs::chunk_prefix(&buf[..CHUNK_PREFIX].try_into().unwrap()), (5, 0));
/// assert_eq!(&buf[CHUNK_PREFIX..][..5], b"hello");
/// # Ok::<(), std::io::Error>(())
/// ```
pub const CHUNK_PREFIX: usize = 8;

/// The result at the start of a `read_chunk` reply's buffer: (bytes of
/// file data that follow, error code or 0), in native byte order.
///
/// # Examples
///
/// ```
/// use shmpipe::fs::{chunk_prefix, FsError};
/// let mut p = [0u8; shmpipe::fs::CHUNK_PREFIX];
/// p[..4].copy_from_slice(&4096u32.to_ne_bytes());
/// assert_eq!(chunk_prefix(&p), (4096, 0));
/// p[4..].copy_from_slice(&(FsError::BadHandle as u32).to_ne_bytes());
/// assert_eq!(chunk_prefix(&p).1, 5);
/// ```
pub fn chunk_prefix(p: &[u8; CHUNK_PREFIX]) -> (u32, u32) {
    let [a, b, c, d, e, f, g, h] = *p;
    (
        u32::from_ne_bytes([a, b, c, d]),
        u32::from_ne_bytes([e, f, g, h]),
    )
}

/// What `open` tells about a file.
///
/// # Examples
///
/// ```
/// use shmpipe::fs::FileService;
/// # let root = std::env::temp_dir().join(format!("shmpipe-fs-info-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&root)?;
/// # std::fs::write(root.join("notes.txt"), b"hello")?;
/// let session = shmpipe::fs::Server::new(&root)?.session();
/// let info = session.open("notes.txt").unwrap();
/// assert_eq!((info.handle, info.len), (0, 5));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, IntoBytes, TryFromBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct FileInfo {
    /// The client's handle for it.
    pub handle: u32,
    /// Zero.
    pub reserved: u32,
    /// Its length in bytes, when opened.
    pub len: u64,
}

/// Why the server refused an operation.
///
/// # Examples
///
/// ```
/// let e = shmpipe::fs::FsError::Denied.into_io("../etc/passwd");
/// assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
/// assert!(e.to_string().starts_with("../etc/passwd: "));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, IntoBytes, TryFromBytes, Immutable, KnownLayout)]
#[repr(u32)]
pub enum FsError {
    /// No such file.
    NotFound = 1,
    /// The name leads outside the root (a `..` too many, an absolute
    /// name, a symlink out), or the server may not read it.
    Denied = 2,
    /// Not a regular file (a directory, device, FIFO, socket).
    NotRegular = 3,
    /// The connection holds its [`OpenLimits::per_connection`] files
    /// already ([`MAX_OPEN`] by default).
    TooManyOpen = 4,
    /// No open file has this handle.
    BadHandle = 5,
    /// The name is empty, too long or not valid.
    BadName = 6,
    /// The server could not read the file.
    Io = 7,
    /// A malformed request (a `read_chunk` buffer shorter than its
    /// prefix, a `list` cursor the directory refuses).
    BadRequest = 8,
    /// The client's process holds its [`OpenLimits::per_process`] files
    /// already, over all its connections.
    ProcessOpenLimit = 9,
    /// The client's user holds its [`OpenLimits::per_user`] files
    /// already, over all its connections.
    UserOpenLimit = 10,
    /// The server holds its [`OpenLimits::total`] files already, or is
    /// out of descriptors.
    ServerOpenLimit = 11,
}

impl FsError {
    /// The matching `io::Error`, naming `what`.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe::fs::FsError;
    /// let e = FsError::NotFound.into_io("notes.txt");
    /// assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    /// assert_eq!(e.to_string(), "notes.txt: no such file");
    /// ```
    pub fn into_io(self, what: &str) -> io::Error {
        use io::ErrorKind as K;
        let (kind, text) = match self {
            FsError::NotFound => (K::NotFound, "no such file"),
            FsError::Denied => (
                K::PermissionDenied,
                "outside the served root or not readable",
            ),
            FsError::NotRegular => (K::InvalidInput, "not a regular file"),
            FsError::TooManyOpen => (
                K::QuotaExceeded,
                "too many open files: the server's limit per connection",
            ),
            FsError::ProcessOpenLimit => (
                K::QuotaExceeded,
                "too many open files: the server's limit per client process",
            ),
            FsError::UserOpenLimit => (
                K::QuotaExceeded,
                "too many open files: the server's limit per user",
            ),
            FsError::ServerOpenLimit => (
                K::QuotaExceeded,
                "too many open files: the server's limit over all clients",
            ),
            FsError::BadHandle => (K::InvalidInput, "bad file handle"),
            FsError::BadName => (K::InvalidInput, "invalid name"),
            FsError::Io => (K::Other, "the server could not read it"),
            FsError::BadRequest => (K::InvalidInput, "malformed request"),
        };
        io::Error::new(kind, format!("{what}: {text}"))
    }
}

/// The file server's RPC interface. [`Session`] implements it (the
/// server's side); `FileServiceClient` is its generated stub (what
/// [`Client`] is built on, with read-ahead).
///
/// # Examples
///
/// ```
/// use shmpipe::fs::{FileServiceClient, FsError};
/// # let root = std::env::temp_dir().join(format!("shmpipe-fs-service-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&root)?;
/// # std::fs::write(root.join("notes.txt"), b"hello, stub")?;
/// # let path = root.with_extension("sock");
/// # let _ = std::fs::remove_file(&path);
/// # let server = shmpipe::fs::Server::new(&root)?;
/// # let listener = shmpipe::fs::Server::bind(&path)?;
/// # std::thread::spawn(move || server.serve(listener));
/// let stub = FileServiceClient::connect(&path)?;
/// let info = stub.open("notes.txt")?.unwrap();
/// let mut buf = [0u8; 4];
/// assert_eq!(stub.read(info.handle, 7, &mut buf)?, Ok(4));
/// assert_eq!(&buf, b"stub");
/// assert_eq!(stub.size(info.handle)?, Ok(11));
/// assert_eq!(stub.close(info.handle)?, Ok(()));
/// assert_eq!(stub.close(info.handle)?, Err(FsError::BadHandle));
/// assert_eq!(stub.list("", 0)?, Ok("0\nnotes.txt\n".to_string()));
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// Version 2 added `read_chunk`; version 3 made `list` return pages and
/// added the errors of [`OpenLimits`].
#[shmpipe_macros::service(version = 3, max_frame = 1048576, crate = ::shmpipe_rpc)]
pub trait FileService {
    /// Opens the regular file `name` (relative to the root).
    fn open(&self, name: &str) -> Result<FileInfo, FsError>;
    /// The file's current length.
    fn size(&self, handle: u32) -> Result<u64, FsError>;
    /// Reads from `offset` into `buf` (the reply carries all of `buf`);
    /// returns how many bytes are file data (fewer at the end).
    fn read(&self, handle: u32, offset: u64, buf: &mut [u8]) -> Result<u32, FsError>;
    /// Reads as `read` does, for a streaming reader: the result comes
    /// first too, in `buf[..CHUNK_PREFIX]` (see [`chunk_prefix`]), and
    /// the data after it, in `buf[CHUNK_PREFIX..]`; so a client can copy
    /// records out of the reply as they are wanted, straight into its
    /// caller's buffer, knowing how many bytes are file data.
    fn read_chunk(&self, handle: u32, offset: u64, buf: &mut [u8]) -> Result<u32, FsError>;
    /// Closes the handle.
    fn close(&self, handle: u32) -> Result<(), FsError>;
    /// A page of the names in directory `dir` ("" for the root), from
    /// `cursor` (0: the start): a first line with the cursor of the next
    /// page (0: this is the last), then at most [`LIST_PAGE`] names, one
    /// per line, in the directory's order.
    fn list(&self, dir: &str, cursor: u64) -> Result<String, FsError>;
}
