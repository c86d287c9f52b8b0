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
//!
//! The files: [`end`] (the end: publish, wake, the stream's one-step
//! operations), [`side`] (its kernel side and arming), [`block`] (the
//! blocking wait), [`ring`] (the ring operations a wait needs), [`turns`]
//! (what this thread did last), [`fault`] (test fault injection). The pacing they use (how long to pause,
//! spin, yield) is `pace`; the system calls are `sys`.

mod block;
mod end;
mod fault;
mod ring;
mod side;
mod turns;

pub(crate) use block::BRIEF_SLEEP;
pub(crate) use end::End;
#[cfg(test)]
pub(crate) use fault::BARRIER_FAILS;
pub(crate) use side::{check_timeout, Ready, Settings, Side};
pub use turns::mirror_sent;
