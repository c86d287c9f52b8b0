//! The two control blocks one end of a ring works with, and what keeps them
//! alive.

use std::any::Any;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::layout::Control;

/// Anything that owns the memory a ring lives in (a mapping, a heap block).
pub type Keepalive = Arc<dyn Any + Send + Sync>;

/// This side's control block (written only by us) and the peer's (read only).
#[derive(Debug)]
pub(crate) struct Link {
    own: NonNull<Control>,
    peer: NonNull<Control>,
    _keep: KeepDebug,
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
        Link {
            own,
            peer,
            _keep: KeepDebug(keep),
        }
    }

    #[inline]
    pub(crate) fn own(&self) -> &Control {
        // SAFETY: valid while `_keep` lives (contract of `new`); Control has
        // only atomics, so a shared reference is fine even while the peer
        // process writes its own fields.
        unsafe { self.own.as_ref() }
    }

    /// Announces (or withdraws) light fences in our header, then fences so
    /// that a peer parking from now on sees it (see `Producer::use_light_fences`).
    pub(crate) fn announce_light_fences(&self, on: bool) {
        self.own().set_light_fences(on);
        crate::sync::fence(crate::sync::Ordering::SeqCst);
    }

    /// Records the CPU this side runs on (a scheduling hint only).
    #[inline]
    pub(crate) fn set_cpu(&self, cpu: u32) {
        self.own().cpu.0.store(cpu, crate::sync::Ordering::Relaxed);
    }

    /// The CPU the peer said it ran on; any value is harmless.
    #[inline]
    pub(crate) fn peer_cpu(&self) -> u32 {
        self.peer().cpu.0.load(crate::sync::Ordering::Relaxed)
    }

    #[inline]
    pub(crate) fn peer(&self) -> &Control {
        // SAFETY: as for `own`.
        unsafe { self.peer.as_ref() }
    }
}
