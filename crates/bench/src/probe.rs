//! Fixed-count loops for counting instructions per message under
//! valgrind's callgrind (see `scripts/callgrind-instructions.sh`).
//!
//! Both ends live in one thread, so nothing ever waits or spins: the count
//! is the instructions of the data path alone. The script runs two counts
//! and takes the difference, which cancels the set-up.

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
}

impl Probe {
    /// Looks a probe up by its test name.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "stream-8B" => Some(Probe::Stream8),
            "stream-8B-c" => Some(Probe::Stream8C),
            "roundtrip-8B" => Some(Probe::RoundTrip8),
            "rpc-stub" => Some(Probe::RpcStub),
            _ => None,
        }
    }
}

/// Runs `probe` through shmpipe `n` times, checking every item.
pub fn run(probe: Probe, n: u64) -> io::Result<()> {
    let check = |got: [u8; 8], want: u64| {
        if u64::from_le_bytes(got) == want {
            Ok(())
        } else {
            Err(crate::check::check_failed(format!("item {want}")))
        }
    };
    let mut item = [0u8; 8];
    match probe {
        Probe::RpcStub => crate::rpc_null::probe(n)?,
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
        Probe::RoundTrip8 => {
            let (mut r1, mut w1) = shmpipe::pipe()?;
            let (mut r2, mut w2) = shmpipe::pipe()?;
            for i in 0..n {
                w1.write_all(&i.to_le_bytes())?;
                r1.read_exact(&mut item)?;
                w2.write_all(&item)?;
                r2.read_exact(&mut item)?;
                check(item, i)?;
            }
        }
    }
    Ok(())
}
