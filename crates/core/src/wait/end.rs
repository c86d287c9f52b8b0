//! A ring end with its kernel side ([`End`]): what every pipe end type
//! holds. Publishing and waking the peer, the one-step reads and writes
//! of a stream, and the hooks the waitset and tokio use. (The settings
//! methods the public end types share are generated in `crate::end`.)

use std::io;

use shmpipe_ring::{Consumer, Producer};

use super::ring::{exchange_cpu, Ring};
use super::side::{Arming, Ready, Side};
use super::turns::{note_first_send, read_waited, sent};
use crate::error;
use crate::owed;
use crate::pace::cpu::{cached_cpu, thread_cpu};

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
    // Dropped in this order: our descriptors close before the ring's end
    // says it is going (see the ring's `Consumer::drop`), so that a peer
    // that looks at once sees our hang-up.
    pub(crate) side: Side,
    pub(crate) ring: R,
}

impl<R: Ring> End<R> {
    /// Publishes what is committed and wakes the peer if it sleeps. False
    /// if a writer learnt there that every copy of the reader is gone
    /// (see `wake_peer`).
    #[inline]
    pub(crate) fn publish(&mut self) -> bool {
        // A writer's publish after another since this thread last waited
        // (a stream's): one thread-local load, no inline copy (see
        // `publish_first_send`). While `sent()`, `read_waited()` does not
        // hold: a wait sets it after `note_wait` cleared `sent`, and the
        // first send after clears it as it sets `sent`.
        let woke = if R::CONSUMER {
            self.ring.publish()
        } else if sent() {
            self.ring.publish_copy(false)
        } else {
            return self.publish_first_send();
        };
        if woke {
            return self.wake_peer();
        }
        true
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
    /// reader a cache-line transfer on the first send since this thread
    /// waited as a reader (a reply, or a request after one); kept only on
    /// the CPUs where that wins (`read_waited` holds only there, see
    /// `turns::learn_reply_copies`). Never for the sends of a stream, whose
    /// reader takes them in batches from the data, and whose writer would
    /// pay four more stores an item for nothing (measured: 7.0 ns per
    /// 8-byte item instead of 3.8 with a copy after each wait for space).
    #[inline]
    fn publish_first_send(&mut self) -> bool {
        let reply = read_waited();
        note_first_send();
        if self.ring.publish_copy(reply) {
            return self.wake_peer();
        }
        self.hint_if_moved();
        true
    }

    /// Wakes the peer that our publish found asleep, or that said it is
    /// going (see the ring's `Consumer::drop`). A writer then asks the
    /// kernel whether every copy of the reader is gone: its liveness
    /// descriptor's hang-up, without waiting. A reader that went
    /// announces it as a parking, and one killed asleep leaves its parking
    /// behind, so this is where a writer learns either at its first
    /// publish after (one `poll` beside the wake's `write`, on a path that
    /// makes a system call anyway; a busy pipe never comes here). If it
    /// is gone, the writer is shut (no room from now on, see the ring's
    /// `Producer::shut`), and, unless the reader took it before it went,
    /// the write that brought us here reports `BrokenPipe` (false), as a
    /// kernel pipe's first write after the last reader's close does.
    #[cold]
    #[inline(never)]
    fn wake_peer(&mut self) -> bool {
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
        if R::CONSUMER {
            return true;
        }
        self.ring.peer_left_fence();
        // A reader that took what we published and then went (between
        // our publish and our look) got this write: it succeeded, as a
        // kernel pipe's write before the reader's close does.
        !self.reader_gone() || self.ring.consumed_all()
    }

    /// A writer asks the kernel whether every copy of the reader is gone
    /// (see `wake_peer`); if so, it is shut. A failed `poll` (`ENOMEM`)
    /// counts as there: the next look decides.
    fn reader_gone(&mut self) -> bool {
        if self.side.peer_gone || self.side.bell.hung_up().unwrap_or(false) {
            self.side.peer_gone = true;
            self.side.wake_owed = false;
            self.ring.shut();
            return true;
        }
        false
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
        match self.side.arming {
            Arming::Off => {}
            Arming::Sure => return true,
            Arming::Brief => {
                // Armed unsurely: park again, for another try at the
                // barrier.
                self.ring.unpark();
                self.side.arming = Arming::Off;
            }
        }
        let want = self.want();
        self.side.arm_parked(&mut self.ring, want).unwrap_or(false)
    }

    /// Whether our arming is unsure (see `Arming::Brief`): the waitset
    /// must look at us again soon rather than sleep until a wake.
    pub(crate) fn armed_briefly(&self) -> bool {
        self.side.arming == Arming::Brief
    }

    /// The waitset saw our wake pipe (or socket) readable: takes the arming back and the
    /// wake bytes out; after a hang-up, the peer is gone. True if it is.
    pub(crate) fn woken(&mut self, hung_up: bool) -> bool {
        if self.side.arming != Arming::Off {
            self.ring.unpark();
            self.side.arming = Arming::Off;
        }
        let eof = self.side.bell.drain();
        if hung_up || eof {
            self.side.peer_gone = true;
            self.ring.shut();
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
    /// (False too if `wake_peer` found the reader gone: the caller tells
    /// the two apart by `side.peer_gone`.)
    #[inline(always)]
    fn wake_if(&mut self, published: Option<bool>) -> bool {
        match published {
            Some(woke) => !woke || self.wake_peer(),
            None => false,
        }
    }

    /// Kept out of line so that `publish`, which callers inline, stays small.
    #[cold]
    #[inline(never)]
    fn refresh_cpu_hint(&mut self) {
        let cpu = thread_cpu();
        exchange_cpu(&mut self.ring, cpu);
        self.side.said_cpu = cpu;
    }

    /// `refresh_cpu_hint` at a first send, only if this thread may have
    /// moved since this end last said where it runs (it waited, yielded or
    /// slept since, or its last spin found it elsewhere): one thread-local
    /// load and a compare otherwise. What this skips is the look at the
    /// peer's hint, which picks our fences (see `exchange_cpu`): any
    /// choice is sound, and a peer that moved is seen at our next refresh
    /// or wake (a peer that came to our CPU parks and is woken, the wake
    /// refreshes: one `membarrier` at most for its move).
    #[inline(always)]
    fn hint_if_moved(&mut self) {
        if cached_cpu() != self.side.said_cpu {
            self.refresh_cpu_hint();
        }
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

    /// A read's first look when the cached view is empty, for a reply:
    /// if this thread sent since this end last waited and the writer
    /// published exactly `buf.len()` bytes (a small reply), takes them
    /// at once (the ring's `take_reply`: one look, the copy beside the
    /// tail straight into `buf`, one publish) with the bookkeeping of a
    /// wait that found them at its first look; false, with nothing done,
    /// otherwise (then the caller waits as always). No frame of a wait,
    /// no stash: what a reply costs a waiter that finds it there.
    #[inline(always)]
    pub(crate) fn take_reply(&mut self, buf: &mut [u8]) -> bool {
        if !self.side.awaits_reply() {
            return false;
        }
        let Some(woke) = self.ring.take_reply(buf) else {
            return false;
        };
        self.side.took_reply();
        !woke || self.wake_peer()
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
        if !sent() {
            return self.send_first(buf);
        }
        let published = self.ring.push_publish(buf);
        self.wake_if(published)
    }

    /// `try_send` of the first send since this thread last waited (see
    /// `publish_first_send`), in one ring call and without a call of its
    /// own: a reply keeps its inline copy where replies carry one (see
    /// `publish_first_send`), taken from `buf` as it is written rather
    /// than read back from the data. These are the
    /// instructions between the wait that ended and the reply's tail
    /// store (roundtrip-8B, callgrind: 652 -> 585 per round trip).
    /// `publish_first_send` does the rest (a batch waits, or no room).
    #[inline(always)]
    fn send_first(&mut self, buf: &[u8]) -> bool {
        let reply = read_waited();
        let Some(woke) = self.ring.push_publish_copy(buf, reply) else {
            // A batch waits to be published (this send joins it), or
            // there is no room.
            if !self.ring.try_push(buf) {
                return false;
            }
            return self.publish_first_send();
        };
        note_first_send();
        if woke {
            return self.wake_peer();
        }
        self.hint_if_moved();
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
        if self.side.peer_gone || !self.publish() {
            return Err(error::broken_pipe());
        }
        // Only the window ran out (see the ring's `WINDOW`): its next one,
        // at once; and if the reader's head has not moved since the last
        // window although bytes wait, a look whether it is still there (it
        // may have been killed, or ended without dropping its end).
        if let Some(stalled) = self.ring.renew_window(want).map_err(error::protocol)? {
            if stalled && self.reader_gone() {
                return Err(error::broken_pipe());
            }
            if self.ring.free_cached() >= want {
                return Ok(());
            }
        }
        // No look at the reader's head here: `wait` pauses first (see
        // `Side::look`).
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
        // A turn left open (a forgotten grant or chunk) is left before the
        // memory goes: the lock's robust hand-over reads it at our exit,
        // and an unmapped lock would stay held for the other holders.
        self.leave_turn_if_in();
        if self.ring.publish_if_current() || self.side.wake_owed {
            // A failed wake has nobody left to ask again; the peer sees
            // our hang-up instead (unless another copy of the end lives
            // on: it publishes, and wakes, itself).
            let _ = self.side.wake();
        }
        crate::shared::leave(crate::shared::Shared::gate(&self.ring));
    }
}
