//! A read-only user-level file server over shmpipe RPC (feature `rpc`):
//! the server ([`Server`], run by `shmpipe fileserver --root DIR --socket
//! PATH`) serves the regular files beneath one directory; the client
//! ([`Client`]) opens them by relative name as [`File`]s with `Read`,
//! `Seek` and [`File::read_at`].
//!
//! Names are resolved strictly beneath the root (`openat2` with
//! `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`): `..`, absolute names and
//! symlinks that lead out are refused, and so is anything that is not a
//! regular file. Each client may hold [`MAX_OPEN`] files open and read at
//! most [`MAX_READ`] bytes per request.
//!
//! The server keeps the contents of files up to [`CACHE_FILE_MAX`] bytes
//! in its own memory, and a client that reads sequentially keeps
//! [`READ_AHEAD`] bytes asked for, in requests of [`READ_CHUNK`] bytes, and copies
//! its records out of the chunk received, so that a record costs no
//! round trip and usually no system call on either side. A reader that
//! seeks back to 0 after the end (a reread) keeps the read-ahead going
//! round the file.
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
//! let listener = shmpipe::Listener::bind(&path)?;
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

mod client;
mod server;

use std::io;

use zerocopy::{Immutable, IntoBytes, KnownLayout, TryFromBytes};

pub use client::{Client, File};
pub use server::{Server, Session};

/// Files one client may hold open at once.
pub const MAX_OPEN: usize = 256;
/// The largest read one request may ask for (the interface's frame limit
/// less room for the reply's header and result).
pub const MAX_READ: usize = (1 << 20) - 64;
/// Files up to this size are kept in the server's memory.
pub const CACHE_FILE_MAX: u64 = 64 << 20;
/// Bytes a sequential reader keeps asked for ahead (in chunks).
pub const READ_AHEAD: usize = 256 << 10;
/// Bytes a sequential reader asks for per request; its records are then
/// copied out of the chunk received, with no round trip each.
pub const READ_CHUNK: usize = 64 << 10;

/// What `open` tells about a file.
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
    /// The name leads outside the root (`..`, an absolute name, a symlink
    /// out), or the server may not read it.
    Denied = 2,
    /// Not a regular file (a directory, device, FIFO, socket).
    NotRegular = 3,
    /// The client holds [`MAX_OPEN`] files already.
    TooManyOpen = 4,
    /// No open file has this handle.
    BadHandle = 5,
    /// The name is empty, too long or not valid.
    BadName = 6,
    /// The server could not read the file.
    Io = 7,
}

impl FsError {
    /// The matching `io::Error`, naming `what`.
    pub fn into_io(self, what: &str) -> io::Error {
        use io::ErrorKind as K;
        let (kind, text) = match self {
            FsError::NotFound => (K::NotFound, "no such file"),
            FsError::Denied => (
                K::PermissionDenied,
                "outside the served root or not readable",
            ),
            FsError::NotRegular => (K::InvalidInput, "not a regular file"),
            FsError::TooManyOpen => (K::Other, "too many open files for this client"),
            FsError::BadHandle => (K::InvalidInput, "bad file handle"),
            FsError::BadName => (K::InvalidInput, "invalid name"),
            FsError::Io => (K::Other, "the server could not read it"),
        };
        io::Error::new(kind, format!("{what}: {text}"))
    }
}

/// The file server's RPC interface.
#[crate::service(version = 1, max_frame = 1048576)]
pub trait FileService {
    /// Opens the regular file `name` (relative to the root).
    fn open(&self, name: &str) -> Result<FileInfo, FsError>;
    /// The file's current length.
    fn size(&self, handle: u32) -> Result<u64, FsError>;
    /// Reads from `offset` into `buf` (the reply carries all of `buf`);
    /// returns how many bytes are file data (fewer at the end).
    fn read(&self, handle: u32, offset: u64, buf: &mut [u8]) -> Result<u32, FsError>;
    /// Closes the handle.
    fn close(&self, handle: u32) -> Result<(), FsError>;
    /// The names in directory `dir` ("" for the root), one per line.
    fn list(&self, dir: &str) -> Result<String, FsError>;
}
