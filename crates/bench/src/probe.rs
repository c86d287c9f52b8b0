//! Fixed-count loops for counting instructions per message under
//! valgrind's callgrind (see `scripts/callgrind-instructions.sh`).
//!
//! Both ends live in one thread, so nothing ever waits or spins: the count
//! is the instructions of the data path alone. The script runs two counts
//! and takes the difference, which cancels the set-up. `roundtrip-8B-2p`
//! is the exception: a round trip between two processes, whose waits do
//! wait, for the per-stage counts of docs/roundtrip.md.

use std::io::{self, Read, Write};

/// Instruction probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// `stream-8B`: `n` 8-byte writes, then `n` 8-byte reads.
    Stream8,
    /// `stream-8B` through the C API (the mechanism `shmpipe-c`).
    Stream8C,
    /// `roundtrip-8B`: `n` times: write, read, write back, read back.
    RoundTrip8,
    /// `rpc-stub`: `n` calls of a generated stub, `add(a, b)`, served by a
    /// thread (see [`crate::rpc_null::probe`]).
    RpcStub,
    /// `roundtrip-8B-2p`: `n` round trips of `roundtrip-8B` between this
    /// process and a forked echo, so every read waits for its data (a
    /// spin, or a sleep). Run under callgrind, which follows the fork
    /// (`--callgrind-out-file=cg.%p`), it counts each side's stages:
    /// first look, spin, sleep, reply (docs/roundtrip.md). Not a count of
    /// `shmpipe instructions`: how long a wait spins depends on timing.
    RoundTrip8TwoProcesses,
    /// `roundtrip-8B-stages`: `n` cross-core round trips between two
    /// processes, timed stage by stage with the time-stamp counter, for
    /// shmpipe and the links it is compared with (see [`crate::stages`]);
    /// prints three interleaved runs. Not for callgrind.
    RoundTrip8Stages,
    /// `line-permission`: `n` round trips of one line each way between two
    /// processes, read through writable and through read-only mappings
    /// (see [`crate::permission`]); prints the medians of nine
    /// interleaved runs. Not for callgrind.
    LinePermission,
}

impl Probe {
    /// Looks a probe up by its test name.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "stream-8B" => Some(Probe::Stream8),
            "stream-8B-c" => Some(Probe::Stream8C),
            "roundtrip-8B" => Some(Probe::RoundTrip8),
            "rpc-stub" => Some(Probe::RpcStub),
            "roundtrip-8B-2p" => Some(Probe::RoundTrip8TwoProcesses),
            "roundtrip-8B-stages" => Some(Probe::RoundTrip8Stages),
            "line-permission" => Some(Probe::LinePermission),
            _ => None,
        }
    }
}

/// Whether an 8-byte item read back is the `want`-th sent. Inlined, as
/// the closure it was: it runs inside the counted loops.
#[inline(always)]
fn check(got: [u8; 8], want: u64) -> io::Result<()> {
    if u64::from_le_bytes(got) == want {
        Ok(())
    } else {
        Err(crate::check::check_failed(format!("item {want}")))
    }
}

/// `roundtrip-8B`'s loop: `n` times write, read, write back, read back,
/// checking every item. Out of line, so that its code (and count) does
/// not change with how much of the pipes' set-up the compiler inlines
/// into the caller (it did: two more instructions a round trip, from
/// the register allocation, after a change to set-up alone).
#[inline(never)]
fn round_trips(
    n: u64,
    (mut r1, mut w1): (shmpipe::Reader, shmpipe::Writer),
    (mut r2, mut w2): (shmpipe::Reader, shmpipe::Writer),
) -> io::Result<()> {
    let mut item = [0u8; 8];
    for i in 0..n {
        w1.write_all(&i.to_le_bytes())?;
        r1.read_exact(&mut item)?;
        w2.write_all(&item)?;
        r2.read_exact(&mut item)?;
        check(item, i)?;
    }
    Ok(())
}

/// Runs `probe` through shmpipe `n` times, checking every item.
pub fn run(probe: Probe, n: u64) -> io::Result<()> {
    let mut item = [0u8; 8];
    match probe {
        Probe::RpcStub => crate::rpc_null::probe(n)?,
        Probe::RoundTrip8Stages => crate::stages::print(n, 3)?,
        Probe::LinePermission => crate::permission::print(n, 9)?,
        Probe::Stream8 => {
            let cap = (n as usize * 8).next_power_of_two().max(4096);
            let (mut r, mut w) = shmpipe::Options::new().capacity(cap).pipe()?;
            for i in 0..n {
                w.write_all(&i.to_le_bytes())?;
            }
            for i in 0..n {
                r.read_exact(&mut item)?;
                check(item, i)?;
            }
        }
        Probe::Stream8C => {
            use crate::links::{Rx, Tx};
            let cap = (n as usize * 8).next_power_of_two().max(4096);
            let (mut tx, mut rx) = crate::capi::pair(cap)?;
            // The loops in C, as the mechanism runs them.
            if n > 0 {
                tx.send_counters(0, n - 1)?;
                rx.recv_counters(0, n - 1)?;
            }
        }
        Probe::RoundTrip8 => round_trips(n, shmpipe::pipe()?, shmpipe::pipe()?)?,
        Probe::RoundTrip8TwoProcesses => {
            let (r1, w1) = shmpipe::pipe()?;
            let (r2, w2) = shmpipe::pipe()?;
            // Cross-core, as the bench's roundtrip-8B: a CPU each.
            let two = crate::sys::online_cpus() >= 2;
            // Our halves closed in the echo: held by two processes, they
            // would take turns, which is not the path measured.
            let (mut echo, (mut w1, mut r2)) = crate::sys::spawn_apart((w1, r2), move || {
                let (mut r1, mut w2) = (r1, w2);
                crate::sys::pin(two.then_some(1))?;
                let mut item = [0u8; 8];
                for _ in 0..n {
                    r1.read_exact(&mut item)?;
                    w2.write_all(&item)?;
                }
                Ok(())
            })?;
            crate::sys::pin(two.then_some(0))?;
            for i in 0..n {
                w1.write_all(&i.to_le_bytes())?;
                r2.read_exact(&mut item)?;
                check(item, i)?;
            }
            // A watchdog: a child that hangs is killed (valgrind is slow).
            echo.wait(std::time::Instant::now() + std::time::Duration::from_secs(600))?;
            crate::sys::pin(None)?;
        }
    }
    Ok(())
}
