//! Handing a pipe end to another process: to a program you spawn, by
//! descriptor inheritance across `exec`, or to any process over a Unix
//! socket (`SCM_RIGHTS`). (`fork` needs nothing here: `crate::shared`
//! counts the child's copy.)
//!
//! A copy handed on counts as a holder of the end from the moment it is
//! sent (as a copy a `fork` makes does): both copies then take turns
//! under the end's lock, until one finds itself the only one left (see
//! `crate::shared` and docs/shared-ends.md).
//!
//! An end travels as four descriptors: its own region, the peer's region,
//! and its wake channel as two (see `sys::Bell`): an end a handshake made
//! sends its wake/liveness socket twice (the receiver keeps one copy), an
//! end [`pipe`](crate::pipe) made sends the read end of its wake pipe and
//! its waker (its description of the peer's wake pipe), which the receiver
//! reopens as its own private description (see `sys::open_waker`). The
//! receiver maps the regions anew and checks everything as it would a
//! stranger's; but an end with wake pipes stays one, so whoever sends or
//! receives it can stall the other process's reads, writes and wakes on
//! those pipes (see SECURITY.md): hand such an end only to, and take it
//! only from, a process you trust.

use std::collections::HashSet;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::sync::Mutex;

use shmpipe_ring::layout::Role;

use crate::error;
use crate::setup::{self, OwnRegion};
use crate::sys;
use crate::wait::{End, Settings, Side};
use crate::{Reader, Receiver, Sender, Writer};

/// Environment variables that name inherited ends start with this.
const ENV_PREFIX: &str = "SHMPIPE_END_";

/// Names already taken by `from_env`, so no descriptor is owned twice.
static TAKEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// The four end types, as far as moving them is concerned.
pub(crate) trait Handoff: Sized {
    /// A tag that keeps a Reader from being rebuilt as a Writer.
    const KIND: u8;
    /// Which region of the pipe is this end's own.
    const ROLE: Role;
    fn side(&self) -> &Side;
    /// Publishes what is committed, so the next owner starts after it.
    fn publish(&mut self);
    /// The end's gate (see `crate::shared`).
    fn gate(&self) -> &std::sync::Arc<shmpipe_ring::turns::Gate>;
    fn attach(own: OwnRegion, peer: OwnedFd, bell: sys::Bell) -> io::Result<Self>;
}

macro_rules! handoff {
    ($ty:ident, $kind:literal, $role:expr, $attach:path, $example:literal, $idx:literal) => {
        impl Handoff for $ty {
            const KIND: u8 = $kind;
            const ROLE: Role = $role;
            fn side(&self) -> &Side {
                &self.end.side
            }
            fn publish(&mut self) {
                self.end.publish();
            }
            fn gate(&self) -> &std::sync::Arc<shmpipe_ring::turns::Gate> {
                self.end.ring.gate()
            }
            fn attach(own: OwnRegion, peer: OwnedFd, bell: sys::Bell) -> io::Result<Self> {
                let (ring, own_fd) = $attach(own, peer.as_fd())?;
                // A copy handed on arrives: it starts taking turns.
                crate::shared::arrived(ring.gate());
                Ok($ty {
                    end: End {
                        ring,
                        side: Side::new(bell, own_fd, peer, Settings::default()),
                    },
                })
            }
        }

        impl $ty {
            /// Arranges for the program `cmd` spawns to inherit this end
            /// under `name`; the child calls `from_env(name)`. Duplicates
            /// of the descriptors live in `cmd` until it is dropped, so
            /// this end may be dropped (or kept) meanwhile: dropped
            /// before the spawn, the child holds it alone from its first
            /// call (on its fast path); kept, the two copies take turns
            /// (see docs/shared-ends.md). What this end has committed is
            /// published first, so the child starts after it; this copy,
            /// once the child has used the end, no longer publishes when
            /// dropped.
            ///
            /// # Examples
            ///
            /// ```no_run
            /// use std::process::Command;
            #[doc = concat!("let mut pair = shmpipe::", $example, "()?;")]
            /// let mut cmd = Command::new("worker"); // calls from_env("input")
            #[doc = concat!("pair.", $idx, ".pass_to(&mut cmd, \"input\")?;")]
            /// let mut child = cmd.spawn()?;
            /// drop(cmd); // the child holds its copy now
            /// # child.wait()?;
            /// # Ok::<(), std::io::Error>(())
            /// ```
            pub fn pass_to(&mut self, cmd: &mut Command, name: &str) -> io::Result<()> {
                pass_to(self, cmd, name)
            }

            /// Takes the end a parent passed with `pass_to(.., name)`.
            ///
            /// # Errors
            ///
            /// `NotFound` if no end of that name was passed (or it was
            /// taken already); `InvalidData` if it is of another type or
            /// its descriptors are not what an end is made of.
            ///
            /// # Examples
            ///
            /// ```
            /// // In a program spawned after `pass_to(&mut cmd, "input")`
            /// // this is the end; here nothing was passed.
            #[doc = concat!("match shmpipe::", stringify!($ty), "::from_env(\"input\") {")]
            ///     Ok(end) => drop(end),
            ///     Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound),
            /// }
            /// ```
            pub fn from_env(name: &str) -> io::Result<Self> {
                from_env(name)
            }

            /// Sends this end over a Unix socket; the receiving process
            /// calls `recv_from`. This process's copy stays usable, but
            /// only one process should use the end afterwards. What this
            /// end has committed is published first, so the receiver starts
            /// after it; this copy, once the receiver has used the end, no
            /// longer publishes when dropped.
            ///
            /// # Examples
            ///
            /// ```
            /// use std::os::unix::net::UnixStream;
            /// let (here, there) = UnixStream::pair()?;
            #[doc = concat!("let mut pair = shmpipe::Options::new().capacity(4096).", $example, "()?;")]
            #[doc = concat!("pair.", $idx, ".send_over(&here)?;")]
            /// // Usually another process receives it.
            #[doc = concat!("let end = shmpipe::", stringify!($ty), "::recv_from(&there)?;")]
            /// assert_eq!(end.capacity(), 4096);
            /// # Ok::<(), std::io::Error>(())
            /// ```
            pub fn send_over(&mut self, socket: &UnixStream) -> io::Result<()> {
                Handoff::publish(self);
                crate::shared::hand_on(Handoff::gate(self));
                let s = self.side();
                sys::send_fds(socket.as_fd(), &[Self::KIND], &fds(s))
            }

            /// The four descriptors this end is made of (its own
            /// region, the peer's region, and its wake channel: its
            /// wake/liveness socket twice for an end a
            /// [`Listener`](crate::Listener) or [`connect`](crate::connect)
            /// made, the read end of its wake pipe and its waker of the
            /// peer's wake pipe for one [`pipe`](crate::pipe) made), to
            /// hand it to another process by a means of your own, as
            /// Python's `multiprocessing` does; [`from_fds`](Self::from_fds)
            /// rebuilds it there from duplicates of them. This end stays
            /// usable, but only one process should use the end afterwards.
            ///
            /// # Examples
            ///
            /// ```
            #[doc = concat!("let pair = shmpipe::", $example, "()?;")]
            #[doc = concat!("let fds = pair.", $idx, ".as_fds();")]
            /// let owned = fds.map(|fd| fd.try_clone_to_owned().unwrap());
            #[doc = concat!("let again = shmpipe::", stringify!($ty), "::from_fds(owned)?;")]
            #[doc = concat!("assert_eq!(again.capacity(), pair.", $idx, ".capacity());")]
            /// # Ok::<(), std::io::Error>(())
            /// ```
            pub fn as_fds(&self) -> [BorrowedFd<'_>; 4] {
                // Counted as a copy handed on (see `crate::shared`): this
                // end takes turns from now on, until the copy made of
                // these descriptors is gone again (or never was made).
                crate::shared::hand_on(Handoff::gate(self));
                fds(self.side())
            }

            /// [`as_fds`](Self::as_fds) for a look at them, not to hand
            /// them on: the end stays on its fast path.
            #[doc(hidden)]
            pub fn descriptors(&self) -> [BorrowedFd<'_>; 4] {
                fds(self.side())
            }

            /// Rebuilds an end from descriptors that [`as_fds`](Self::as_fds)
            /// gave (duplicated into this process by any means), taking
            /// ownership of them and checking them as it would a
            /// stranger's. An end with a wake socket comes back with it
            /// (the duplicate copy is closed); one with wake pipes comes
            /// back with them, and trusts the process it came from (see
            /// the module's documentation and SECURITY.md).
            ///
            /// # Errors
            ///
            /// `InvalidData` if they are not what an end of this type is
            /// made of.
            ///
            /// # Examples
            ///
            /// ```
            #[doc = concat!("let pair = shmpipe::", $example, "()?;")]
            #[doc = concat!("let end = &pair.", $idx, ";")]
            /// let [a, b, c, d] = end.as_fds().map(|fd| fd.try_clone_to_owned());
            #[doc = concat!("let again = shmpipe::", stringify!($ty), "::from_fds([a?, b?, c?, d?])?;")]
            /// # drop(again);
            /// # Ok::<(), std::io::Error>(())
            /// ```
            pub fn from_fds(fds: [OwnedFd; 4]) -> io::Result<Self> {
                assemble(Self::KIND, fds.into())
            }

            /// Receives an end sent with `send_over`, checking it as it
            /// would a stranger's.
            ///
            /// # Examples
            ///
            /// ```
            /// use std::os::unix::net::UnixStream;
            /// let (here, there) = UnixStream::pair()?;
            #[doc = concat!("let mut pair = shmpipe::", $example, "()?;")]
            #[doc = concat!("pair.", $idx, ".send_over(&here)?;")]
            #[doc = concat!("let end = shmpipe::", stringify!($ty), "::recv_from(&there)?;")]
            /// # drop(end);
            /// drop(here);
            #[doc = concat!("let none = shmpipe::", stringify!($ty), "::recv_from(&there);")]
            /// assert_eq!(none.unwrap_err().kind(), std::io::ErrorKind::UnexpectedEof);
            /// # Ok::<(), std::io::Error>(())
            /// ```
            pub fn recv_from(socket: &UnixStream) -> io::Result<Self> {
                let mut tag = [0u8; 1];
                let (n, fds) = sys::recv_fds(socket.as_fd(), &mut tag, None)?;
                if n == 0 {
                    return Err(error::eof());
                }
                assemble(tag[0], fds)
            }
        }
    };
}

handoff!(Reader, b'r', Role::Reader, setup::consumer, "pipe", "0");
handoff!(Writer, b'w', Role::Writer, setup::producer, "pipe", "1");
handoff!(
    Receiver,
    b'R',
    Role::Reader,
    setup::consumer,
    "message_pipe",
    "0"
);
handoff!(
    Sender,
    b'S',
    Role::Writer,
    setup::producer,
    "message_pipe",
    "1"
);

fn pass_to<E: Handoff>(end: &mut E, cmd: &mut Command, name: &str) -> io::Result<()> {
    end.publish();
    crate::shared::hand_on(end.gate());
    let s = end.side();
    let fds = fds(s)
        .iter()
        .map(|fd| fd.try_clone_to_owned())
        .collect::<io::Result<Vec<_>>>()?;
    use std::os::fd::AsRawFd;
    let nums: Vec<String> = fds.iter().map(|fd| fd.as_raw_fd().to_string()).collect();
    let value = format!("{}:{}", E::KIND as char, nums.join(","));
    cmd.env(env_name(name), value);
    sys::inherit_across_exec(cmd, fds);
    Ok(())
}

fn env_name(name: &str) -> String {
    format!("{ENV_PREFIX}{name}")
}

fn from_env<E: Handoff>(name: &str) -> io::Result<E> {
    let var = env_name(name);
    // Under the lock from the first look to the removal, so two threads
    // cannot both take one end.
    let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
    let taken = taken.get_or_insert_with(HashSet::new);
    if taken.contains(&var) {
        return Err(error::not_found(format!("{var} was taken already")));
    }
    let value = std::env::var(&var).map_err(|_| error::not_found(format!("{var} is not set")))?;
    let bad = || error::invalid_data(format!("malformed {var}"));
    let (kind, nums) = value.split_once(':').ok_or_else(bad)?;
    let raws: Vec<i32> = nums
        .split(',')
        .map(|n| n.parse().map_err(|_| bad()))
        .collect::<io::Result<_>>()?;
    let raws: [i32; 4] = raws.try_into().map_err(|_| bad())?;
    if kind.as_bytes() != [E::KIND] {
        return Err(error::invalid_data(format!(
            "{var} holds another kind of end"
        )));
    }
    // Two memfds and a wake channel, vetted before they are taken.
    let fds = sys::take_inherited(raws, |[own, peer, a, b]| {
        sys::check_sealed(own)?;
        sys::check_sealed(peer)?;
        check_bell(a, b).map(drop)
    })?;
    taken.insert(var.clone());
    // Programs this one starts must not see a name whose descriptors they
    // do not have. (Like any change to the environment, this races with C
    // code reading it in another thread; Rust's own readers take a lock.)
    std::env::remove_var(&var);
    assemble(E::KIND, fds.into())
}

/// What an end travels as, in this module's order.
fn fds(s: &Side) -> [BorrowedFd<'_>; 4] {
    let [a, b] = s.bell.fds();
    [s.own_region.as_fd(), s.peer_region.as_fd(), a, b]
}

/// The two wake descriptors of an end handed to us: whether they are one
/// connected Unix stream socket twice (true), or the read-only read end of
/// an anonymous pipe and a pipe (false); `InvalidData` if neither. Looks
/// that never call into a filesystem come first (a FUSE file could block
/// an `fstat`): `getsockopt`, then `F_GETPIPE_SZ`.
fn check_bell(a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> io::Result<bool> {
    if sys::check_wake_socket(a).is_ok() {
        sys::check_wake_socket(b)?;
        if sys::inode(a)? != sys::inode(b)? {
            return Err(error::invalid_data(
                "an end's wake socket must come twice, as the same socket",
            ));
        }
        return Ok(true);
    }
    sys::check_wake_in(a)?;
    sys::pipe_id(b)?;
    Ok(false)
}

/// The wake channel of an end handed to us, from its two descriptors (see
/// [`check_bell`]).
fn bell(a: OwnedFd, b: OwnedFd) -> io::Result<sys::Bell> {
    if check_bell(a.as_fd(), b.as_fd())? {
        drop(b);
        return Ok(sys::Bell::socket(a));
    }
    let id = sys::check_wake_in(a.as_fd())?;
    let wake_out = sys::open_waker(b, &[id])?;
    Ok(sys::Bell::pipe(a, wake_out))
}

/// Rebuilds an end from its tag and four descriptors.
fn assemble<E: Handoff>(tag: u8, fds: Vec<OwnedFd>) -> io::Result<E> {
    if tag != E::KIND {
        return Err(error::invalid_data("received another kind of end"));
    }
    let [own, peer, a, b]: [OwnedFd; 4] = fds
        .try_into()
        .map_err(|_| error::invalid_data("an end is four descriptors"))?;
    let own = OwnRegion::open(own, E::ROLE)?;
    E::attach(own, peer, bell(a, b)?)
}
