//! A blocking wait ([`Side::wait`]): a pause and a look at the peer's
//! index, a spin, then sleep in the kernel behind the ring's park
//! handshake until the peer wakes us, hangs up, or the timeout passes.

use std::io;
use std::time::{Duration, Instant};

use super::ring::{exchange_cpu, Parked, Ring};
use super::side::{Ready, Side};
use super::turns::{note_wait, send_epoch};
use crate::error;
use crate::pace::cpu::{forget_cpu, fresh_cpu};
use crate::pace::{self, CLOCK_EVERY};
use crate::sys::{self, Woke};

/// How long a side sleeps between looks when it cannot rely on a wake-up.
pub(crate) const BRIEF_SLEEP: Duration = Duration::from_millis(1);

/// Wake-ups in a row that find nothing, in one wait, after which the peer
/// counts as flooding us with wake bytes. An honest peer sends one byte
/// per parking, so a stale byte or two is all it can leave; each parking
/// may cost a `membarrier` that interrupts every CPU running a registered
/// process, so a flooding peer must not get one per byte. Past this the
/// wait stops parking and looks every `BRIEF_SLEEP` instead.
const FLOOD_LIMIT: u32 = 8;

/// How a spin ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Spun {
    /// The ring is ready.
    Ready,
    /// Not ready when the budget ran out, with the peer on another CPU:
    /// the sleep after it measures a wake (see `pace::note_sleep`).
    Out,
    /// Not ready, and not for lack of time: no budget, or the peer shares
    /// our CPU (handed the CPU once, or not allowed to be).
    Short,
}

/// What one sleep of a blocking wait found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slept {
    /// The wait is over.
    Done(Ready),
    /// Woken, but the ring is not ready: perhaps a stale wake byte,
    /// perhaps a flood (see `FLOOD_LIMIT`).
    Spurious,
    /// Nothing yet (a brief sleep ended, or a nap): sleep again.
    Again,
}

/// Whether `deadline` has passed (never, without one).
fn expired(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

impl Side {
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

    /// `wait` once the ring said no: a pause and a look at the peer's
    /// index, then (still not ready) `WouldBlock` or `block`. Kept out of
    /// line so the busy path stays small; the look is inlined here and the
    /// rest kept out of line, so that a wait the look ends (a stream's, a
    /// reply already there) sets up a smaller frame.
    #[cold]
    #[inline(never)]
    fn wait_slow<R: Ring>(&mut self, ring: &mut R, want: usize) -> io::Result<Ready> {
        let replying = self.begin::<R>(ring);
        // A hint for this wait only (see `peer_here`).
        let peer_here = std::mem::take(&mut self.peer_here);
        if self.look(ring, want, replying, peer_here)? {
            return Ok(Ready::Yes);
        }
        if self.peer_gone {
            return Ok(Ready::PeerGone);
        }
        if self.settings.nonblocking {
            return self.would_block(ring, want);
        }
        self.block(ring, want, peer_here)
    }

    /// Starts a wait: takes back an arming or a raised flag (the readiness
    /// they signalled is being consumed), forgets what an earlier
    /// `WouldBlock` wanted (set again if this wait would block too), and
    /// notes that this thread waits. Returns whether a reply is likely
    /// awaited: this is a reader, and its thread has sent since this end
    /// last waited.
    #[inline(always)]
    fn begin<R: Ring>(&mut self, ring: &mut R) -> bool {
        if self.unsettled() {
            self.settle(ring);
        }
        self.want = 1;
        let epoch = note_wait(R::CONSUMER);
        let replying = R::CONSUMER && epoch != self.sends_seen;
        self.sends_seen = epoch;
        replying
    }

    /// Whether a read may take a reply at its first look, before any of a
    /// wait's set-up (see `End::take_reply`): nothing to take back (see
    /// `begin`), and this thread sent since this end last waited, so that
    /// a reply is likely awaited and the look needs no pause (see `look`).
    #[inline(always)]
    pub(super) fn awaits_reply(&self) -> bool {
        !self.unsettled() && send_epoch() != self.sends_seen
    }

    /// The bookkeeping of a wait that a reply ended at its first look
    /// (see `awaits_reply`): what `begin`, `wait_slow` and `look` do for
    /// a reply found at once. (A reader's `want` is always 1.)
    #[inline(always)]
    pub(super) fn took_reply(&mut self) {
        debug_assert_eq!(self.want, 1);
        self.sends_seen = note_wait(true);
        self.peer_here = false;
        self.look_delay.reset();
    }

    /// The first look at the peer's index, after the adaptive pause
    /// (`pace::LookDelay`): a reader that looks at once, item by item,
    /// pulls the line a streaming writer keeps writing away from it and
    /// slows both down, and a writer facing a full ring does the same
    /// with the reader's head. No pause for a reply (it cannot come
    /// sooner than a cross-core round trip, which this wait's set-up
    /// already spends), for a peer our last spin found on our CPU (it
    /// cannot run while we pause), for a gone peer, or for a non-blocking
    /// call. True if the ring is ready. Why and what it saves: docs/pace.md.
    #[inline(always)]
    fn look<R: Ring>(
        &mut self,
        ring: &mut R,
        want: usize,
        replying: bool,
        peer_here: bool,
    ) -> io::Result<bool> {
        if replying {
            // The next wait's pause starts from the minimum too.
            self.look_delay.reset();
        }
        if !self.settings.nonblocking && !self.peer_gone && !peer_here && !replying {
            self.look_delay.pause();
        }
        if ring.ready(want)? {
            if !replying {
                self.look_delay.found(ring.cached());
            }
            return Ok(true);
        }
        if ring.cached() == 0 {
            // Nothing at all yet: look sooner next time.
            self.look_delay.found_nothing();
        }
        Ok(false)
    }

    /// A non-blocking call found the ring not ready: arms before saying
    /// `WouldBlock`, so the descriptor polls readable once the operation
    /// can progress.
    #[cold]
    #[inline(never)]
    fn would_block(&mut self, ring: &mut impl Ring, want: usize) -> io::Result<Ready> {
        self.want = want;
        if !self.arm_parked(ring, want)? {
            return Ok(Ready::Yes);
        }
        if self.bell.hung_up()? {
            return self.gone(ring, want);
        }
        Err(error::would_block())
    }

    /// A blocking call found the ring not ready: spins, then sleeps until
    /// it is, the peer is gone, or the timeout passes. `peer_here`: our
    /// last spin found the peer on our CPU.
    #[inline(never)]
    fn block(&mut self, ring: &mut impl Ring, want: usize, peer_here: bool) -> io::Result<Ready> {
        // The first looks of the spin, before any of its set-up (the CPU
        // hint, the budget, the clock): a reply that comes within them
        // costs this wait a load loop and nothing else (docs/roundtrip.md).
        // Not for a peer our last spin found on our CPU (it cannot run
        // while we look), a timeout (its clock starts now), or a spin
        // shorter than the looks.
        let pre_spun =
            !peer_here && self.settings.timeout.is_none() && self.settings.spin.spins_first();
        if pre_spun && self.first_looks(ring, want)? {
            return Ok(Ready::Yes);
        }
        // The clock is read only when a timeout needs it at once: in a
        // round trip the reply often comes within a clock read or two
        // (28 ns each on the AMD guest), and a waiter still reading the
        // clock sees it late (see `spin`).
        let mut start = self.settings.timeout.map(|_| Instant::now());
        // A wait that spun its budget out with the peer on another CPU
        // measures its first sleep (see `pace::note_sleep`): clock reads
        // on the way to a system call, never on the spinning path.
        let measure = match self.spin_after(ring, want, &mut start, true, pre_spun)? {
            Spun::Ready => return Ok(Ready::Yes),
            Spun::Out => true,
            Spun::Short => false,
        };
        forget_cpu();
        // `Duration::MAX` (or any timeout past what the clock can say)
        // means no timeout, as for std's sockets.
        let deadline = self
            .settings
            .timeout
            .zip(start)
            .and_then(|(t, start)| start.checked_add(t));
        self.sleep(ring, want, deadline, measure)
    }

    /// Sleeps in the kernel, parked, until the ring is ready, the peer is
    /// gone, or `deadline` passes; a peer that floods us with wake bytes
    /// (see `FLOOD_LIMIT`) is looked at every `BRIEF_SLEEP` instead.
    /// `measure`: the first sleep measures the wake cost.
    fn sleep(
        &mut self,
        ring: &mut impl Ring,
        want: usize,
        deadline: Option<Instant>,
        mut measure: bool,
    ) -> io::Result<Ready> {
        let mut spurious = 0u32;
        loop {
            let slept = if spurious >= FLOOD_LIMIT {
                self.nap(ring, want, deadline)?
            } else {
                self.sleep_parked(ring, want, deadline, measure)?
            };
            match slept {
                Slept::Done(ready) => return Ok(ready),
                Slept::Spurious => spurious += 1,
                Slept::Again => {}
            }
            // Only a first sleep that the peer's wake ended says something.
            measure = false;
        }
    }

    /// One sleep behind the park handshake, until a wake, a hang-up or
    /// `deadline` (sooner if the wake could be lost, or we still owe one).
    fn sleep_parked(
        &mut self,
        ring: &mut impl Ring,
        want: usize,
        deadline: Option<Instant>,
        measure: bool,
    ) -> io::Result<Slept> {
        let mut until = deadline;
        let parked_at = measure.then(Instant::now);
        match ring.park(want)? {
            Parked::Ready => return Ok(Slept::Done(Ready::Yes)),
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
        Ok(match woke? {
            Woke::HungUp => Slept::Done(self.gone(ring, want)?),
            Woke::Woken if ring.ready(want)? => {
                if let Some(t) = parked_at {
                    pace::note_sleep(t.elapsed());
                }
                Slept::Done(Ready::Yes)
            }
            _ if ring.ready(want)? => Slept::Done(Ready::Yes),
            // Checked after any wake, not only a timed-out poll: a peer
            // that floods wake bytes must not defeat the timeout.
            _ if expired(deadline) => return Err(error::wait_timed_out()),
            Woke::Woken => Slept::Spurious,
            Woke::TimedOut => Slept::Again,
        })
    }

    /// Flooded: one look after `BRIEF_SLEEP` (or what is left until
    /// `deadline`) without parking, so no barrier and no wake is needed
    /// (see `FLOOD_LIMIT`).
    fn nap(
        &mut self,
        ring: &mut impl Ring,
        want: usize,
        deadline: Option<Instant>,
    ) -> io::Result<Slept> {
        let left = deadline.map_or(BRIEF_SLEEP, |d| {
            d.saturating_duration_since(Instant::now()).min(BRIEF_SLEEP)
        });
        let _ = self.pay_wakes();
        sys::nap(left);
        if self.bell.drain() || self.bell.hung_up()? {
            return Ok(Slept::Done(self.gone(ring, want)?));
        }
        if ring.ready(want)? {
            return Ok(Slept::Done(Ready::Yes));
        }
        if expired(deadline) {
            return Err(error::wait_timed_out());
        }
        Ok(Slept::Again)
    }

    /// Spins for the configured time, or until the ring is ready.
    ///
    /// `start` is when the wait began, if the caller read the clock; if
    /// not, the first clock read (one `CLOCK_EVERY` of looks in) sets it,
    /// less that `CLOCK_EVERY`. Until then a look costs one load and one
    /// hint: no clock read, no division, so a waiter sees the peer's
    /// index within a hint of its store (on either vendor: the clock and
    /// the hint are both measured in time, see `pace`). Only async ends
    /// spin without a wait around it (`End::spin_ready`).
    #[cfg(feature = "tokio")]
    pub(super) fn spin(
        &mut self,
        ring: &mut impl Ring,
        want: usize,
        start: &mut Option<Instant>,
        hand_off: bool,
    ) -> io::Result<Spun> {
        self.spin_after(ring, want, start, hand_off, false)
    }

    /// The looks `block` makes before the spin's set-up: one
    /// `CLOCK_EVERY` of them, each a load of the peer's index and a hint,
    /// nothing else. True if the ring is ready; false once they are
    /// spent, or at once when part of `want` is there (the spin paces its
    /// looks then, see `spin`).
    #[inline(always)]
    fn first_looks(&mut self, ring: &mut impl Ring, want: usize) -> io::Result<bool> {
        for _ in 0..self.look_delay.looks_per_clock() {
            if ring.ready(want)? {
                return Ok(true);
            }
            if ring.cached() > 0 {
                break;
            }
            std::hint::spin_loop();
        }
        Ok(false)
    }

    /// `spin`, after `block`'s first looks if `pre_spun` (one
    /// `CLOCK_EVERY` of them: the clock is read at once).
    fn spin_after(
        &mut self,
        ring: &mut impl Ring,
        want: usize,
        start: &mut Option<Instant>,
        hand_off: bool,
        pre_spun: bool,
    ) -> io::Result<Spun> {
        let budget = self
            .settings
            .spin
            .budget()
            .min(self.settings.timeout.unwrap_or(Duration::MAX));
        if budget.is_zero() {
            // No spin, but the peer still learns where we sleep: a peer on
            // our CPU then publishes with full fences, and our parkings
            // skip the `membarrier` its light ones would need (measured:
            // one a parking on one CPU, docs/roundtrip.md).
            exchange_cpu(ring, fresh_cpu());
            return Ok(Spun::Short);
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
                return Ok(Spun::Short);
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
        // After the first looks, the clock at once: they were the first
        // `CLOCK_EVERY`, which `start`'s first reading counts.
        let mut until_clock = if pre_spun { 1 } else { per_clock };
        loop {
            if ring.ready(want)? {
                return Ok(Spun::Ready);
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
                return Ok(Spun::Out);
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
    fn yield_to_peer(ring: &mut impl Ring, want: usize) -> io::Result<Spun> {
        if pace::yield_cpu().is_none() {
            return Ok(Spun::Short);
        }
        let ready = ring.ready(want)?;
        exchange_cpu(ring, fresh_cpu());
        Ok(if ready { Spun::Ready } else { Spun::Short })
    }
}
