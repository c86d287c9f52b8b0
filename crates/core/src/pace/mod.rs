//! Waiting measured in time, not in instructions: the pause before a
//! look at the peer's index ([`look`]), how long to spin before sleeping
//! ([`spin`]), and which CPU a thread runs on and when it may yield it
//! ([`cpu`]). The durations are what the waiting code means; the
//! spin-loop hint counts that last that long are derived at run time,
//! since a hint costs several times more on one CPU than on another.
//!
//! Used by an end's waits (`wait`) and by `WaitSet`; uses only `sys`.
//! Design and measurements: docs/pace.md.

pub(crate) mod cpu;
pub(crate) mod look;
pub(crate) mod spin;

pub(crate) use cpu::{measure_yield_once, yield_cpu, SLICE_GIVEN};
pub(crate) use look::{LookDelay, CLOCK_EVERY};
pub(crate) use spin::{note_sleep, pure_spin, SpinClock};
pub use spin::{Spin, DEFAULT_SPIN};
