//! The file server: name resolution beneath the root, the cache, and one
//! [`Session`] (open files, limits) per client.

use std::cell::{Cell, RefCell};
use std::fs;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixListener;
use std::path::{Component, Path};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustix::fs::{FileType, Mode, OFlags, RawDir, ResolveFlags, SeekFrom};

use super::cache::{self, Cache, Meta};
use super::limits::{Accounts, OpenLimits, Peer};
use super::{FileInfo, FileService, FileServiceServer, FsError, LIST_PAGE};
use shmpipe_core::{Listener, PeerCredentials};

/// The longest name accepted.
const MAX_NAME: usize = 4096;
/// The buffer one `getdents64` of `list` fills: what the kernel reads of
/// a directory per system call (at least one entry of a 255-byte name).
const LIST_BUF: usize = 32 << 10;

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
    cache: Cache,
    accounts: Mutex<Accounts>,
    /// Directory entries `list` has read, over all requests.
    listed: AtomicU64,
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
                cache: Cache::default(),
                accounts: Mutex::new(Accounts::default()),
                listed: AtomicU64::new(0),
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
    /// [`FileService`] it is served (callable in-process too). It is
    /// bounded per connection and in total (see [`OpenLimits`]); a session
    /// for a known peer is [`Server::session_for`].
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
        self.session_with(Peer::default())
    }

    /// A session for the client `peer` (as [`Listener::accept`] names
    /// it): its open files count against its process's and its user's
    /// bounds too (see [`OpenLimits`]). What [`Server::serve`] and
    /// [`Server::serve_threads`] give each client.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe::fs::{FileService, FsError, OpenLimits, Server};
    /// # let root = std::env::temp_dir().join(format!("shmpipe-fs-session-for-doc-{}", std::process::id()));
    /// # std::fs::create_dir_all(&root)?;
    /// # std::fs::write(root.join("notes.txt"), b"hello")?;
    /// let server = Server::new(&root)?;
    /// server.set_open_limits(OpenLimits { total: 8, per_user: 6, per_process: 1, per_connection: 4 });
    /// let peer = shmpipe::PeerCredentials { pid: 4242, uid: 1000, gid: 1000 };
    /// let (a, b) = (server.session_for(&peer), server.session_for(&peer));
    /// a.open("notes.txt").unwrap();
    /// assert_eq!(b.open("notes.txt"), Err(FsError::ProcessOpenLimit));
    /// let other = shmpipe::PeerCredentials { pid: 4243, ..peer };
    /// assert!(server.session_for(&other).open("notes.txt").is_ok());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn session_for(&self, peer: &PeerCredentials) -> Session {
        self.session_with(Peer::from(peer))
    }

    fn session_with(&self, peer: Peer) -> Session {
        Session {
            shared: self.shared.clone(),
            peer,
            open: Cell::new(0),
            files: RefCell::new(Vec::new()),
        }
    }

    /// Bounds the files this server (and its clones) holds open, from
    /// now on, instead of the defaults of the descriptor limit (see
    /// [`OpenLimits`]). Files open already stay open.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe::fs::{OpenLimits, Server};
    /// let server = Server::new(std::env::temp_dir())?;
    /// let limits = OpenLimits { total: 100, per_user: 80, per_process: 20, per_connection: 10 };
    /// server.set_open_limits(limits);
    /// assert_eq!(server.open_limits(), limits);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_open_limits(&self, limits: OpenLimits) {
        self.accounts().set = Some(limits);
    }

    /// The bounds on open files in force now: those set, or the defaults
    /// of the process's descriptor limit as it is now.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe::fs::{OpenLimits, Server};
    /// let server = Server::new(std::env::temp_dir())?;
    /// assert_eq!(server.open_limits(), OpenLimits::for_this_process());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn open_limits(&self) -> OpenLimits {
        self.accounts().limits()
    }

    /// Files the server holds open for its clients now, over all of them.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe::fs::FileService;
    /// # let root = std::env::temp_dir().join(format!("shmpipe-fs-open-files-doc-{}", std::process::id()));
    /// # std::fs::create_dir_all(&root)?;
    /// # std::fs::write(root.join("notes.txt"), b"hello")?;
    /// let server = shmpipe::fs::Server::new(&root)?;
    /// let session = server.session();
    /// session.open("notes.txt").unwrap();
    /// assert_eq!(server.open_files(), 1);
    /// drop(session);
    /// assert_eq!(server.open_files(), 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn open_files(&self) -> usize {
        self.accounts().total()
    }

    /// Directory entries this server has read for `list` requests, over
    /// all of them (each reads at most [`LIST_PAGE`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe::fs::FileService;
    /// # let root = std::env::temp_dir().join(format!("shmpipe-fs-listed-doc-{}", std::process::id()));
    /// # std::fs::create_dir_all(&root)?;
    /// let server = shmpipe::fs::Server::new(&root)?;
    /// server.session().list("", 0).unwrap();
    /// assert!(server.dir_entries_read() >= 2); // "." and ".." at least
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn dir_entries_read(&self) -> u64 {
        self.shared.listed.load(Ordering::Relaxed)
    }

    fn accounts(&self) -> std::sync::MutexGuard<'_, Accounts> {
        self.shared.accounts()
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
        shmpipe_rpc::serve_waitset(listener, |peer| FileServiceServer(self.session_for(peer)))
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
        shmpipe_rpc::serve(listener, |peer| FileServiceServer(self.session_for(peer)))
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
/// [`FileService`]; its limits are the server's [`OpenLimits`] and
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
    peer: Peer,
    /// Files open on this connection (counted in the shared accounts).
    open: Cell<usize>,
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
        // The process (or system) is out of descriptors: a bound set
        // above the descriptor limit, or descriptors used elsewhere.
        Errno::MFILE | Errno::NFILE => FsError::ServerOpenLimit,
        _ => FsError::Io,
    }
}

impl Shared {
    fn accounts(&self) -> std::sync::MutexGuard<'_, Accounts> {
        self.accounts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens `name` beneath the root, refusing anything but a regular
    /// file, without ever opening a device (it is looked at through an
    /// `O_PATH` descriptor first).
    fn open(&self, name: &str) -> Result<(fs::File, Meta), FsError> {
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
        let file = fs::File::from(fd);
        let meta = cache::meta(&file).map_err(errno)?;
        if !meta.regular {
            return Err(FsError::NotRegular);
        }
        Ok((file, meta))
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

impl Drop for Session {
    fn drop(&mut self) {
        self.shared.accounts().give(self.peer, self.open.get());
    }
}

impl FileService for Session {
    fn open(&self, name: &str) -> Result<FileInfo, FsError> {
        let mut files = self.files.borrow_mut();
        let slot = match files.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                files.push(None);
                files.len() - 1
            }
        };
        // A place is taken before the descriptor is opened, so that the
        // bounds hold however many clients open at once.
        self.shared.accounts().take(self.peer, self.open.get())?;
        let (file, meta) = match self.shared.open(name) {
            Ok(opened) => opened,
            Err(e) => {
                self.shared.accounts().give(self.peer, 1);
                return Err(e);
            }
        };
        self.open.set(self.open.get() + 1);
        let data = self.shared.cache.get(&file, &meta);
        let len = data.as_ref().map_or(meta.size, |d| d.len() as u64);
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
                self.open.set(self.open.get() - 1);
                self.shared.accounts().give(self.peer, 1);
                Ok(())
            }
            _ => Err(FsError::BadHandle),
        }
    }

    fn list(&self, dir: &str, cursor: u64) -> Result<String, FsError> {
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
        if cursor != 0 {
            // A cursor is a position the filesystem gave out (`d_off`);
            // any other is its to refuse or to read from.
            rustix::fs::seek(&fd, SeekFrom::Start(cursor)).map_err(|_| FsError::BadRequest)?;
        }
        // One page: at most LIST_PAGE entries taken from the directory,
        // through a buffer of LIST_BUF bytes per system call, whatever
        // the directory holds; the client asks for the next page, and
        // sorts. (Reading and sorting a whole directory per request held
        // every other client of a one-thread server for as long as that.)
        let mut buf = vec![MaybeUninit::<u8>::uninit(); LIST_BUF];
        let mut dir = RawDir::new(&fd, &mut buf);
        let mut names = String::new();
        let mut next = 0;
        let mut read = 0u64;
        let result = loop {
            if read == LIST_PAGE as u64 {
                break Ok(());
            }
            match dir.next() {
                None => {
                    next = 0; // the end
                    break Ok(());
                }
                Some(Err(e)) => break Err(errno(e)),
                Some(Ok(entry)) => {
                    read += 1;
                    next = entry.next_entry_cookie();
                    let name = entry.file_name().to_string_lossy();
                    if name != "." && name != ".." && !name.contains('\n') {
                        names.push_str(&name);
                        names.push('\n');
                    }
                }
            }
        };
        self.shared.listed.fetch_add(read, Ordering::Relaxed);
        result?;
        Ok(format!("{next}\n{names}"))
    }
}
