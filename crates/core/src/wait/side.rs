//! The kernel side of a pipe end ([`Side`]): its wake channel, how it
//! blocks ([`Settings`]), and the arming that makes its descriptor poll
//! readable for event loops and the waitset.

use std::cell::OnceCell;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::time::Duration;

use super::ring::{Parked, Ring};
use crate::error;
use crate::owed;
use crate::pace::cpu::forget_cpu;
use crate::pace::{self, LookDelay, Spin};
use crate::readiness::Readiness;
use crate::sys;

/// `Side::said_cpu` before the end's first hint: neither a CPU nor
/// `u32::MAX` (unknown), so that the first send always publishes one.
const NEVER_SAID: u32 = u32::MAX - 1;

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

/// Checks a timeout the way `std` does: zero is not a timeout.
pub(crate) fn check_timeout(t: Option<Duration>) -> io::Result<Option<Duration>> {
    if t == Some(Duration::ZERO) {
        return Err(error::invalid_input("cannot set a 0 duration timeout"));
    }
    Ok(t)
}

/// How a wait ended (errors aside).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ready {
    /// The ring has what was asked for.
    Yes,
    /// Every copy of the peer's end is gone and the ring does not have it.
    PeerGone,
}

/// Whether a side's parked word says "wake me" for readiness (after a
/// `WouldBlock`, an `arm`, or the waitset's arming), not taken back yet
/// (see `settle`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Arming {
    /// Not armed.
    Off = 0,
    /// Armed: the peer's next publish wakes us.
    Sure,
    /// Armed unsurely: the barrier a light-fenced peer needs failed
    /// (`Parked::SleepBriefly`), so its wake may be lost, or a wake we owe
    /// is still owed (see `owed`); whoever waits for it must look at the
    /// ring again soon.
    Brief,
}

/// The kernel side of one pipe end: its wake channel, the region
/// descriptors (kept to hand the end on), and how it blocks.
///
/// Its flags are independent of each other: `peer_gone` (a fact about
/// the peer, kept once learnt), `peer_here` (a hint for the next wait),
/// `raised` (mirrors our readiness flag, which may be raised armed or not)
/// and `wake_owed` (a debt to the peer); any combination occurs.
#[derive(Debug)]
pub(crate) struct Side {
    /// How we sleep and wake the peer: a wake pipe each, or a socket.
    pub(crate) bell: sys::Bell,
    pub(crate) own_region: OwnedFd,
    pub(crate) peer_region: OwnedFd,
    pub(crate) settings: Settings,
    /// Every copy of the peer's end is gone (we saw its hang-up).
    pub(crate) peer_gone: bool,
    /// The pause before looking at the peer's index (see `Side::look`).
    pub(super) look_delay: LookDelay,
    /// Our last spin found the peer on our CPU (see `spin`): our next wait
    /// skips the pause before its first look, which only delays us when
    /// the peer cannot run until we sleep. Used up by that wait, so a
    /// stale hint costs one early look, never a run of them.
    pub(super) peer_here: bool,
    /// This thread's send epoch at our last wait (see `note_wait`).
    pub(super) sends_seen: u64,
    /// The CPU this end last published as ours (see
    /// `End::hint_if_moved`); `NEVER_SAID` before the first.
    pub(super) said_cpu: u32,
    /// Whether our parked word says "wake me" for readiness, and how
    /// surely a wake will come.
    pub(super) arming: Arming,
    /// Our readiness flag is raised (see `arm`).
    pub(super) raised: bool,
    /// The bytes the last `WouldBlock` waited for: what `arm` and the
    /// waitset wait for. Back to 1 (any room) once found there, or when
    /// the next operation starts, so a stale, larger want never holds up a
    /// smaller send.
    pub(crate) want: usize,
    /// The descriptor event loops poll, made on first use.
    pub(super) readiness: OnceCell<Readiness>,
    /// A wake our publish owed the peer could not be sent (a transient
    /// failure): sent again before this end waits or arms (see
    /// `retry_wake`), whichever thread uses it; the thread that failed to
    /// send it also sends it before it sleeps on anything (see `owed`).
    pub(crate) wake_owed: bool,
    /// Turns this copy ended (see `shared::forget_gone`): every 64th
    /// looks whether the end's other holders still hold it.
    pub(crate) turns: u32,
}

impl Side {
    pub(crate) fn new(
        bell: sys::Bell,
        own_region: OwnedFd,
        peer_region: OwnedFd,
        settings: Settings,
    ) -> Side {
        pace::measure_yield_once();
        super::turns::learn_reply_copies();
        Side {
            bell,
            own_region,
            peer_region,
            settings,
            peer_gone: false,
            look_delay: LookDelay::calibrated(),
            peer_here: false,
            sends_seen: 0,
            said_cpu: NEVER_SAID,
            arming: Arming::Off,
            raised: false,
            want: 1,
            readiness: OnceCell::new(),
            wake_owed: false,
            turns: 0,
        }
    }

    /// Sends the wake a publish failed to send, if any; true if none is
    /// owed any more.
    pub(super) fn retry_wake(&mut self) -> bool {
        if self.wake_owed && self.bell.wake() {
            self.wake_owed = false;
        }
        !self.wake_owed
    }

    /// Sends, before we sleep, the wakes owed by this end and by this
    /// process (see `owed`): a peer we owe may be the one to wake us. True
    /// if none is owed any more (both are tried, whatever the first says).
    pub(super) fn pay_wakes(&mut self) -> bool {
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

    pub(super) fn readiness(&self) -> io::Result<&Readiness> {
        if let Some(r) = self.readiness.get() {
            return Ok(r);
        }
        let r = Readiness::new(self.bell.sleeps_on())?;
        Ok(self.readiness.get_or_init(|| r))
    }

    /// Whether an arming or a raised flag may need taking back.
    #[inline]
    pub(crate) fn unsettled(&self) -> bool {
        // One test of both on every wait's path (`Arming::Off` is 0).
        (self.arming as u8 | u8::from(self.raised)) != 0
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
        if self.arming != Arming::Off {
            ring.unpark();
            self.arming = Arming::Off;
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
    pub(super) fn raise(&mut self) -> io::Result<()> {
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
    pub(super) fn arm_parked(&mut self, ring: &mut impl Ring, want: usize) -> io::Result<bool> {
        // Whoever arms sleeps next, in a poll of its own.
        forget_cpu();
        let parked = ring.park(want)?;
        if parked == Parked::Ready {
            return Ok(false);
        }
        // A wake we owe a peer, sent before we wait (see `owed`): that
        // peer may be the one to wake us.
        let paid = self.pay_wakes();
        if parked == Parked::SleepBriefly || !paid {
            // The peer's wake-up could be lost, or we still owe one: look
            // again soon (an event loop sees our flag; the waitset sees
            // `Arming::Brief`).
            self.arming = Arming::Brief;
            self.raise()?;
        } else {
            self.arming = Arming::Sure;
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

    /// The peer hung up: what it published before closing is visible now
    /// (its stores precede its close, which precedes our poll seeing the
    /// hang-up), so one more look decides between data and `PeerGone`.
    pub(super) fn gone(&mut self, ring: &mut impl Ring, want: usize) -> io::Result<Ready> {
        self.peer_gone = true;
        ring.shut();
        Ok(if ring.ready(want)? {
            Ready::Yes
        } else {
            Ready::PeerGone
        })
    }
}
