//! Waiting for the peer: spin briefly, then sleep in the kernel behind the
//! ring's park handshake, and wake when the peer wakes us or dies.
//!
//! Why the kernel and not a futex: a futex sleeper is not woken when its
//! peer is SIGKILLed, so it would need a timeout and a liveness check.
//! Each pipe end sleeps on a kernel channel instead (its `sys::Bell`)
//! whose other side only the peer holds: one byte wakes the sleeper, and
//! the kernel tells it when the last copy of the peer's end is closed, by
//! exit, SIGKILL or drop alike. One sleep (a blocking `read` or `recv`,
//! or `poll` when there is a timeout) thus waits for both, and a wake
//! costs one `write` or `send`, only when the ring's `parked` word says
//! the peer sleeps. Ends this process made as a pair use a wake pipe each
//! (on one CPU a pipe's write and read cost about two thirds of a
//! socket's send and recv, and the write hands the CPU straight to the
//! woken reader); ends joined by a handshake with a possible stranger use
//! a socketpair, since a peer holding an end of our pipe could pin its
//! lock (see `sys::Bell`).

use std::cell::OnceCell;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use shmpipe_ring::{Consumer, Producer};

use crate::error;
use crate::owed;
use crate::pace::cpu::{forget_cpu, fresh_cpu, thread_cpu};
use crate::pace::{self, LookDelay, Spin, CLOCK_EVERY};
use crate::readiness::Readiness;
use crate::sys::{self, Woke};

thread_local! {
    /// Whether this thread published from a writing end since its last
    /// wait (see `wait_slow`); checked on every publish, stored only when
    /// it changes.
    static SENT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Bumped each time `SENT` goes up: an end that remembers the value at
    /// its last wait can tell whether this thread sent since.
    static SEND_EPOCH: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Whether this thread waited as a reader since its last publish from
    /// a writing end: then that publish is likely a reply, or a request
    /// after one, which the peer waits for (see `End::publish`).
    static READ_WAITED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// A flag outside this crate that mirrors `SENT` (see `mirror_sent`).
    static SENT_MIRROR: std::cell::Cell<Option<&'static AtomicU32>> =
        const { std::cell::Cell::new(None) };
}

/// Makes `flag` say whether this thread published from a writing end since
/// its last wait (1 or 0), and keeps it so until then: this thread's next
/// wait clears it, as does mirroring another flag. The C API's inline
/// write path publishes without this crate while its writer's flag is 1,
/// which is when a publish here would note nothing new.
///
/// # Examples
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// static FLAG: AtomicU32 = AtomicU32::new(0);
/// shmpipe::mirror_sent(&FLAG);
/// assert_eq!(FLAG.load(Ordering::Relaxed), 0); // nothing sent yet
/// ```
#[doc(hidden)]
pub fn mirror_sent(flag: &'static AtomicU32) {
    if let Some(old) = SENT_MIRROR.with(|m| m.take()) {
        old.store(0, Ordering::Relaxed);
    }
    if SENT.with(|s| s.get()) {
        flag.store(1, Ordering::Relaxed);
        SENT_MIRROR.with(|m| m.set(Some(flag)));
    } else {
        flag.store(0, Ordering::Relaxed);
    }
}

/// Notes the first publish from a writing end since this thread last
/// waited.
fn note_first_send() {
    SENT.with(|s| s.set(true));
    SEND_EPOCH.with(|e| e.set(e.get().wrapping_add(1)));
}

/// Notes that this thread waits, and returns its send epoch.
fn note_wait() -> u64 {
    SENT.with(|s| s.set(false));
    if let Some(flag) = SENT_MIRROR.with(|m| m.take()) {
        flag.store(0, Ordering::Relaxed);
    }
    SEND_EPOCH.with(|e| e.get())
}

/// An end's blocking behaviour.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub(crate) spin: Spin,
    pub(crate) timeout: Option<Duration>,
    pub(crate) nonblocking: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            spin: Spin::Adaptive,
            timeout: None,
            nonblocking: false,
        }
    }
}

/// What the park handshake found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Parked {
    /// The ring is ready after all; we are not parked.
    Ready,
    /// Parked: sleep until woken.
    Sleep,
    /// Parked, but the membarrier a light-fenced peer needs failed, so a
    /// wake-up could be lost: sleep briefly and look again.
    SleepBriefly,
}

#[cfg(test)]
thread_local! {
    /// Unit tests: every barrier of this thread counts as failed.
    pub(crate) static BARRIER_FAILS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl Parked {
    fn new(ready: bool, barrier_ok: bool) -> Parked {
        #[cfg(test)]
        let barrier_ok = barrier_ok && !BARRIER_FAILS.with(|f| f.get());
        match (ready, barrier_ok) {
            (true, _) => Parked::Ready,
            (false, true) => Parked::Sleep,
            (false, false) => Parked::SleepBriefly,
        }
    }
}

/// How long a side sleeps between looks when it cannot rely on a wake-up.
pub(crate) const BRIEF_SLEEP: Duration = Duration::from_millis(1);

/// Wake-ups in a row that find nothing, in one wait, after which the peer
/// counts as flooding us with wake bytes. An honest peer sends one byte
/// per parking, so a stale byte or two is all it can leave; each parking
/// may cost a `membarrier` that interrupts every CPU running a registered
/// process, so a flooding peer must not get one per byte. Past this the
/// wait stops parking and looks every `BRIEF_SLEEP` instead.
const FLOOD_LIMIT: u32 = 8;

/// The ring operations waiting needs, for either end.
pub(crate) trait Ring {
    /// Whether `want` bytes are there (readable, or free), reloading the
    /// peer's index if the cached one says no.
    fn ready(&mut self, want: usize) -> io::Result<bool>;
    /// Whether our cached copy of the peer's index already shows `want`.
    #[inline]
    fn ready_cached(&self, want: usize) -> bool {
        self.cached() >= want
    }
    /// Bytes readable (or free) by our cached copy.
    fn cached(&self) -> usize;
    /// Whether this is the reading end.
    const CONSUMER: bool;
    /// The park handshake, with the membarrier a light-fenced peer needs.
    /// A reader parks until one byte is there, whatever `want` says (so a
    /// reader's `wait` must want exactly one byte); a writer until `want`
    /// bytes are free.
    fn park(&mut self, want: usize) -> io::Result<Parked>;
    /// Clears the parked word.
    fn unpark(&mut self);
    /// Publishes our index; true if the peer must be woken.
    fn publish(&mut self) -> bool;
    /// The wake `publish` asked for could not be sent: ask again next time.
    fn wake_failed(&mut self);
    /// `publish`, unless another copy of the end published since ours
    /// (see the ring's `publish_if_current`).
    fn publish_if_current(&mut self) -> bool;
    /// Publishes our CPU and returns the peer's (see the ring).
    fn exchange_cpu_hint(&mut self, cpu: u32) -> u32;
    /// Full fences while the peer shares our CPU (see the ring).
    fn peer_shares_cpu(&mut self, same: bool);
    /// `publish`; a writer keeps the inline copy beside the tail for this
    /// publish if `copy` (see the ring's `publish_copy`).
    #[inline]
    fn publish_copy(&mut self, copy: bool) -> bool {
        let _ = copy;
        self.publish()
    }
}

/// Publishes our CPU (`cpu`, this thread's now) and returns whether the
/// peer said it runs there too. Our publishes follow: with full fences
/// while it does, so that its park costs no `membarrier` (see the ring's
/// `peer_shares_cpu`), with light ones (where allowed) while it does not.
fn exchange_cpu(ring: &mut impl Ring, cpu: u32) -> bool {
    let same = cpu != u32::MAX && ring.exchange_cpu_hint(cpu) == cpu;
    ring.peer_shares_cpu(same);
    same
}

impl Ring for Consumer {
    const CONSUMER: bool = true;
    #[inline]
    fn cached(&self) -> usize {
        self.available_cached()
    }
    #[inline]
    fn ready(&mut self, want: usize) -> io::Result<bool> {
        Ok(self.available(want).map_err(error::protocol)? >= want)
    }
    fn park(&mut self, want: usize) -> io::Result<Parked> {
        debug_assert_eq!(want, 1, "a reader waits for one byte (see Ring::park)");
        let mut barrier_ok = true;
        let ready = Consumer::park_with(self, || barrier_ok = sys::global_barrier())
            .map_err(error::protocol)?;
        Ok(Parked::new(ready, barrier_ok))
    }
    fn unpark(&mut self) {
        Consumer::unpark(self)
    }
    #[inline]
    fn publish(&mut self) -> bool {
        Consumer::publish(self)
    }
    fn wake_failed(&mut self) {
        Consumer::wake_failed(self)
    }
    fn publish_if_current(&mut self) -> bool {
        Consumer::publish_if_current(self)
    }
    fn exchange_cpu_hint(&mut self, cpu: u32) -> u32 {
        Consumer::exchange_cpu_hint(self, cpu)
    }
    fn peer_shares_cpu(&mut self, same: bool) {
        Consumer::peer_shares_cpu(self, same)
    }
}

impl Ring for Producer {
    const CONSUMER: bool = false;
    #[inline]
    fn cached(&self) -> usize {
        self.free_cached()
    }
    #[inline]
    fn ready(&mut self, want: usize) -> io::Result<bool> {
        Ok(self.free(want).map_err(error::protocol)? >= want)
    }
    fn park(&mut self, want: usize) -> io::Result<Parked> {
        let mut barrier_ok = true;
        let ready = Producer::park_with(self, want, || barrier_ok = sys::global_barrier())
            .map_err(error::protocol)?;
        Ok(Parked::new(ready, barrier_ok))
    }
    fn unpark(&mut self) {
        Producer::unpark(self)
    }
    #[inline]
    fn publish(&mut self) -> bool {
        Producer::publish(self)
    }
    fn wake_failed(&mut self) {
        Producer::wake_failed(self)
    }
    fn publish_if_current(&mut self) -> bool {
        Producer::publish_if_current(self)
    }
    fn exchange_cpu_hint(&mut self, cpu: u32) -> u32 {
        Producer::exchange_cpu_hint(self, cpu)
    }
    fn peer_shares_cpu(&mut self, same: bool) {
        Producer::peer_shares_cpu(self, same)
    }
    #[inline]
    fn publish_copy(&mut self, copy: bool) -> bool {
        Producer::publish_copy(self, copy)
    }
}

/// How a wait ended (errors aside).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ready {
    /// The ring has what was asked for.
    Yes,
    /// Every copy of the peer's end is gone and the ring does not have it.
    PeerGone,
}

/// A ring end with its kernel side: what every pipe end type holds.
///
/// Aligned to 128 bytes (two 64-byte lines, as the adjacent-line
/// prefetcher pairs them; the ring's `CachePadded` does the same) so that
/// no other data shares its lines: a read or write stores to the end's
/// cached indices each time, and an end of another thread beside it (say
/// two ends boxed one after the other) would make every operation of both
/// move a line between their CPUs (measured, threads on two CPUs of the
/// AMD guest with the writer of one beside the reader of the other in one
/// heap block: 131 ns per 8-byte round trip instead of 108 ns).
#[derive(Debug)]
#[repr(align(128))]
pub(crate) struct End<R: Ring> {
    pub(crate) ring: R,
    pub(crate) side: Side,
}

impl<R: Ring> End<R> {
    /// Publishes what is committed and wakes the peer if it sleeps.
    #[inline]
    pub(crate) fn publish(&mut self) {
        // A writer's publish after another since this thread last waited
        // (a stream's): one thread-local load, no inline copy (see
        // `publish_first_send`). While `SENT` is set, `READ_WAITED` is
        // clear: it is set only by a wait, after `note_wait` cleared
        // `SENT`, and cleared by the first send after, which sets `SENT`.
        let woke = if R::CONSUMER {
            self.ring.publish()
        } else if SENT.with(|s| s.get()) {
            self.ring.publish_copy(false)
        } else {
            return self.publish_first_send();
        };
        if woke {
            self.wake_peer();
        }
    }

    /// A writer's first publish since this thread last waited.
    ///
    /// The peer's waits need to know which CPU we run on (see `spin`).
    /// Each side refreshes that hint in its own waits; a writer also at
    /// its first send after a wait, as a side that only sends seldom
    /// waits, and either side whenever it wakes the peer (a system call
    /// anyway). A writer that never waits and never wakes keeps its
    /// hint: the cost is some spinning where sleeping would have done.
    /// Refreshed after the index store, off a reply's critical path: it
    /// also picks the fences our publishes use (see `exchange_cpu`), which
    /// any choice keeps sound, so this publish uses the last choice
    /// (measured, roundtrip-8B between two processes on the AMD guest
    /// while other work loaded it: 440 ns instead of 600 with the refresh
    /// before the store; the same when quiet).
    ///
    /// The inline copy beside the tail (see the ring) saves a waiting
    /// reader a cache-line transfer: kept for the first send since this
    /// thread waited as a reader, a reply or a request after one, which
    /// the peer is likely waiting for; not for the sends of a stream,
    /// whose reader takes them in batches from the data, and whose
    /// writer would pay four more stores an item for nothing (measured:
    /// 7.0 ns per 8-byte item instead of 3.8 with a copy after each
    /// wait for space).
    #[inline]
    fn publish_first_send(&mut self) {
        note_first_send();
        let reply = READ_WAITED.with(|w| w.replace(false));
        if self.ring.publish_copy(reply) {
            self.wake_peer();
        } else {
            self.refresh_cpu_hint();
        }
    }

    /// Wakes the peer that our publish found asleep.
    #[cold]
    #[inline(never)]
    fn wake_peer(&mut self) {
        self.refresh_cpu_hint();
        if self.side.wake() {
            self.side.wake_owed = false;
        } else {
            // Asked for again at our next publish, and before this end
            // or this thread sleeps (see `owed`; never retried here: a
            // publish must not sleep, it may be serving other peers).
            self.ring.wake_failed();
            self.side.wake_owed = true;
            owed::owe(self.side.bell.owed());
        }
    }

    /// What an operation waits for: a reader one byte, a writer what its
    /// last `WouldBlock` wanted.
    #[inline]
    fn want(&self) -> usize {
        if R::CONSUMER {
            1
        } else {
            self.side.want
        }
    }

    /// The waitset's look: whether the operation can progress, from the
    /// ring alone (no system call). A ring the peer broke counts as ready,
    /// so that the operation reports the error.
    #[inline]
    pub(crate) fn ready_now(&mut self) -> bool {
        // (Not the cached view alone: it may show what was consumed.)
        let want = self.want();
        let ready = self.side.peer_gone || self.ring.ready(want).unwrap_or(true);
        if ready && !R::CONSUMER {
            // The room the last `WouldBlock` wanted is there: that wait is
            // over (the send may now take the fast path, which does not
            // reset it), and a later, smaller send must not wait for it.
            self.side.want = 1;
        }
        ready
    }

    /// The waitset stops looking: arms (the park handshake) unless armed
    /// already. False if the ring turned out ready.
    pub(crate) fn arm_quietly(&mut self) -> bool {
        if self.side.armed {
            if !self.side.brief {
                return true;
            }
            // Armed unsurely: park again, for another try at the barrier.
            self.ring.unpark();
            self.side.armed = false;
        }
        let want = self.want();
        self.side.arm_parked(&mut self.ring, want).unwrap_or(false)
    }

    /// Whether our arming is unsure (see `Side::brief`): the waitset must
    /// look at us again soon rather than sleep until a wake.
    pub(crate) fn armed_briefly(&self) -> bool {
        self.side.armed && self.side.brief
    }

    /// The waitset saw our wake pipe (or socket) readable: takes the arming back and the
    /// wake bytes out; after a hang-up, the peer is gone. True if it is.
    pub(crate) fn woken(&mut self, hung_up: bool) -> bool {
        if self.side.armed {
            self.ring.unpark();
            self.side.armed = false;
            self.side.brief = false;
        }
        let eof = self.side.bell.drain();
        if hung_up || eof {
            self.side.peer_gone = true;
        }
        self.side.peer_gone
    }

    /// Spins for up to the end's spin time until the operation could
    /// progress (see `Side::spin`); for async callers, before they park.
    #[cfg(feature = "tokio")]
    pub(crate) fn spin_ready(&mut self) {
        let want = self.want();
        if self.side.peer_gone || self.ring.ready_cached(want) {
            return;
        }
        // No hand-off: a peer task on our thread cannot run until we
        // return, and a yield would block the whole executor.
        let _ = self.side.spin(&mut self.ring, want, &mut None, false);
    }

    /// See the end types' `arm`.
    pub(crate) fn arm(&mut self) -> io::Result<bool> {
        let want = if R::CONSUMER { 1 } else { self.side.want };
        self.side.arm(&mut self.ring, want)
    }

    /// The answer of a one-step ring call (`push_publish`, `pop_publish`):
    /// false if it did nothing; else true, after waking the peer if its
    /// publish found it asleep.
    #[inline(always)]
    fn wake_if(&mut self, published: Option<bool>) -> bool {
        match published {
            Some(woke) => {
                if woke {
                    self.wake_peer();
                }
                true
            }
            None => false,
        }
    }

    /// Kept out of line so that `publish`, which callers inline, stays small.
    #[cold]
    #[inline(never)]
    fn refresh_cpu_hint(&mut self) {
        exchange_cpu(&mut self.ring, thread_cpu());
    }
}

impl End<Consumer> {
    /// Reads all of `buf` and publishes if the cached view holds it; false
    /// (nothing read) if not. A stream's read: one copy, one index store.
    #[inline(always)]
    pub(crate) fn try_take(&mut self, buf: &mut [u8]) -> bool {
        let published = self.ring.pop_publish(buf);
        self.wake_if(published)
    }
}

impl End<Producer> {
    /// Writes `buf` and publishes it if the cached view has room and
    /// nothing waits to be published; false (nothing written) if not.
    /// A stream's write: one copy, one private store, one index store.
    /// Always inlined, so that the copy of a length known at the call is
    /// a move.
    #[inline(always)]
    pub(crate) fn try_send(&mut self, buf: &[u8]) -> bool {
        if !SENT.with(|s| s.get()) {
            return self.send_first(buf);
        }
        let published = self.ring.push_publish(buf);
        self.wake_if(published)
    }

    /// `try_send` of the first send since this thread last waited (see
    /// `publish_first_send`), in one ring call and without a call of its
    /// own: a reply keeps its inline copy, taken from `buf` as it is
    /// written rather than read back from the data. These are the
    /// instructions between the wait that ended and the reply's tail
    /// store (roundtrip-8B, callgrind: 652 -> 585 per round trip).
    /// `publish_first_send` does the rest (a batch waits, or no room).
    #[inline(always)]
    fn send_first(&mut self, buf: &[u8]) -> bool {
        let reply = READ_WAITED.with(|w| w.get());
        let Some(woke) = self.ring.push_publish_copy(buf, reply) else {
            // A batch waits to be published (this send joins it), or
            // there is no room.
            if !self.ring.try_push(buf) {
                return false;
            }
            self.publish_first_send();
            return true;
        };
        note_first_send();
        READ_WAITED.with(|w| w.set(false));
        if woke {
            self.wake_peer();
        } else {
            self.refresh_cpu_hint();
        }
        true
    }

    /// Waits for `want` free bytes. Pending data is published first if it
    /// has to wait, so a batch never waits on itself; `BrokenPipe` once the
    /// reader is gone.
    #[inline]
    pub(crate) fn wait_free(&mut self, want: usize) -> io::Result<()> {
        if self.ring.free_cached() >= want {
            return Ok(());
        }
        self.wait_free_slow(want)
    }

    #[cold]
    #[inline(never)]
    fn wait_free_slow(&mut self, want: usize) -> io::Result<()> {
        // No look at the reader's head here: `wait` pauses first (see
        // `Side::wait_slow`).
        self.publish();
        if self.side.wait(&mut self.ring, want)? == Ready::PeerGone {
            return Err(error::broken_pipe());
        }
        Ok(())
    }
}

impl<R: Ring> Drop for End<R> {
    /// Whatever was committed reaches the peer, as a kernel pipe's would,
    /// unless another copy of this end (left by `fork`, or the process it
    /// was handed to) has published since: then ours is a stale copy, and
    /// its index would overwrite a newer one.
    fn drop(&mut self) {
        if self.ring.publish_if_current() || self.side.wake_owed {
            // A failed wake has nobody left to ask again; the peer sees
            // our hang-up instead (unless another copy of the end lives
            // on: it publishes, and wakes, itself).
            let _ = self.side.wake();
        }
    }
}

/// The kernel side of one pipe end: its wake channel, the region
/// descriptors (kept to hand the end on), and how it blocks.
#[derive(Debug)]
pub(crate) struct Side {
    /// How we sleep and wake the peer: a wake pipe each, or a socket.
    pub(crate) bell: sys::Bell,
    pub(crate) own_region: OwnedFd,
    pub(crate) peer_region: OwnedFd,
    pub(crate) settings: Settings,
    peer_gone: bool,
    /// The pause before looking at the peer's index (see `wait_slow`).
    look_delay: LookDelay,
    /// Our last spin found the peer on our CPU (see `spin`): our next wait
    /// skips the pause before its first look, which only delays us when
    /// the peer cannot run until we sleep. Used up by that wait, so a
    /// stale hint costs one early look, never a run of them.
    peer_here: bool,
    /// The last `spin` spun its budget out with the peer on another CPU:
    /// the sleep after it measures a wake (see `wait_slow`).
    spun_out: bool,
    /// This thread's send epoch at our last wait (see `note_wait`).
    sends_seen: u64,
    /// Our parked word says "wake me" for readiness (after a `WouldBlock`
    /// or an `arm`), not taken back yet (see `readiness`).
    armed: bool,
    /// Our arming is unsure: the barrier a light-fenced peer needs failed
    /// (`Parked::SleepBriefly`), so its wake may be lost, or a wake we
    /// owe is still owed (see `owed`); whoever waits for it must look at
    /// the ring again soon.
    brief: bool,
    /// Our readiness flag is raised (see `arm`).
    raised: bool,
    /// The bytes the last `WouldBlock` waited for: what `arm` and the
    /// waitset wait for. Back to 1 (any room) once found there, or when
    /// the next operation starts, so a stale, larger want never holds up a
    /// smaller send.
    pub(crate) want: usize,
    /// The descriptor event loops poll, made on first use.
    readiness: OnceCell<Readiness>,
    /// A wake our publish owed the peer could not be sent (a transient
    /// failure): sent again before this end waits or arms (see
    /// `retry_wake`), whichever thread uses it; the thread that failed to
    /// send it also sends it before it sleeps on anything (see `owed`).
    pub(crate) wake_owed: bool,
}

impl Side {
    pub(crate) fn new(
        bell: sys::Bell,
        own_region: OwnedFd,
        peer_region: OwnedFd,
        settings: Settings,
    ) -> Side {
        pace::measure_yield_once();
        Side {
            bell,
            own_region,
            peer_region,
            settings,
            peer_gone: false,
            look_delay: LookDelay::calibrated(),
            peer_here: false,
            spun_out: false,
            sends_seen: 0,
            armed: false,
            brief: false,
            raised: false,
            want: 1,
            readiness: OnceCell::new(),
            wake_owed: false,
        }
    }

    /// Sends the wake a publish failed to send, if any; true if none is
    /// owed any more.
    fn retry_wake(&mut self) -> bool {
        if self.wake_owed && self.bell.wake() {
            self.wake_owed = false;
        }
        !self.wake_owed
    }

    /// Sends, before we sleep, the wakes owed by this end and by this
    /// process (see `owed`): a peer we owe may be the one to wake us. True
    /// if none is owed any more (both are tried, whatever the first says).
    fn pay_wakes(&mut self) -> bool {
        self.retry_wake() & owed::pay()
    }

    /// The descriptor event loops poll (see `readiness`), made on first
    /// use; our wake pipe (or socket) itself if it cannot be made (then an end that
    /// is ready already cannot make it readable).
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        match self.readiness() {
            Ok(r) => r.fd(),
            Err(_) => self.bell.sleeps_on(),
        }
    }

    fn readiness(&self) -> io::Result<&Readiness> {
        if let Some(r) = self.readiness.get() {
            return Ok(r);
        }
        let r = Readiness::new(self.bell.sleeps_on())?;
        Ok(self.readiness.get_or_init(|| r))
    }

    /// Whether an arming or a raised flag may need taking back.
    #[inline]
    pub(crate) fn unsettled(&self) -> bool {
        self.armed | self.raised
    }

    /// Takes back an arming (clears the parked word, drains the wake bytes
    /// it brought) and lowers our flag: the readiness they signalled is
    /// being consumed, and the descriptor must not stay readable for it.
    /// A wake byte the peer sends late (it saw our parked word before we
    /// cleared it) can still make the descriptor readable once more: a
    /// spurious readiness, taken back at the next `settle`.
    #[cold]
    #[inline(never)]
    pub(crate) fn settle(&mut self, ring: &mut impl Ring) {
        if self.armed {
            ring.unpark();
            self.armed = false;
            self.brief = false;
            let _ = self.bell.drain();
        }
        if self.raised {
            if let Some(r) = self.readiness.get() {
                r.lower();
            }
            self.raised = false;
        }
    }

    /// Raises our flag, if anyone can see it.
    fn raise(&mut self) -> io::Result<()> {
        if !self.raised {
            if let Some(r) = self.readiness.get() {
                r.raise()?;
                self.raised = true;
            }
        }
        Ok(())
    }

    /// Announces "wake me" as a sleeper would (the park handshake), after
    /// the ring said no. False if the ring is ready after all.
    fn arm_parked(&mut self, ring: &mut impl Ring, want: usize) -> io::Result<bool> {
        // Whoever arms sleeps next, in a poll of its own.
        forget_cpu();
        let parked = ring.park(want)?;
        if parked == Parked::Ready {
            return Ok(false);
        }
        // A wake we owe a peer, sent before we wait (see `owed`): that
        // peer may be the one to wake us.
        let paid = self.pay_wakes();
        self.armed = true;
        self.brief = parked == Parked::SleepBriefly || !paid;
        if self.brief {
            // The peer's wake-up could be lost, or we still owe one: look
            // again soon (an event loop sees our flag; the waitset sees
            // `brief`).
            self.raise()?;
        }
        Ok(true)
    }

    /// The level-triggered readiness call: true if an operation wanting
    /// `want` bytes can progress now (the ring has them, or the peer is
    /// gone), and then our descriptor polls readable until the readiness
    /// is consumed; otherwise arms, so that it polls readable once the
    /// operation can progress, and returns false.
    pub(crate) fn arm(&mut self, ring: &mut impl Ring, want: usize) -> io::Result<bool> {
        self.readiness()?;
        if !self.peer_gone && !ring.ready(want)? {
            self.settle(ring);
            if self.arm_parked(ring, want)? {
                if !self.bell.hung_up()? {
                    return Ok(false);
                }
                // Gone: the operation ends (EOF, BrokenPipe) or takes
                // what the peer left.
                self.gone(ring, want)?;
            }
        }
        // Ready: the wait for that room is over (see `End::ready_now`).
        self.want = 1;
        self.raise()?;
        Ok(true)
    }

    /// Wakes the peer (after `publish` said it sleeps); false if the wake
    /// could not be sent.
    #[cold]
    #[inline(never)]
    pub(crate) fn wake(&self) -> bool {
        self.bell.wake()
    }

    /// Waits until `ring` has `want` bytes (readable or free), the peer is
    /// gone, or the timeout passes (`TimedOut`); in non-blocking mode
    /// returns `WouldBlock` instead of waiting.
    #[inline]
    pub(crate) fn wait(&mut self, ring: &mut impl Ring, want: usize) -> io::Result<Ready> {
        if ring.ready_cached(want) {
            return Ok(Ready::Yes);
        }
        self.wait_slow(ring, want)
    }

    /// `wait` once the ring said no: kept out of line so the busy path
    /// stays small.
    #[cold]
    #[inline(never)]
    fn wait_slow<R: Ring>(&mut self, ring: &mut R, want: usize) -> io::Result<Ready> {
        // Our cached view of the peer's index ran out. A reader that looks
        // at the real one at once, item by item, pulls the line a streaming
        // writer keeps writing away from it and slows both down several
        // times over; after a pause it takes a batch instead. A writer
        // facing a full ring does the same with the reader's head: looking
        // at once kept both on the same few lines, a sliver of free space
        // at a time (measured: 5-10 ns per 8-byte item instead of 2). The
        // pause adapts (`pace::LookDelay`, in time, not in hints): it
        // doubles while looks find only a little and halves when they
        // find nothing. A reader whose thread has sent
        // anything since its last wait is likely waiting for a reply: it
        // looks at once, and its pause is back at the minimum for the
        // next wait. The reply cannot come before a cross-core round trip
        // (~100 ns on the AMD guest), and this wait's set-up and the
        // spin's (a `sched_getcpu`, the spin budget) already take most of
        // that: with a pause on top the spin began about when the reply
        // landed, on its critical path (roundtrip-8B on the loaded AMD
        // guest, chrt, 6 interleaved runs of 9: median 152 -> 145 ns,
        // 1.48x -> 1.43x cacheline; no change in its slow phase, when a
        // round trip of cache lines costs 370 ns). One early look costs
        // the writer little: its store must take the line back, which it
        // would after any look.
        if self.unsettled() {
            self.settle(ring);
        }
        // A new operation: what an earlier `WouldBlock` wanted is not
        // wanted any more (set again below if this one would block too).
        self.want = 1;
        let epoch = note_wait();
        if R::CONSUMER {
            READ_WAITED.with(|w| w.set(true));
        }
        let replying = R::CONSUMER && epoch != self.sends_seen;
        self.sends_seen = epoch;
        if replying {
            self.look_delay.reset();
        }
        // A peer our last spin found on our CPU cannot run while we pause:
        // look at once (perf on the AMD guest: the pause was ~50 ns of a
        // same-core roundtrip-8B's ~7.4 us).
        let peer_here = std::mem::take(&mut self.peer_here);
        if !self.settings.nonblocking && !self.peer_gone && !peer_here && !replying {
            self.look_delay.pause();
        }
        if ring.ready(want)? {
            if !replying {
                self.look_delay.found(ring.cached());
            }
            return Ok(Ready::Yes);
        }
        if ring.cached() == 0 {
            // Nothing at all yet: look sooner next time.
            self.look_delay.found_nothing();
        }
        if self.peer_gone {
            return Ok(Ready::PeerGone);
        }
        if self.settings.nonblocking {
            // Arm before saying WouldBlock, so the descriptor polls
            // readable once the operation can progress.
            self.want = want;
            if !self.arm_parked(ring, want)? {
                return Ok(Ready::Yes);
            }
            if self.bell.hung_up()? {
                return self.gone(ring, want);
            }
            return Err(error::would_block());
        }
        // The clock is read only when a timeout needs it at once: in a
        // round trip the reply often comes within a clock read or two
        // (28 ns each on the AMD guest), and a waiter still reading the
        // clock sees it late (see `spin`).
        let mut start = self.settings.timeout.map(|_| Instant::now());
        if self.spin(ring, want, &mut start, true)? {
            return Ok(Ready::Yes);
        }
        forget_cpu();
        // `Duration::MAX` (or any timeout past what the clock can say)
        // means no timeout, as for std's sockets.
        let deadline = self
            .settings
            .timeout
            .zip(start)
            .and_then(|(t, start)| start.checked_add(t));
        let expired = || deadline.is_some_and(|d| Instant::now() >= d);
        let mut spurious = 0u32;
        // A wait that spun its budget out with the peer on another CPU
        // measures its first sleep (see `pace`): clock reads on the way to
        // a system call, never on the spinning path.
        let mut measure = self.spun_out;
        loop {
            if spurious >= FLOOD_LIMIT {
                // Flooded: look every BRIEF_SLEEP without parking, so no
                // barrier and no wake is needed (see FLOOD_LIMIT).
                let left = deadline.map_or(BRIEF_SLEEP, |d| {
                    d.saturating_duration_since(Instant::now()).min(BRIEF_SLEEP)
                });
                let _ = self.pay_wakes();
                sys::nap(left);
                if self.bell.drain() || self.bell.hung_up()? {
                    return self.gone(ring, want);
                }
                if ring.ready(want)? {
                    return Ok(Ready::Yes);
                }
                if expired() {
                    return Err(error::wait_timed_out());
                }
                continue;
            }
            let mut until = deadline;
            let parked_at = measure.then(Instant::now);
            match ring.park(want)? {
                Parked::Ready => return Ok(Ready::Yes),
                Parked::Sleep => {}
                Parked::SleepBriefly => {
                    let brief = Instant::now() + BRIEF_SLEEP;
                    until = Some(until.map_or(brief, |d| d.min(brief)));
                }
            }
            // (Both, whatever the first says.)
            if !self.pay_wakes() {
                // Still owed, by this end or by this thread: try again
                // soon rather than sleep on a peer that may be sleeping
                // on us (see `owed`).
                let brief = Instant::now() + BRIEF_SLEEP;
                until = Some(until.map_or(brief, |d| d.min(brief)));
            }
            let woke = self.bell.sleep(until);
            ring.unpark();
            match woke? {
                Woke::HungUp => return self.gone(ring, want),
                Woke::Woken if ring.ready(want)? => {
                    if let Some(t) = parked_at {
                        pace::note_sleep(t.elapsed());
                    }
                    return Ok(Ready::Yes);
                }
                _ if ring.ready(want)? => return Ok(Ready::Yes),
                // Checked after any wake, not only a timed-out poll: a peer
                // that floods wake bytes must not defeat the timeout.
                _ if expired() => return Err(error::wait_timed_out()),
                Woke::Woken => spurious += 1,
                Woke::TimedOut => {}
            }
            // Only a first sleep that the peer's wake ended says something.
            measure = false;
        }
    }

    /// The peer hung up: what it published before closing is visible now
    /// (its stores precede its close, which precedes our poll seeing the
    /// hang-up), so one more look decides between data and `PeerGone`.
    fn gone(&mut self, ring: &mut impl Ring, want: usize) -> io::Result<Ready> {
        self.peer_gone = true;
        Ok(if ring.ready(want)? {
            Ready::Yes
        } else {
            Ready::PeerGone
        })
    }

    /// Spins for the configured time; true once the ring is ready.
    ///
    /// `start` is when the wait began, if the caller read the clock; if
    /// not, the first clock read (one `CLOCK_EVERY` of looks in) sets it,
    /// less that `CLOCK_EVERY`. Until then a look costs one load and one
    /// hint: no clock read, no division, so a waiter sees the peer's
    /// index within a hint of its store (on either vendor: the clock and
    /// the hint are both measured in time, see `pace`).
    fn spin(
        &mut self,
        ring: &mut impl Ring,
        want: usize,
        start: &mut Option<Instant>,
        hand_off: bool,
    ) -> io::Result<bool> {
        self.spun_out = false;
        let budget = self
            .settings
            .spin
            .budget()
            .min(self.settings.timeout.unwrap_or(Duration::MAX));
        if budget.is_zero() {
            return Ok(false);
        }
        // A peer on our own CPU cannot run while we spin: hand it the CPU
        // (unless the caller must not block in a yield, or has a timeout
        // shorter than the slice a yield may give some other task).
        self.peer_here = exchange_cpu(ring, fresh_cpu());
        if self.peer_here {
            let short = self
                .settings
                .timeout
                .is_some_and(|t| t.as_nanos() <= u128::from(pace::SLICE_GIVEN));
            if !hand_off || short {
                return Ok(false);
            }
            return Self::yield_to_peer(ring, want);
        }
        let pure_spin = pace::pure_spin(budget);
        // The budget counts our own time (see `pace::SpinClock`); a
        // caller that must not yield (a tokio task) is held one budget at
        // most.
        let wall_limit = if hand_off {
            self.settings.timeout
        } else {
            Some(budget)
        };
        let mut clock = pace::SpinClock::new(budget, wall_limit);
        let per_clock = self.look_delay.looks_per_clock().max(1);
        let mut until_clock = per_clock;
        loop {
            if ring.ready(want)? {
                return Ok(true);
            }
            // Some of `want` is there: the peer is busy making the rest, and
            // looking at its line every moment would only slow it down
            // (measured: a writer reserving 4 KiB at a time against a
            // reader freeing 8 bytes at a time, 3.5-4 ns per item instead of
            // 2). Such a pause is long enough to look at the clock after.
            let partial = ring.cached() > 0;
            if partial {
                self.look_delay.pause();
            }
            std::hint::spin_loop();
            until_clock -= 1;
            if !partial && until_clock != 0 {
                continue;
            }
            until_clock = per_clock;
            let now = Instant::now();
            let spent = now.duration_since(
                *start.get_or_insert_with(|| now.checked_sub(CLOCK_EVERY).unwrap_or(now)),
            );
            if clock.over(spent) {
                self.spun_out = true;
                return Ok(false);
            }
            if spent >= pure_spin {
                if let Some(others) = pace::yield_cpu() {
                    clock.gave(others);
                }
            }
        }
    }

    /// `spin` for a peer that shares our CPU: it cannot run while we
    /// spin, so we hand it the CPU with one `sched_yield` instead, and
    /// look once after; if the ring is still not ready, we sleep.
    ///
    /// Why not sleep at once: a busy peer answers within one yield, and a
    /// yield is one system call and one context switch, where a sleep and
    /// a wake are two system calls and a switch, plus the scheduler's
    /// work to dequeue the sleeper and enqueue it again. Nobody parks
    /// while both sides keep yielding, so publishes need no wake either.
    /// Measured on the AMD guest (Linux 6.18, both processes on CPU 0): a
    /// ping-pong over one shared word with `sched_yield` between looks
    /// took 3.5 us per round trip against a pipe's 6.1 us; with this
    /// hand-off, `shmpipe bench` gave `roundtrip-8B` same-core 3.8 us
    /// against the pipe's 5.1 us (5.7 us sleeping at once), and
    /// `token-ring-8` 2.3 us a hop against 4.1 us (5.3 us).
    ///
    /// Why only one: a yield that finds nothing handed the CPU to tasks
    /// other than the one we wait for, and yielding again would hand it
    /// to them in the same order (the scheduler runs yielders in turn).
    /// A token ring of 8 processes on one CPU whose yielders kept
    /// yielding went round in 1 yield a hop in some runs and in 3 in
    /// others, slower than sleeping. Sleeping instead, a waiter is woken
    /// by the peer's publish and runs next: after a lap the turns follow
    /// the ring.
    ///
    /// A yield that lasted a time slice gave the CPU to some third task,
    /// where the peer's wake would have preempted it: the process stops
    /// yielding for a while (see `pace::yield_cpu`). A yield may move us
    /// to another CPU: the hint is refreshed after it (13 ns against a
    /// yield's microsecond), so that the peer does not yield to a CPU we
    /// left.
    #[cold]
    #[inline(never)]
    fn yield_to_peer(ring: &mut impl Ring, want: usize) -> io::Result<bool> {
        if pace::yield_cpu().is_none() {
            return Ok(false);
        }
        let ready = ring.ready(want)?;
        exchange_cpu(ring, fresh_cpu());
        Ok(ready)
    }
}

/// Checks a timeout the way `std` does: zero is not a timeout.
pub(crate) fn check_timeout(t: Option<Duration>) -> io::Result<Option<Duration>> {
    if t == Some(Duration::ZERO) {
        return Err(error::invalid_input("cannot set a 0 duration timeout"));
    }
    Ok(t)
}
