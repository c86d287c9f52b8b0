//! Waiting for the peer, and waking it: an [`End`] (the ring end every
//! pipe type holds, with its kernel [`Side`]) publishes, wakes a sleeping
//! peer, and waits (a pause and a look, a spin, then a sleep in the
//! kernel behind the ring's park handshake) until the ring is ready, the
//! peer is gone, or a timeout passes.
//!
//! It sits between the pipe types above (`stream`, `message`, `lend`,
//! `waitset`, `tokio`) and the ring protocol below (`shmpipe_ring`); it
//! asks `pace` how long to pause, spin and yield, and `sys` to sleep and
//! wake (each end sleeps on a `sys::Bell`, which the kernel also wakes
//! when the peer's process dies). Design notes: docs/wait.md.
//!
//! The files: [`end`] (publish, wake, a stream's one-step operations, the
//! waitset's hooks), [`side`] (the kernel side, its settings and arming),
//! [`block`] (the blocking wait, step by step), [`ring`] (what a wait
//! needs of either ring end), [`turns`] (what this thread did last).
//! Test fault injection (a failed `membarrier`) is `sys::fault`'s.

mod block;
mod end;
mod ring;
mod side;
mod turns;

pub(crate) use block::BRIEF_SLEEP;
pub(crate) use end::End;
pub(crate) use ring::Ring;
pub(crate) use side::{check_timeout, Ready, Settings, Side};
pub use turns::mirror_sent;
