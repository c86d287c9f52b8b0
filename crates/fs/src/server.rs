//! The file server: name resolution beneath the root, the cache, and one
//! [`Session`] (open files, limits) per client.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixListener;
use std::path::{Component, Path};
use std::sync::{Arc, Mutex};

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};

use super::{FileInfo, FileService, FileServiceServer, FsError, CACHE_FILE_MAX, MAX_OPEN};
use shmpipe_core::Listener;

/// The longest name accepted.
const MAX_NAME: usize = 4096;
/// Bytes of file contents the server keeps in memory, over all files.
const CACHE_BUDGET: u64 = 512 << 20;

/// A file server for the regular files beneath one directory. Cheap to
/// clone: clones share the root and the cache.
///
/// # Examples
///
/// ```
/// let root = std::env::temp_dir().join(format!("shmpipe-fs-server-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&root)?;
/// std::fs::write(root.join("notes.txt"), b"hello")?;
/// let path = root.with_extension("sock");
/// # let _ = std::fs::remove_file(&path);
/// let server = shmpipe::fs::Server::new(&root)?;
/// let listener = shmpipe::fs::Server::bind(&path)?;
/// std::thread::spawn(move || server.serve(listener));
/// let client = shmpipe::fs::Client::connect(&path)?;
/// assert_eq!(client.open("notes.txt")?.len(), 5);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Server {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    root: OwnedFd,
    cache: Mutex<Cache>,
}

#[derive(Debug, Default)]
struct Cache {
    files: HashMap<(u64, u64), Cached>,
    bytes: u64,
}

/// A file's contents as of one (size, mtime).
#[derive(Debug)]
struct Cached {
    stamp: (i64, i64, i64),
    data: Arc<[u8]>,
}

impl Server {
    /// Serves the files beneath `root` (a directory: anything else is an
    /// error).
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(shmpipe::fs::Server::new(std::env::temp_dir()).is_ok());
    /// assert!(shmpipe::fs::Server::new("/no/such/dir").is_err());
    /// ```
    pub fn new(root: impl AsRef<Path>) -> io::Result<Server> {
        let root = rustix::fs::open(
            root.as_ref(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Server {
            shared: Arc::new(Shared {
                root,
                cache: Mutex::new(Cache::default()),
            }),
        })
    }

    /// Binds a listener at `path` whose reply rings hold
    /// [`REPLY_RING`](super::REPLY_RING) bytes, so that a client's whole
    /// read-ahead fits (with [`Listener::bind`]'s default rings a client
    /// reads ahead less).
    ///
    /// # Examples
    ///
    /// ```
    /// let root = std::env::temp_dir();
    /// let path = root.join(format!("shmpipe-fs-bind-doc-{}.sock", std::process::id()));
    /// let listener = shmpipe::fs::Server::bind(&path)?;
    /// assert_eq!(listener.path(), path);
    /// # drop(listener);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn bind(path: impl AsRef<Path>) -> io::Result<Listener> {
        let mut listener = Listener::bind(path)?;
        let mut options = shmpipe_core::Options::new();
        options.capacity(super::REPLY_RING);
        listener.set_options(options);
        Ok(listener)
    }

    /// A session for one client: its open files, and the
    /// [`FileService`] it is served (callable in-process too).
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe::fs::FileService;
    /// let root = std::env::temp_dir().join(format!("shmpipe-fs-session-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&root)?;
    /// std::fs::write(root.join("notes.txt"), b"in process")?;
    /// let session = shmpipe::fs::Server::new(&root)?.session();
    /// let info = session.open("notes.txt").unwrap();
    /// let mut buf = [0u8; 7];
    /// assert_eq!(session.read(info.handle, 3, &mut buf), Ok(7));
    /// assert_eq!(&buf, b"process");
    /// assert_eq!(session.close(info.handle), Ok(()));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn session(&self) -> Session {
        Session {
            shared: self.shared.clone(),
            files: RefCell::new(Vec::new()),
        }
    }

    /// Serves every client of `listener` from this one thread (through a
    /// [`WaitSet`](shmpipe_core::WaitSet)).
    ///
    /// # Examples
    ///
    /// ```
    /// # let root = std::env::temp_dir().join(format!("shmpipe-fs-serve-doc-{}", std::process::id()));
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
    pub fn serve(&self, listener: Listener) -> io::Result<()> {
        shmpipe_rpc::serve_waitset(listener, |_| FileServiceServer(self.session()))
    }

    /// Serves every client of `listener`, each on its own thread.
    ///
    /// # Examples
    ///
    /// ```
    /// # let root = std::env::temp_dir().join(format!("shmpipe-fs-threads-doc-{}", std::process::id()));
    /// # std::fs::create_dir_all(&root)?;
    /// # for (name, text) in [("notes.txt", &b"hello, file server"[..])] { std::fs::write(root.join(name), text)?; }
    /// # let path = root.with_extension("sock");
    /// # let _ = std::fs::remove_file(&path);
    /// # let server = shmpipe::fs::Server::new(&root)?;
    /// # let listener = shmpipe::fs::Server::bind(&path)?;
    /// # std::thread::spawn(move || server.serve_threads(listener));
    /// let client = shmpipe::fs::Client::connect(&path)?;
    /// assert_eq!(client.open("notes.txt")?.len(), 18);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn serve_threads(&self, listener: Listener) -> io::Result<()> {
        shmpipe_rpc::serve(listener, |_| FileServiceServer(self.session()))
    }

    /// Serves over a Unix socket instead (the same server on kernel IPC).
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe::fs::{Client, Server};
    /// let root = std::env::temp_dir().join(format!("shmpipe-fs-serve-unix-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&root)?;
    /// std::fs::write(root.join("notes.txt"), b"hello")?;
    /// let path = root.with_extension("sock");
    /// # let _ = std::fs::remove_file(&path);
    /// let server = Server::new(&root)?;
    /// let listener = std::os::unix::net::UnixListener::bind(&path)?;
    /// std::thread::spawn(move || server.serve_unix(listener));
    /// let client = Client::with_transport(shmpipe::rpc::UnixTransport::connect(&path)?)?;
    /// assert_eq!(client.open("notes.txt")?.len(), 5);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn serve_unix(&self, listener: UnixListener) -> io::Result<()> {
        shmpipe_rpc::serve_unix(listener, || FileServiceServer(self.session()))
    }
}

/// One client's view of the server: its open files. It implements
/// [`FileService`]; its limits are [`MAX_OPEN`] files and
/// [`MAX_READ`](super::MAX_READ) bytes a read.
///
/// # Examples
///
/// ```
/// use shmpipe::fs::{FileService, FsError};
/// let session = shmpipe::fs::Server::new(std::env::temp_dir())?.session();
/// assert_eq!(session.open("../etc/passwd"), Err(FsError::Denied));
/// assert_eq!(session.size(7), Err(FsError::BadHandle));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Session {
    shared: Arc<Shared>,
    files: RefCell<Vec<Option<Open>>>,
}

#[derive(Debug)]
struct Open {
    file: fs::File,
    data: Option<Arc<[u8]>>,
}

/// Checks a name before the kernel sees it: relative, no NUL, and no
/// `..` that climbs above the root as written (`sub/../a.txt` stays
/// inside and is the kernel's to resolve; `../a` and `sub/../../a` are
/// refused here). This is only the early, obvious refusal: `openat2`'s
/// `RESOLVE_BENEATH` is what keeps every walk inside, symlinks included.
fn check_name(name: &str) -> Result<&str, FsError> {
    if name.is_empty() || name.len() > MAX_NAME || name.contains('\0') {
        return Err(FsError::BadName);
    }
    let p = Path::new(name);
    let mut depth = 0usize;
    for c in p.components() {
        depth = match c {
            Component::Normal(_) => depth + 1,
            Component::CurDir => depth,
            Component::ParentDir => depth.checked_sub(1).ok_or(FsError::Denied)?,
            Component::RootDir | Component::Prefix(_) => return Err(FsError::Denied),
        };
    }
    Ok(name)
}

fn errno(e: rustix::io::Errno) -> FsError {
    use rustix::io::Errno;
    match e {
        Errno::NOENT | Errno::NOTDIR => FsError::NotFound,
        // EXDEV: the walk would leave the root; ELOOP: a magic link.
        Errno::XDEV | Errno::LOOP | Errno::ACCESS | Errno::PERM => FsError::Denied,
        Errno::NAMETOOLONG | Errno::INVAL => FsError::BadName,
        _ => FsError::Io,
    }
}

fn stamp(st: &rustix::fs::Stat) -> (i64, i64, i64) {
    (st.st_size, st.st_mtime, st.st_mtime_nsec as i64)
}

impl Shared {
    /// Opens `name` beneath the root, refusing anything but a regular
    /// file, without ever opening a device (it is looked at through an
    /// `O_PATH` descriptor first).
    fn open(&self, name: &str) -> Result<(fs::File, rustix::fs::Stat), FsError> {
        let name = check_name(name)?;
        let how = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
        let path = rustix::fs::openat2(
            &self.root,
            name,
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            how,
        )
        .map_err(errno)?;
        let st = rustix::fs::fstat(&path).map_err(errno)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(FsError::NotRegular);
        }
        // Reopen that same inode for reading through procfs; without
        // procfs, open by name again and check the type once more.
        let fd = match rustix::fs::open(
            format!("/proc/self/fd/{}", raw(&path)),
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(_) => rustix::fs::openat2(
                &self.root,
                name,
                OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY,
                Mode::empty(),
                how,
            )
            .map_err(errno)?,
        };
        let st = rustix::fs::fstat(&fd).map_err(errno)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(FsError::NotRegular);
        }
        Ok((fs::File::from(fd), st))
    }

    /// The file's contents from the cache, read in if it fits. `None` when
    /// the cache has no room: the file is then served with `pread`, never
    /// from a private copy (which one client could multiply by MAX_OPEN).
    fn cached(&self, file: &fs::File, st: &rustix::fs::Stat) -> Option<Arc<[u8]>> {
        let size = u64::try_from(st.st_size).ok()?;
        if size > CACHE_FILE_MAX {
            return None;
        }
        let key = (st.st_dev, st.st_ino);
        {
            let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            let stale = match cache.files.get(&key) {
                Some(c) if c.stamp == stamp(st) => return Some(c.data.clone()),
                Some(c) => c.data.len() as u64,
                None => 0,
            };
            if cache.bytes - stale + size > CACHE_BUDGET {
                return None; // no room: not even read
            }
        }
        let mut data = vec![0u8; size as usize];
        file.read_exact_at(&mut data, 0).ok()?;
        let data: Arc<[u8]> = data.into();
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = cache.files.remove(&key) {
            cache.bytes -= old.data.len() as u64;
        }
        if cache.bytes + size > CACHE_BUDGET {
            return None; // filled meanwhile: the copy is dropped, not kept
        }
        cache.bytes += size;
        cache.files.insert(
            key,
            Cached {
                stamp: stamp(st),
                data: data.clone(),
            },
        );
        Some(data)
    }
}

fn raw(fd: &OwnedFd) -> i32 {
    use std::os::fd::AsRawFd;
    fd.as_fd().as_raw_fd()
}

impl Session {
    fn with_open<R>(
        &self,
        handle: u32,
        f: impl FnOnce(&Open) -> Result<R, FsError>,
    ) -> Result<R, FsError> {
        let files = self.files.borrow();
        match files.get(handle as usize) {
            Some(Some(open)) => f(open),
            _ => Err(FsError::BadHandle),
        }
    }
}

impl FileService for Session {
    fn open(&self, name: &str) -> Result<FileInfo, FsError> {
        let mut files = self.files.borrow_mut();
        let slot = match files.iter().position(Option::is_none) {
            Some(i) => i,
            None if files.len() < MAX_OPEN => {
                files.push(None);
                files.len() - 1
            }
            None => return Err(FsError::TooManyOpen),
        };
        let (file, st) = self.shared.open(name)?;
        let data = self.shared.cached(&file, &st);
        let len = data
            .as_ref()
            .map_or(st.st_size.max(0) as u64, |d| d.len() as u64);
        files[slot] = Some(Open { file, data });
        Ok(FileInfo {
            handle: slot as u32,
            reserved: 0,
            len,
        })
    }

    fn size(&self, handle: u32) -> Result<u64, FsError> {
        self.with_open(handle, |o| match &o.data {
            Some(d) => Ok(d.len() as u64),
            None => o.file.metadata().map(|m| m.len()).map_err(|_| FsError::Io),
        })
    }

    #[inline]
    fn read(&self, handle: u32, offset: u64, buf: &mut [u8]) -> Result<u32, FsError> {
        self.with_open(handle, |o| match &o.data {
            Some(d) => {
                let start = offset.min(d.len() as u64) as usize;
                let n = buf.len().min(d.len() - start);
                buf[..n].copy_from_slice(&d[start..start + n]);
                Ok(n as u32)
            }
            None => {
                let mut got = 0;
                while got < buf.len() {
                    match o.file.read_at(&mut buf[got..], offset + got as u64) {
                        Ok(0) => break,
                        Ok(n) => got += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => return Err(FsError::Io),
                    }
                }
                Ok(got as u32)
            }
        })
    }

    #[inline]
    fn read_chunk(&self, handle: u32, offset: u64, buf: &mut [u8]) -> Result<u32, FsError> {
        let Some((prefix, data)) = buf.split_at_mut_checked(super::CHUNK_PREFIX) else {
            return Err(FsError::BadRequest);
        };
        let r = self.read(handle, offset, data);
        let (n, e) = match r {
            Ok(n) => (n, 0),
            Err(e) => (0, e as u32),
        };
        prefix[..4].copy_from_slice(&n.to_ne_bytes());
        prefix[4..].copy_from_slice(&e.to_ne_bytes());
        r
    }

    fn close(&self, handle: u32) -> Result<(), FsError> {
        let mut files = self.files.borrow_mut();
        match files.get_mut(handle as usize) {
            Some(slot @ Some(_)) => {
                *slot = None;
                Ok(())
            }
            _ => Err(FsError::BadHandle),
        }
    }

    fn list(&self, dir: &str) -> Result<String, FsError> {
        let dir = if dir.is_empty() {
            "."
        } else {
            check_name(dir)?
        };
        let fd = rustix::fs::openat2(
            &self.shared.root,
            dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(errno)?;
        let mut names = Vec::new();
        for entry in rustix::fs::Dir::new(fd).map_err(errno)? {
            let entry = entry.map_err(errno)?;
            let name = entry.file_name().to_string_lossy();
            if name != "." && name != ".." && !name.contains('\n') {
                names.push(name.into_owned());
            }
        }
        names.sort();
        // Stay inside one reply: whole names only.
        let mut out = String::new();
        for name in names {
            if out.len() + name.len() + 1 > super::MAX_READ {
                break;
            }
            out.push_str(&name);
            out.push('\n');
        }
        Ok(out)
    }
}
