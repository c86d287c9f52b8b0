//! What a misbehaving peer can do wrong, as seen by the ring.

use std::fmt;

/// A violation of the ring protocol by the other side (or by whatever wrote
/// into the shared memory). The ring never trusts the peer: every index and
/// length it reads is checked, and a bad one is reported here instead of
/// being used. The `shmpipe` crate maps this to `io::ErrorKind::InvalidData`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The control block does not start with [`MAGIC`](crate::layout::MAGIC).
    BadMagic(u64),
    /// The control block has a layout version this build does not speak.
    BadVersion(u32),
    /// The control block belongs to the other end (reader for writer, say).
    BadRole(u32),
    /// The capacity is not a power of two in the supported range, or the
    /// two ends disagree on it.
    BadCapacity(u64),
    /// The peer's index moved backwards or further than the ring allows.
    IndexOutOfRange {
        /// Which index: `"head"` or `"tail"`.
        which: &'static str,
        /// The value read from shared memory.
        value: u64,
    },
    /// A message header is corrupt or announces more than was published.
    BadMessage {
        /// The length the header announced.
        len: u64,
    },
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadMagic(m) => write!(f, "shmpipe: bad magic {m:#018x} in control block"),
            Self::BadVersion(v) => write!(f, "shmpipe: unsupported layout version {v}"),
            Self::BadRole(r) => write!(f, "shmpipe: control block has wrong role {r}"),
            Self::BadCapacity(c) => write!(f, "shmpipe: bad ring capacity {c}"),
            Self::IndexOutOfRange { which, value } => {
                write!(f, "shmpipe: peer's {which} index {value} is out of range")
            }
            Self::BadMessage { len } => {
                write!(f, "shmpipe: corrupt message header (length {len})")
            }
        }
    }
}

impl std::error::Error for ProtocolError {}
