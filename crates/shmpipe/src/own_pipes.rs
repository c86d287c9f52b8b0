//! The wake pipes this process sleeps on, by identity, so that a
//! handshake can refuse a peer that hands one of them back as its own.
//!
//! Such a peer (one that received our waker of an earlier connection, or
//! kept one) would have us hold a write end of our own pipe: that earlier
//! end would then never read EOF, blind to its peer's death. A peer's
//! pipe is refused if its identity is here. Each end registers its pipe
//! when it is built and unregisters it when dropped; a count, as two
//! copies of one end (`from_fds` in the same process) share a pipe.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::sys::PipeId;

static PIPES: Mutex<BTreeMap<PipeId, u32>> = Mutex::new(BTreeMap::new());

fn pipes() -> std::sync::MutexGuard<'static, BTreeMap<PipeId, u32>> {
    PIPES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Notes that an end of this process sleeps on `id`.
pub(crate) fn register(id: PipeId) {
    *pipes().entry(id).or_insert(0) += 1;
}

/// Undoes one [`register`].
pub(crate) fn unregister(id: PipeId) {
    let mut p = pipes();
    if let Some(n) = p.get_mut(&id) {
        *n -= 1;
        if *n == 0 {
            p.remove(&id);
        }
    }
}

/// Whether an end of this process sleeps on `id`.
pub(crate) fn contains(id: PipeId) -> bool {
    pipes().contains_key(&id)
}
