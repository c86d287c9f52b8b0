//! Bounds on the files the server holds open: per connection, per client
//! process, per user and in total, so that no client can take the
//! descriptors every other client (and every new connection) needs.

use std::collections::HashMap;

use shmpipe_core::PeerCredentials;

use super::{FsError, MAX_OPEN};

/// How many files the server holds open for its clients, at most: in
/// total, per user (uid), per client process (pid) and per connection.
/// An open past any of them fails with the error that names it (see
/// [`FsError`]), for that client only: the others' opens go on.
///
/// The default ([`OpenLimits::for_descriptor_limit`] of the process's
/// soft `RLIMIT_NOFILE`, read at each open unless the server was given
/// limits with [`Server::set_open_limits`](super::Server::set_open_limits))
/// keeps half of the process's descriptors for files and the other half
/// for connections (six descriptors each), the listener's pending
/// handshakes and reading the cache; one user gets three quarters of the
/// files, one process a quarter, one connection [`MAX_OPEN`].
///
/// The per-process and per-user bounds need the peer's credentials
/// ([`Server::session_for`](super::Server::session_for), which the
/// shmpipe servers use); a session without them ([`Server::session`],
/// the Unix-socket server) is bounded per connection and in total.
///
/// # Examples
///
/// ```
/// use shmpipe::fs::OpenLimits;
/// let l = OpenLimits::for_descriptor_limit(20_000);
/// assert_eq!((l.total, l.per_user, l.per_process, l.per_connection), (10_000, 7_500, 2_500, 256));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenLimits {
    /// Files open over all clients.
    pub total: usize,
    /// Files open over all connections of one user (peer uid).
    pub per_user: usize,
    /// Files open over all connections of one client process (peer pid).
    pub per_process: usize,
    /// Files open on one connection.
    pub per_connection: usize,
}

impl OpenLimits {
    /// The defaults for a process that may hold `fds` descriptors (its
    /// soft `RLIMIT_NOFILE`): half of them for files in total, three
    /// quarters of that per user, a quarter per process, and
    /// [`MAX_OPEN`] per connection (none of them below 1).
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe::fs::OpenLimits;
    /// let l = OpenLimits::for_descriptor_limit(1024);
    /// assert_eq!((l.total, l.per_user, l.per_process), (512, 384, 128));
    /// assert!(l.per_connection <= shmpipe::fs::MAX_OPEN);
    /// ```
    pub fn for_descriptor_limit(fds: u64) -> OpenLimits {
        let total = usize::try_from(fds / 2).unwrap_or(usize::MAX).max(1);
        OpenLimits {
            total,
            per_user: (total / 4 * 3).max(1),
            per_process: (total / 4).max(1),
            per_connection: MAX_OPEN.min(total),
        }
    }

    /// The defaults for this process now (its soft `RLIMIT_NOFILE`).
    ///
    /// # Examples
    ///
    /// ```
    /// let l = shmpipe::fs::OpenLimits::for_this_process();
    /// assert!(l.per_process <= l.per_user && l.per_user <= l.total);
    /// ```
    pub fn for_this_process() -> OpenLimits {
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        OpenLimits::for_descriptor_limit(soft.unwrap_or(u64::MAX))
    }
}

/// Who a session serves: the peer's uid and pid, when known (a pid of 0,
/// a peer in a pid namespace we cannot see, is no process of ours to
/// count by).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Peer {
    pub(crate) uid: Option<u32>,
    pub(crate) pid: Option<i32>,
}

impl From<&PeerCredentials> for Peer {
    fn from(c: &PeerCredentials) -> Peer {
        Peer {
            uid: Some(c.uid),
            pid: (c.pid != 0).then_some(c.pid),
        }
    }
}

/// The count under `k` in `m`; 0 for no key.
fn count<K: std::hash::Hash + Eq>(m: &HashMap<K, usize>, k: Option<K>) -> usize {
    k.and_then(|k| m.get(&k).copied()).unwrap_or(0)
}

/// The files open now, counted as the limits count them.
#[derive(Debug, Default)]
pub(crate) struct Accounts {
    /// Limits set by the user; `None`: the defaults of the descriptor limit.
    pub(crate) set: Option<OpenLimits>,
    total: usize,
    users: HashMap<u32, usize>,
    processes: HashMap<i32, usize>,
}

impl Accounts {
    pub(crate) fn limits(&self) -> OpenLimits {
        self.set.unwrap_or_else(OpenLimits::for_this_process)
    }

    /// Takes a place for one more file of `peer`, whose connection holds
    /// `on_connection` already; the error names the first bound it hits.
    pub(crate) fn take(&mut self, peer: Peer, on_connection: usize) -> Result<(), FsError> {
        let l = self.limits();
        if on_connection >= l.per_connection {
            return Err(FsError::TooManyOpen);
        }
        if count(&self.processes, peer.pid) >= l.per_process {
            return Err(FsError::ProcessOpenLimit);
        }
        if count(&self.users, peer.uid) >= l.per_user {
            return Err(FsError::UserOpenLimit);
        }
        if self.total >= l.total {
            return Err(FsError::ServerOpenLimit);
        }
        self.total += 1;
        if let Some(uid) = peer.uid {
            *self.users.entry(uid).or_default() += 1;
        }
        if let Some(pid) = peer.pid {
            *self.processes.entry(pid).or_default() += 1;
        }
        Ok(())
    }

    /// Gives back `n` places of `peer`.
    pub(crate) fn give(&mut self, peer: Peer, n: usize) {
        self.total -= n;
        fn sub<K: std::hash::Hash + Eq>(m: &mut HashMap<K, usize>, k: Option<K>, n: usize) {
            if let Some(k) = k {
                if let Some(c) = m.get_mut(&k) {
                    *c -= n;
                    if *c == 0 {
                        m.remove(&k);
                    }
                }
            }
        }
        sub(&mut self.users, peer.uid, n);
        sub(&mut self.processes, peer.pid, n);
    }

    pub(crate) fn total(&self) -> usize {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(
        total: usize,
        per_user: usize,
        per_process: usize,
        per_connection: usize,
    ) -> Accounts {
        Accounts {
            set: Some(OpenLimits {
                total,
                per_user,
                per_process,
                per_connection,
            }),
            ..Accounts::default()
        }
    }

    #[test]
    fn each_bound_is_named_and_others_still_open() {
        let mut a = limits(10, 6, 3, 2);
        let p = |uid, pid| Peer {
            uid: Some(uid),
            pid: Some(pid),
        };
        assert_eq!(a.take(p(1, 10), 2), Err(FsError::TooManyOpen));
        for _ in 0..3 {
            a.take(p(1, 10), 0).unwrap();
        }
        assert_eq!(a.take(p(1, 10), 0), Err(FsError::ProcessOpenLimit));
        for _ in 0..3 {
            a.take(p(1, 11), 0).unwrap();
        }
        assert_eq!(a.take(p(1, 12), 0), Err(FsError::UserOpenLimit));
        for _ in 0..3 {
            a.take(p(2, 20), 0).unwrap();
        }
        a.take(Peer::default(), 0).unwrap();
        assert_eq!(a.take(p(3, 30), 0), Err(FsError::ServerOpenLimit));
        a.give(p(1, 10), 3);
        a.take(p(3, 30), 0).unwrap();
        assert_eq!(a.total(), 8);
        assert!(!a.processes.contains_key(&10));
    }
}
