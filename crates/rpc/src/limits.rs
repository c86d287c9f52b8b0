//! What a server may spend on its clients ([`ServeLimits`]), the tally of
//! clients per process and per user that holds a server to it, and the
//! refusal a shed client gets.

use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use shmpipe_core::PeerCredentials;

use crate::wire::{self, HEADER};

/// Clients a server serves at once when not told otherwise: 4096.
///
/// For a waitset server that is six descriptors a client, its rings, and
/// a few KiB while idle; for a thread-per-client server as many threads
/// (tasks in the server's pids cgroup, and a stack each). More than the
/// clients of one machine's service usually are (a server of 1,000
/// clients keeps working), few enough that a flood of connections costs a
/// bounded share of the machine.
///
/// # Examples
///
/// ```
/// assert_eq!(shmpipe::rpc::DEFAULT_CLIENTS, 4096);
/// ```
pub const DEFAULT_CLIENTS: usize = 4096;

/// Clients of one process a server serves at once when not told
/// otherwise: 64 (or [`ServeLimits::clients`], if smaller).
///
/// A program rarely needs more than a few connections to one server; 64
/// leaves room for a pool of them, while a process that opens connections
/// in a loop holds 64 threads of a thread-per-client server at most, well
/// under the smallest pids limits met in practice (systemd's `TasksMax`
/// default is 15% of `pid_max`, 4,915 of the usual 32,768).
///
/// # Examples
///
/// ```
/// assert_eq!(shmpipe::rpc::DEFAULT_PER_PROCESS, 64);
/// ```
pub const DEFAULT_PER_PROCESS: usize = 64;

/// Request and reply bytes a waitset server holds for all its clients
/// together when not told otherwise: 64 MiB, 64 frames of the largest
/// size the file service takes (1 MiB) in flight at once.
///
/// # Examples
///
/// ```
/// assert_eq!(shmpipe::rpc::DEFAULT_BUFFERED, 64 << 20);
/// ```
pub const DEFAULT_BUFFERED: usize = 64 << 20;

/// How much a server spends on its clients, and the servers that keep to
/// it ([`serve`](Self::serve), [`serve_unix`](Self::serve_unix),
/// [`serve_waitset`](Self::serve_waitset),
/// [`serve_threads`](Self::serve_threads); the functions of the same names
/// use [`ServeLimits::new`]).
///
/// A server treats every client as a stranger: past a bound it sheds the
/// newest connection of whoever is at the bound (with a
/// [`BUSY`](crate::wire::BUSY) reply that says why, which the client
/// returns from its `connect` as `ConnectionRefused`), and goes on
/// serving everyone else. Clients are counted per server, per peer user
/// and per peer process (`SO_PEERCRED`), since the clients of a server
/// usually all run as one user: by default one user may hold three
/// quarters of the places, so other users keep a quarter, and one
/// process [`DEFAULT_PER_PROCESS`], so that a process opening connections
/// in a loop locks out neither the other processes nor other users. (A peer in
/// a pid namespace this one cannot see has pid 0: it is counted per user
/// only.)
///
/// # Examples
///
/// ```
/// #[shmpipe::service]
/// pub trait Ping { fn ping(&self) -> u8; }
/// struct P;
/// impl Ping for P { fn ping(&self) -> u8 { 7 } }
///
/// let path = std::env::temp_dir().join(format!("shmpipe-limits-doc-{}.sock", std::process::id()));
/// let listener = shmpipe::Listener::bind(&path)?;
/// let mut limits = shmpipe::rpc::ServeLimits::new();
/// limits.per_process(1);
/// std::thread::spawn(move || limits.serve_waitset(listener, |_| PingServer(P)));
/// let first = PingClient::connect(&path)?;
/// assert_eq!(first.ping()?, 7);
/// // One connection per process: the second is shed, and told why.
/// let second = PingClient::connect(&path).unwrap_err();
/// assert_eq!(second.kind(), std::io::ErrorKind::ConnectionRefused);
/// assert!(second.to_string().contains("per process"), "{second}");
/// drop(first);
/// # std::fs::remove_file(&path)?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeLimits {
    clients: usize,
    per_user: Option<usize>,
    per_process: Option<usize>,
    buffered: usize,
}

impl Default for ServeLimits {
    fn default() -> Self {
        Self::new()
    }
}

impl ServeLimits {
    /// The defaults: [`DEFAULT_CLIENTS`] clients, three quarters of them
    /// per user, [`DEFAULT_PER_PROCESS`] per process, [`DEFAULT_BUFFERED`]
    /// bytes buffered.
    ///
    /// # Examples
    ///
    /// ```
    /// let limits = shmpipe::rpc::ServeLimits::new();
    /// assert_eq!(limits, shmpipe::rpc::ServeLimits::default());
    /// ```
    pub fn new() -> Self {
        ServeLimits {
            clients: DEFAULT_CLIENTS,
            per_user: None,
            per_process: None,
            buffered: DEFAULT_BUFFERED,
        }
    }

    /// Most clients served at once (for [`serve`](Self::serve) and
    /// [`serve_unix`](Self::serve_unix), threads), at least one. The
    /// bound per user, if not set, follows it (three quarters); none is
    /// above it.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut limits = shmpipe::rpc::ServeLimits::new();
    /// limits.clients(64).per_process(8);
    /// ```
    pub fn clients(&mut self, n: usize) -> &mut Self {
        self.clients = n.max(1);
        self
    }

    /// Most clients of one user (uid) at once, at least one.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut limits = shmpipe::rpc::ServeLimits::new();
    /// limits.per_user(100);
    /// ```
    pub fn per_user(&mut self, n: usize) -> &mut Self {
        self.per_user = Some(n.max(1));
        self
    }

    /// Most clients of one process at once, at least one.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut limits = shmpipe::rpc::ServeLimits::new();
    /// limits.per_process(4);
    /// ```
    pub fn per_process(&mut self, n: usize) -> &mut Self {
        self.per_process = Some(n.max(1));
        self
    }

    /// Most request and reply bytes a waitset server
    /// ([`serve_waitset`](Self::serve_waitset); each thread of
    /// [`serve_threads`](Self::serve_threads) its share) holds for its
    /// clients together: frames in part received, replies waiting for
    /// room. Past it the client holding the most is shed. Each client may
    /// hold two frames of its interface's `max_frame` at most, whatever
    /// this says.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut limits = shmpipe::rpc::ServeLimits::new();
    /// limits.buffered(16 << 20);
    /// ```
    pub fn buffered(&mut self, bytes: usize) -> &mut Self {
        self.buffered = bytes;
        self
    }

    pub(crate) fn max_clients(&self) -> usize {
        self.clients
    }

    fn max_per_user(&self) -> usize {
        self.per_user
            .unwrap_or((self.clients - self.clients / 4).max(1))
    }

    fn max_per_process(&self) -> usize {
        self.per_process
            .unwrap_or(DEFAULT_PER_PROCESS.min(self.clients))
    }

    pub(crate) fn max_buffered(&self) -> usize {
        self.buffered
    }
}

/// Clients served now: in all, per user, per process.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    total: usize,
    by_user: HashMap<u32, usize>,
    by_process: HashMap<i32, usize>,
}

impl Tally {
    /// Counts `peer` in, or says why not.
    fn admit(&mut self, limits: &ServeLimits, peer: &PeerCredentials) -> Result<(), String> {
        if self.total >= limits.max_clients() {
            return Err(format!(
                "the server serves {} clients, its limit (ServeLimits::clients)",
                self.total
            ));
        }
        let user = self.by_user.get(&peer.uid).copied().unwrap_or(0);
        if user >= limits.max_per_user() {
            return Err(format!(
                "user {} has {user} connections to this server, at most {} per user",
                peer.uid,
                limits.max_per_user()
            ));
        }
        let process = self.by_process.get(&peer.pid).copied().unwrap_or(0);
        if peer.pid != 0 && process >= limits.max_per_process() {
            return Err(format!(
                "process {} has {process} connections to this server, at most {} per process",
                peer.pid,
                limits.max_per_process()
            ));
        }
        self.total += 1;
        *self.by_user.entry(peer.uid).or_default() += 1;
        if peer.pid != 0 {
            *self.by_process.entry(peer.pid).or_default() += 1;
        }
        Ok(())
    }

    fn leave(&mut self, peer: &PeerCredentials) {
        self.total -= 1;
        drop_one(&mut self.by_user, peer.uid);
        if peer.pid != 0 {
            drop_one(&mut self.by_process, peer.pid);
        }
    }
}

fn drop_one<K: std::hash::Hash + Eq>(map: &mut HashMap<K, usize>, key: K) {
    if let Some(n) = map.get_mut(&key) {
        *n -= 1;
        if *n == 0 {
            map.remove(&key);
        }
    }
}

/// A client's place in a server's tally, given back when dropped (with
/// the client's connection or thread).
#[derive(Debug)]
pub(crate) struct Seat {
    tally: Arc<Mutex<Tally>>,
    peer: PeerCredentials,
}

impl Seat {
    /// A place for `peer`, or why there is none.
    pub(crate) fn take(
        tally: &Arc<Mutex<Tally>>,
        limits: &ServeLimits,
        peer: &PeerCredentials,
    ) -> Result<Seat, String> {
        lock(tally).admit(limits, peer)?;
        Ok(Seat {
            tally: tally.clone(),
            peer: *peer,
        })
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        lock(&self.tally).leave(&self.peer);
    }
}

fn lock(tally: &Mutex<Tally>) -> std::sync::MutexGuard<'_, Tally> {
    tally.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How long an accept loop pauses after a failure that the next try
/// would likely meet again (out of memory, descriptors or threads): long
/// enough not to spin, short enough that a freed resource is soon used.
pub(crate) const BACK_OFF: Duration = Duration::from_millis(10);

/// Tells a shed client why, in a [`BUSY`](wire::BUSY) reply, without
/// waiting (`w` must not block: a full ring or socket loses the reason,
/// and the client sees the hang-up alone).
pub(crate) fn refuse(w: &mut impl Write, why: &str) {
    let text = format!("{why}; try again later");
    let mut frame = Vec::with_capacity(HEADER + text.len());
    frame.extend_from_slice(&wire::header(text.len() as u32, wire::BUSY));
    frame.extend_from_slice(text.as_bytes());
    let _ = w.write(&frame);
    let _ = w.flush();
}

/// Errors of `accept` or of making a connection's thread that concern
/// this one try, not the server: out of descriptors, memory, buffers or
/// tasks; a connection aborted before it was taken.
pub(crate) fn passing(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::EMFILE
                | libc::ENFILE
                | libc::ENOBUFS
                | libc::ENOMEM
                | libc::EAGAIN
                | libc::ECONNABORTED
                | libc::EPROTO
                | libc::EPERM
        )
    ) || e.kind() == io::ErrorKind::Interrupted
}
