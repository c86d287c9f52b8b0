//! The two control blocks one end of a ring works with, and what keeps them
//! alive.

use std::any::Any;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::layout::{Control, PARKED};
use crate::sync::{compiler_fence, fence, AtomicU64, Ordering};

/// Anything that owns the memory a ring lives in (a mapping, a heap block).
pub type Keepalive = Arc<dyn Any + Send + Sync>;

/// This side's control block (written only by us) and the peer's (read
/// only), and this side's part of the park/wake handshake, which both ends
/// of a ring play the same way.
#[derive(Debug)]
pub(crate) struct Link {
    own: NonNull<Control>,
    peer: NonNull<Control>,
    _keep: KeepDebug,
    /// Our park epoch: bumped each time we park, so the peer can tell a
    /// new parking from one it already woke.
    epoch: u64,
    /// The peer's parked word we last asked to wake.
    woken: u64,
    /// We publish with a compiler fence only (see `use_light_fences`).
    light: bool,
    /// We may publish with light fences (see `use_light_fences`), and do
    /// while the peer runs on another CPU (see `peer_shares_cpu`).
    light_ok: bool,
}

struct KeepDebug(#[allow(dead_code)] Keepalive);

impl std::fmt::Debug for KeepDebug {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keepalive")
    }
}

// SAFETY: the pointers are to atomics only (Control is all atomics), valid
// while `_keep` lives, which travels with the Link.
unsafe impl Send for Link {}

impl Link {
    /// # Safety
    ///
    /// Both pointers must stay valid for as long as `keep` is alive.
    pub(crate) unsafe fn new(
        own: NonNull<Control>,
        peer: NonNull<Control>,
        keep: Keepalive,
    ) -> Link {
        let mut link = Link {
            own,
            peer,
            _keep: KeepDebug(keep),
            epoch: 0,
            woken: 0,
            light: false,
            light_ok: false,
        };
        // Go on from the epoch a previous owner of this end left in our
        // block (an end handed to another process is attached anew), so
        // that the peer never takes a new parking for one it already woke.
        link.epoch = link.own().parked.0.load(Ordering::Relaxed) >> 1;
        link.unpark();
        link
    }

    #[inline]
    pub(crate) fn own(&self) -> &Control {
        // SAFETY: valid while `_keep` lives (contract of `new`); Control has
        // only atomics, so a shared reference is fine even while the peer
        // process writes its own fields.
        unsafe { self.own.as_ref() }
    }

    /// Records the CPU this side runs on (a scheduling hint only). Stored
    /// only when it changed: the peer reads this line, and a store would
    /// have to take it back first, holding up the index store that follows
    /// it (stores leave in order) by a cross-core transfer.
    #[inline]
    pub(crate) fn set_cpu(&self, cpu: u32) {
        let line = &self.own().cpu.0;
        if line.load(Ordering::Relaxed) != cpu {
            line.store(cpu, Ordering::Relaxed);
        }
    }

    /// The CPU the peer said it ran on; any value is harmless.
    #[inline]
    pub(crate) fn peer_cpu(&self) -> u32 {
        self.peer().cpu.0.load(Ordering::Relaxed)
    }

    #[inline]
    pub(crate) fn peer(&self) -> &Control {
        // SAFETY: as for `own`.
        unsafe { self.peer.as_ref() }
    }

    /// The second half of a publish, after the index store: whether the
    /// peer sleeps and must be woken (once per parking).
    #[inline]
    pub(crate) fn peer_needs_wake(&mut self) -> bool {
        self.peer_needs_wake_with(self.light)
    }

    /// `peer_needs_wake` for a copy of the end that may be stale (one left
    /// by `fork`, or by handing the end on; see `publish_if_current`):
    /// always with a hardware fence. Another copy may have switched the
    /// header's light-fence flag since this copy last did, so our `light`
    /// may say "light" while the peer, reading the cleared flag, skips its
    /// membarrier: a light publish would then lose its wake-up.
    pub(crate) fn peer_needs_wake_fenced(&mut self) -> bool {
        self.peer_needs_wake_with(false)
    }

    #[inline]
    fn peer_needs_wake_with(&mut self, light: bool) -> bool {
        let parked = fence_and_look::<true>(&self.peer().parked.0, !light);
        if parked & PARKED != 0 && parked != self.woken {
            self.woken = parked;
            return true;
        }
        false
    }

    /// The wake `peer_needs_wake` asked for could not be sent: forget that
    /// this parking was woken, so the next publish asks again.
    pub(crate) fn wake_failed(&mut self) {
        self.woken = 0;
    }

    /// The first half of parking: says we are about to sleep, then fences
    /// (and runs `barrier` if the peer publishes with light fences); the
    /// caller re-checks the peer's index next.
    pub(crate) fn announce_park(&mut self, barrier: impl FnOnce()) {
        self.epoch = self.bump_epoch(Ordering::Relaxed);
        // SYNC: pairs with the fence in `peer_needs_wake` on the other side.
        fence(Ordering::SeqCst);
        // The peer's flag is read after our fence (see use_light_fences).
        if self.peer_uses_light_fences() {
            barrier();
        }
    }

    /// Clears our parked bit (keeping the epoch) after sleeping. The
    /// word's epoch, not ours: another copy of this end may have raised it
    /// since we parked (see `bump_epoch`).
    pub(crate) fn unpark(&self) {
        self.own().parked.0.fetch_and(!PARKED, Ordering::Relaxed);
    }

    /// Stores a parking newer than any the word held (its epoch past both
    /// the word's and ours) and returns its epoch. A read-modify-write,
    /// not a store of our own epoch: copies of an end left by `fork` share
    /// the word and each counts its own epoch, so a plain store could
    /// repeat a parking the peer already woke (see `announce_gone`), and
    /// the peer, taking it for that one, would never wake us.
    fn bump_epoch(&self, success: Ordering) -> u64 {
        let word = &self.own().parked.0;
        let mut cur = word.load(Ordering::Relaxed);
        loop {
            let epoch = (cur >> 1).max(self.epoch).wrapping_add(1);
            match word.compare_exchange_weak(cur, epoch << 1 | PARKED, success, Ordering::Relaxed) {
                Ok(_) => return epoch,
                Err(now) => cur = now,
            }
        }
    }

    /// Says, in our parked word, that this copy of the end is going away:
    /// a new parking, so the peer's next publish takes its wake path
    /// (`peer_needs_wake`), where its owner asks the kernel whether every
    /// copy is gone (the liveness descriptor's hang-up). A copy left by
    /// `fork` that goes leaves the pipe open for the others, which only
    /// the kernel's count can tell; so the word says "look", never
    /// "closed". The caller closes its liveness descriptors first: the
    /// peer may look as soon as this store is visible.
    pub(crate) fn announce_gone(&mut self) {
        // SYNC: Release, so that whatever we did before (our last publish,
        // closing our descriptors) happens before a peer that reads this
        // parking and then fences with Acquire (`Producer::peer_left`).
        self.epoch = self.bump_epoch(Ordering::Release);
    }

    /// See `Producer::use_light_fences`.
    pub(crate) fn use_light_fences(&mut self, on: bool) {
        self.light_ok = on;
        self.switch_fences(on);
    }

    /// See `Producer::peer_shares_cpu`.
    pub(crate) fn peer_shares_cpu(&mut self, same: bool) {
        let light = self.light_ok && !same;
        if light != self.light {
            self.switch_fences(light);
        }
    }

    /// Says in our header how we publish from now on, then does so. Either
    /// way at any moment: a peer that read the old flag at its park is
    /// covered by the old way (see below), one that reads the new flag by
    /// the new way.
    fn switch_fences(&mut self, light: bool) {
        // SYNC: this fence pairs with the fence in the peer's park. To
        // light: a peer parking later sees the flag and runs the barrier;
        // one that parked earlier (read the cleared flag) is seen by our
        // next publish, since our fence follows its fence. To full: a peer
        // that reads the cleared flag and skips the barrier sees every
        // light publish before it (the flag's Release/Acquire), and our
        // later publishes fence fully.
        self.own().set_light_fences(light);
        fence(Ordering::SeqCst);
        self.light = light;
    }

    /// A share of what keeps both control blocks mapped.
    #[cfg(not(loom))]
    pub(crate) fn keepalive(&self) -> Keepalive {
        self._keep.0.clone()
    }

    /// The peer's parked word we last asked to wake.
    #[cfg(not(loom))]
    pub(crate) fn woken(&self) -> u64 {
        self.woken
    }

    /// Whether we publish with light fences (see `use_light_fences`).
    #[cfg(not(loom))]
    pub(crate) fn light(&self) -> bool {
        self.light
    }

    /// Whether the peer says it publishes with light fences.
    pub(crate) fn peer_uses_light_fences(&self) -> bool {
        self.peer().light_fences()
    }

    /// An exact copy of this link, as `fork` leaves one in the child: for
    /// models and tests of two such copies (`local::fork_copy`).
    pub(crate) fn fork_copy(&self) -> Link {
        Link {
            own: self.own,
            peer: self.peer,
            _keep: KeepDebug(self._keep.0.clone()),
            epoch: self.epoch,
            woken: self.woken,
            light: self.light,
            light_ok: self.light_ok,
        }
    }
}

/// The second half of every publish, after the index store, for an end
/// and for a lent fast path alike (see [`crate::Hot`]): the publish fence,
/// then the peer's parked word. `COLD` takes the hardware fence out of line
/// (see `hard_fence`); a lent path that fences fully on most calls keeps
/// it inline.
#[inline(always)]
pub(crate) fn fence_and_look<const COLD: bool>(peer_parked: &AtomicU64, hard: bool) -> u64 {
    // SYNC: this fence pairs with the fence in `announce_park` on the
    // other side. Either the peer's re-check after its fence sees our new
    // index, or our load below sees its parked word; never neither (no
    // lost wake-up).
    if hard {
        if COLD {
            hard_fence();
        } else {
            fence(Ordering::SeqCst);
        }
    }
    // Otherwise (light fences) the peer's membarrier, issued in its park between
    // its parked store and its re-check, runs a full barrier on our CPU;
    // only the compiler must keep our store before our load.
    compiler_fence(Ordering::SeqCst);
    peer_parked.load(Ordering::Relaxed)
}

/// A publish's hardware fence, out of line: most publishes between two
/// CPUs use light fences (see `use_light_fences`), and with the fence
/// inline the light path took a jump over it on every item of a stream.
/// The fence inside orders our index store before the parked load, for
/// the compiler as for the CPU. `cold` only lays it out of the light
/// path's way: publishes with full fences (a peer on our CPU, a stale
/// copy's `publish_if_current`) pay a call beside the fence's own cost.
#[cold]
#[inline(never)]
fn hard_fence() {
    fence(Ordering::SeqCst);
}
