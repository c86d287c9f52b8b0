//! How one Python message of any size crosses a shmpipe message pipe.
//!
//! A ring carries messages of at most its capacity less 8 bytes, but
//! `multiprocessing.Connection` carries any size. So a message shorter than
//! the ring's *threshold* `T` (a quarter of the capacity) is one ring
//! message, unchanged; a longer one is split into fragments:
//!
//! ```text
//! short (len < T):  [ payload ]                               one ring message
//! long (len >= T):  [ first T-8 bytes | total: u64 LE ]       exactly T bytes
//!                   [ next min(T, rest) bytes ] ...           until total sent
//! ```
//!
//! A ring message of exactly `T` bytes always starts a long message, and
//! no ring message is longer, so short messages pay nothing for this. The
//! total comes last so the payload part copies out in one piece.
//! Fragments of a quarter ring keep several in flight, so the receiver
//! copies one out while the sender copies the next in. Both sides derive
//! `T` from the ring's capacity, which they share. Format version 1.

use std::io;

/// The smallest ring capacity this format works with (the first fragment
/// must hold the 8-byte total).
pub(crate) const MIN_CAPACITY: usize = 64;

/// Bytes of the total length at the end of a first fragment.
pub(crate) const TOTAL: usize = 8;

/// The threshold `T` for a ring of `capacity` bytes.
pub(crate) fn threshold(capacity: usize) -> usize {
    capacity / 4
}

/// Checks a ring's capacity.
pub(crate) fn check_capacity(capacity: usize) -> io::Result<()> {
    if capacity < MIN_CAPACITY {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("shmpipe: a ring of {capacity} bytes is below the minimum of {MIN_CAPACITY}"),
        ));
    }
    Ok(())
}

/// What the first ring message of a Python message says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Head {
    /// A whole message of this many bytes.
    Short(usize),
    /// The first fragment of a long message.
    Long,
}

/// Classifies a ring message of `len` bytes.
pub(crate) fn classify(len: usize, capacity: usize) -> io::Result<Head> {
    let t = threshold(capacity);
    match len {
        n if n < t => Ok(Head::Short(n)),
        n if n == t => Ok(Head::Long),
        n => Err(bad(format!(
            "ring message of {n} bytes over the threshold {t}"
        ))),
    }
}

/// Checks the total a first fragment declares.
pub(crate) fn check_total(total: u64, capacity: usize) -> io::Result<usize> {
    let t = threshold(capacity) as u64;
    if total < t || total > isize::MAX as u64 {
        return Err(bad(format!("long message declares {total} bytes")));
    }
    Ok(total as usize)
}

/// The length of the fragment that carries the next `rest` bytes.
pub(crate) fn fragment(rest: usize, capacity: usize) -> usize {
    rest.min(threshold(capacity))
}

/// A protocol violation by the peer.
pub(crate) fn bad(msg: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("shmpipe framing: {msg}"),
    )
}
