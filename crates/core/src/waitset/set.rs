//! [`WaitSet`]: its members, hot and cold, and the wait over them (see
//! the [module](super) for how it works).

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use super::source::{Source, Token};
use crate::error;
use crate::owed;
use crate::pace;
use crate::sys::{self, EpollEvent};
use crate::wait::BRIEF_SLEEP;
use crate::{Listener, Reader, Receiver, Sender, Spin, Writer};

/// Looks at the hot ends between two looks at the epoll instance while
/// some end is ready (so the look costs under one system call per this
/// many messages).
///
/// # Examples
///
/// ```
/// // A busy server pays at most one non-sleeping epoll_wait per this many looks.
/// let looks = 10_000u32;
/// assert!(looks.div_ceil(shmpipe::waitset::EPOLL_EVERY) <= 79);
/// ```
pub const EPOLL_EVERY: u32 = 128;

/// Looks at which a hot end found not ready goes cold (armed, left to
/// epoll).
const IDLE_LOOKS: u32 = 1024;

/// Events taken per `epoll_wait`.
const EVENTS: usize = 256;

/// One member.
#[derive(Debug)]
struct Slot {
    token: Token,
    source: Source,
    hot: bool,
    /// Still in the epoll instance (an end leaves it after its hang-up).
    watched: bool,
    /// Looks in a row that found it not ready, while hot.
    idle: u32,
    /// The `wait` call that last reported it (no token twice per call).
    reported: u64,
}

/// Waits on many ends and listeners at once in one thread; see the
/// [module](crate::waitset) for how.
///
/// # Examples
///
/// An echo server for two clients (threads here; processes alike). Only
/// the receivers wait in the set: a sender would be reported whenever its
/// ring has room, which is nearly always.
///
/// ```
/// use shmpipe::WaitSet;
/// let mut set = WaitSet::new()?;
/// let mut replies = Vec::new();
/// let mut clients = Vec::new();
/// for id in 0..2u64 {
///     let (server_rx, mut client_tx) = shmpipe::message_pipe()?;
///     let (mut client_rx, server_tx) = shmpipe::message_pipe()?;
///     set.add(id, server_rx)?;
///     replies.push(server_tx);
///     clients.push(std::thread::spawn(move || -> std::io::Result<()> {
///         let mut buf = [0u8; 8];
///         for i in 0..100u64 {
///             client_tx.send(&i.to_le_bytes())?;
///             client_rx.recv(&mut buf)?;
///             assert_eq!(u64::from_le_bytes(buf), i);
///         }
///         Ok(())
///     }));
/// }
/// let mut ready = Vec::new();
/// let mut buf = [0u8; 8];
/// while !set.is_empty() {
///     set.wait(&mut ready, None)?;
///     for &token in &ready {
///         match set.receiver_mut(token).unwrap().recv(&mut buf) {
///             Ok(n) => replies[token.0 as usize].send(&buf[..n])?,
///             Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
///                 set.remove(token);
///             }
///             Err(e) => return Err(e),
///         }
///     }
/// }
/// for c in clients {
///     c.join().unwrap()?;
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct WaitSet {
    epoll: OwnedFd,
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    tokens: HashMap<Token, u32>,
    /// Slots looked at in user space.
    hot: Vec<u32>,
    events: Vec<EpollEvent>,
    spin: Spin,
    /// Looks at the hot ends since the last look at epoll.
    looks: u32,
    /// A hot end's arming is unsure (its peer's wake may be lost): sleep
    /// no longer than `BRIEF_SLEEP` before looking at it again.
    brief: bool,
    calls: u64,
}

impl fmt::Debug for WaitSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaitSet")
            .field("len", &self.tokens.len())
            .field("hot", &self.hot.len())
            .field("spin", &self.spin)
            .finish()
    }
}

impl WaitSet {
    /// An empty waitset (one epoll instance).
    ///
    /// # Examples
    ///
    /// ```
    /// let set = shmpipe::WaitSet::new()?;
    /// assert!(set.is_empty());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new() -> io::Result<WaitSet> {
        Ok(WaitSet {
            epoll: sys::epoll()?,
            slots: Vec::new(),
            free: Vec::new(),
            tokens: HashMap::new(),
            hot: Vec::new(),
            events: Vec::with_capacity(EVENTS),
            spin: Spin::Adaptive,
            looks: 0,
            brief: false,
            calls: 0,
        })
    }

    /// How long `wait` spins over the hot ends before it sleeps (default
    /// [`Spin::Adaptive`]: as long as a sleep and wake cost on this
    /// machine, at most [`DEFAULT_SPIN`](crate::DEFAULT_SPIN)); a
    /// [`Duration`] is kept exactly, and zero sleeps at once.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut set = shmpipe::WaitSet::new()?;
    /// set.set_spin(std::time::Duration::ZERO);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_spin(&mut self, spin: impl Into<Spin>) {
        self.spin = spin.into();
    }

    /// Adds an end or a listener under `token`. An end is armed at once
    /// (its peer's next publish wakes the set), unless it is ready, when
    /// the next `wait` reports it. Costs one `epoll_ctl`.
    ///
    /// # Errors
    ///
    /// `AlreadyExists` if `token` is taken (the source is dropped); the
    /// system's if epoll refuses (`ENOMEM`, `ENOSPC` past
    /// `/proc/sys/fs/epoll/max_user_watches`).
    ///
    /// # Examples
    ///
    /// ```
    /// let mut set = shmpipe::WaitSet::new()?;
    /// let (rx, _tx) = shmpipe::message_pipe()?;
    /// set.add(7, rx)?;
    /// assert_eq!(set.len(), 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn add(&mut self, token: impl Into<Token>, source: impl Into<Source>) -> io::Result<()> {
        let token = token.into();
        if self.tokens.contains_key(&token) {
            return Err(error::already_exists(format!(
                "waitset: token {token} is taken"
            )));
        }
        let mut source = source.into();
        let k = match self.free.pop() {
            Some(k) => k,
            None => {
                self.slots.push(None);
                u32::try_from(self.slots.len() - 1)
                    .map_err(|_| error::other("waitset: too many members"))?
            }
        };
        if let Err(e) = sys::epoll_add(self.epoll.as_fd(), source.fd(), k.into()) {
            self.free.push(k);
            return Err(e);
        }
        // Armed at once (no system call): an idle member costs nothing
        // until its peer publishes; one that is ready already starts hot.
        let hot = !source.arm() || source.armed_briefly();
        self.slots[k as usize] = Some(Slot {
            token,
            source,
            hot,
            watched: true,
            idle: 0,
            reported: 0,
        });
        if hot {
            self.hot.push(k);
        }
        self.tokens.insert(token, k);
        Ok(())
    }

    /// Removes the member under `token` and gives it back. Costs one
    /// `epoll_ctl`.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe::waitset::Source;
    /// let mut set = shmpipe::WaitSet::new()?;
    /// let (rx, _tx) = shmpipe::message_pipe()?;
    /// set.add(1, rx)?;
    /// assert!(matches!(set.remove(1), Some(Source::Receiver(_))));
    /// assert!(set.remove(1).is_none());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn remove(&mut self, token: impl Into<Token>) -> Option<Source> {
        let k = self.tokens.remove(&token.into())?;
        let slot = self.slots[k as usize].take()?;
        if slot.watched {
            sys::epoll_del(self.epoll.as_fd(), slot.source.fd());
        }
        if slot.hot {
            if let Some(i) = self.hot.iter().position(|&h| h == k) {
                self.hot.swap_remove(i);
            }
        }
        self.free.push(k);
        Some(slot.source)
    }

    /// The member under `token`. Using an end may take back its arming,
    /// so the end is looked at by the next `wait` (made hot).
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe::waitset::Source;
    /// let mut set = shmpipe::WaitSet::new()?;
    /// let (rx, _tx) = shmpipe::message_pipe()?;
    /// set.add(1, rx)?;
    /// assert!(matches!(set.get_mut(1), Some(Source::Receiver(_))));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn get_mut(&mut self, token: impl Into<Token>) -> Option<&mut Source> {
        let k = *self.tokens.get(&token.into())?;
        let slot = self.slots[k as usize].as_mut()?;
        if !slot.hot && !slot.source.is_listener() {
            slot.hot = true;
            slot.idle = 0;
            self.hot.push(k);
        }
        Some(&mut slot.source)
    }

    /// Members.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(shmpipe::WaitSet::new()?.len(), 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether there are no members.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(shmpipe::WaitSet::new()?.is_empty());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Waits until at least one member is ready, or `timeout` passes
    /// (`None`: no limit; zero: just look, at every member, with one
    /// `epoll_wait` that does not sleep), and puts the ready tokens in
    /// `ready` (cleared first; empty after a timeout), each once.
    ///
    /// # Errors
    ///
    /// Those of `epoll_wait` other than `EINTR`.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut set = shmpipe::WaitSet::new()?;
    /// let (rx, mut tx) = shmpipe::message_pipe()?;
    /// set.add(42, rx)?;
    /// let mut ready = Vec::new();
    /// set.wait(&mut ready, Some(std::time::Duration::ZERO))?;
    /// assert!(ready.is_empty());
    /// tx.send(b"hi")?;
    /// set.wait(&mut ready, None)?;
    /// assert_eq!(ready, [42]);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn wait(&mut self, ready: &mut Vec<Token>, timeout: Option<Duration>) -> io::Result<()> {
        ready.clear();
        self.calls += 1;
        let mut started: Option<Instant> = None;
        let spin = self.spin.budget();
        let pure_spin = pace::pure_spin(spin);
        loop {
            // Spin over the hot ends.
            loop {
                self.look(ready);
                self.looks += 1;
                // A zero timeout looks at everything: a caller that only
                // looks (serving by turns, say) must see cold ends too.
                if self.looks >= EPOLL_EVERY
                    || self.hot.is_empty()
                    || timeout == Some(Duration::ZERO)
                {
                    self.looks = 0;
                    self.poll(Some(Duration::ZERO), ready)?;
                }
                if !ready.is_empty() {
                    return Ok(());
                }
                let now = Instant::now();
                let start = *started.get_or_insert(now);
                let spent = now - start;
                if timeout.is_some_and(|t| spent >= t) {
                    return Ok(());
                }
                if self.hot.is_empty() || spent >= spin.min(timeout.unwrap_or(Duration::MAX)) {
                    break;
                }
                // Past the pure spin, each round hands the CPU to any task
                // that waits for it, as an end's spin does: a client on our
                // CPU could not send its request while we spin (for a whole
                // spin, 50 us, before this); unless yields lose time slices
                // here lately (see `pace::yield_cpu`).
                if spent >= pure_spin && pace::yield_cpu().is_some() {
                    continue;
                }
                for _ in 0..16 {
                    std::hint::spin_loop();
                }
            }
            // Sleep: arm every hot end (one found ready stays hot and is
            // reported), then one epoll_wait for all.
            self.cool(ready);
            if !ready.is_empty() {
                return Ok(());
            }
            let start = started.unwrap_or_else(Instant::now);
            let left = timeout.map(|t| t.saturating_sub(start.elapsed()));
            // A wake this thread owes a peer (see `owed`), sent before we
            // sleep: that peer may be the one to wake us. While it stays
            // owed, the sleep is brief, to try again.
            let owing = !owed::pay();
            let sleep = match (self.brief || owing, left) {
                (true, l) => Some(l.map_or(BRIEF_SLEEP, |l| l.min(BRIEF_SLEEP))),
                (false, l) => l,
            };
            self.poll(sleep, ready)?;
            if !ready.is_empty() || left.is_some_and(|l| l.is_zero()) {
                return Ok(());
            }
        }
    }

    /// Looks at the hot ends once; one idle for long goes cold.
    #[inline]
    fn look(&mut self, ready: &mut Vec<Token>) {
        let mut i = 0;
        while i < self.hot.len() {
            let k = self.hot[i] as usize;
            let Some(slot) = self.slots[k].as_mut() else {
                self.hot.swap_remove(i);
                continue;
            };
            if slot.source.ready_now() {
                slot.idle = 0;
                report(slot, self.calls, ready);
            } else {
                slot.idle += 1;
                if slot.idle >= IDLE_LOOKS {
                    slot.idle = 0;
                    if slot.source.arm() && !slot.source.armed_briefly() {
                        slot.hot = false;
                        self.hot.swap_remove(i);
                        continue;
                    }
                    if !slot.source.armed_briefly() {
                        report(slot, self.calls, ready);
                    }
                }
            }
            i += 1;
        }
    }

    /// Arms every hot end before sleeping; those ready after all stay hot
    /// and are reported. One armed unsurely (a barrier failed, so its
    /// peer's wake may be lost) stays hot too, and makes the sleep brief.
    fn cool(&mut self, ready: &mut Vec<Token>) {
        self.brief = false;
        let mut i = 0;
        while i < self.hot.len() {
            let k = self.hot[i] as usize;
            let Some(slot) = self.slots[k].as_mut() else {
                self.hot.swap_remove(i);
                continue;
            };
            if slot.source.arm() {
                if slot.source.armed_briefly() {
                    self.brief = true;
                    i += 1;
                    continue;
                }
                slot.hot = false;
                slot.idle = 0;
                self.hot.swap_remove(i);
            } else {
                report(slot, self.calls, ready);
                i += 1;
            }
        }
    }

    /// One `epoll_wait`: woken ends go hot (and are reported if ready),
    /// readable listeners are reported, hung-up ends leave epoll.
    fn poll(&mut self, timeout: Option<Duration>, ready: &mut Vec<Token>) -> io::Result<()> {
        self.events.clear();
        sys::epoll_wait(self.epoll.as_fd(), &mut self.events, EVENTS, timeout)?;
        for ev in &self.events {
            let k = ev.data as usize;
            let Some(slot) = self.slots.get_mut(k).and_then(Option::as_mut) else {
                continue;
            };
            if slot.source.is_listener() {
                report(slot, self.calls, ready);
                continue;
            }
            if slot.source.woken(ev.hung_up) && slot.watched {
                // Gone: always ready from now on, and epoll would say so
                // on every look.
                sys::epoll_del(self.epoll.as_fd(), slot.source.fd());
                slot.watched = false;
            }
            if !slot.hot {
                slot.hot = true;
                slot.idle = 0;
                self.hot.push(k as u32);
            }
            if slot.source.ready_now() {
                report(slot, self.calls, ready);
            }
        }
        Ok(())
    }
}

#[inline]
fn report(slot: &mut Slot, call: u64, ready: &mut Vec<Token>) {
    if slot.reported != call {
        slot.reported = call;
        ready.push(slot.token);
    }
}

/// Typed access to members.
macro_rules! typed {
    ($name:ident, $ty:ident) => {
        impl WaitSet {
            #[doc = concat!("The [`", stringify!($ty), "`] under `token`, if that is one (see [`get_mut`](Self::get_mut)).")]
            ///
            /// # Examples
            ///
            /// ```
            /// let mut set = shmpipe::WaitSet::new()?;
            /// assert!(set.receiver_mut(3).is_none());
            /// # Ok::<(), std::io::Error>(())
            /// ```
            pub fn $name(&mut self, token: impl Into<Token>) -> Option<&mut $ty> {
                match self.get_mut(token)? {
                    Source::$ty(x) => Some(x),
                    _ => None,
                }
            }
        }
    };
}
typed!(reader_mut, Reader);
typed!(writer_mut, Writer);
typed!(receiver_mut, Receiver);
typed!(sender_mut, Sender);
typed!(listener_mut, Listener);

#[cfg(test)]
mod tests {
    use super::*;

    /// The membarrier a light-fenced peer needs failed (`SleepBriefly`):
    /// the peer's wake may be lost, so the set must not sleep on that end
    /// until a wake comes. Here the wake is lost for sure (its byte is
    /// taken away before the set sees it); the set must find the message
    /// by looking again.
    #[test]
    fn an_unsure_arming_is_looked_at_again() {
        crate::sys::fault::fail_barriers(true);
        let mut set = WaitSet::new().unwrap();
        set.set_spin(Duration::ZERO);
        let (rx, mut tx) = crate::message_pipe().unwrap();
        set.add(1, rx).unwrap();
        let mut ready = Vec::new();
        set.wait(&mut ready, Some(Duration::ZERO)).unwrap();
        assert!(ready.is_empty());
        tx.send(b"hi").unwrap();
        let k = set.tokens[&Token(1)] as usize;
        let Some(Slot {
            source: Source::Receiver(rx),
            ..
        }) = &set.slots[k]
        else {
            panic!("the receiver");
        };
        rx.end.side.bell.drain();
        // Reported long before this bound (about BRIEF_SLEEP); without
        // the fix, never.
        set.wait(&mut ready, Some(Duration::from_secs(20))).unwrap();
        assert_eq!(ready, [1]);
    }
}
