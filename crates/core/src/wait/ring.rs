//! The ring operations a wait needs ([`Ring`]), for either end of the
//! ring crate's protocol, and what its park handshake found ([`Parked`]).

use std::io;

use shmpipe_ring::{Consumer, Producer};

use crate::error;
use crate::sys;
use crate::sys::fault;

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

impl Parked {
    fn new(ready: bool, barrier_ok: bool) -> Parked {
        let barrier_ok = barrier_ok && !fault::barrier_fails();
        match (ready, barrier_ok) {
            (true, _) => Parked::Ready,
            (false, true) => Parked::Sleep,
            (false, false) => Parked::SleepBriefly,
        }
    }
}

/// The ring operations waiting needs, for either end (and, through
/// `Shared`, what a turn needs).
pub(crate) trait Ring: crate::shared::Shared {
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
    /// A writer's fence before it asks the kernel whether the reader left
    /// (see the ring's `Producer::peer_left_fence`); nothing for a reader.
    fn peer_left_fence(&self) {}
    /// A writer's reader is gone: no room from now on (see the ring's
    /// `Producer::shut`); nothing for a reader.
    fn shut(&mut self) {}
    /// Whether the peer took everything we published (see the ring's
    /// `Producer::consumed_all`); true for a reader.
    fn consumed_all(&mut self) -> bool {
        true
    }
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
pub(super) fn exchange_cpu(ring: &mut impl Ring, cpu: u32) -> bool {
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
    fn peer_left_fence(&self) {
        Producer::peer_left_fence(self)
    }
    fn shut(&mut self) {
        Producer::shut(self)
    }
    fn consumed_all(&mut self) -> bool {
        Producer::consumed_all(self)
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
