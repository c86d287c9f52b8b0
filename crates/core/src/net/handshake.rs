//! The connection handshake's wire format: what a
//! [`Listener`](crate::Listener) and [`connect`](crate::connect) say to
//! each other over the Unix socket before the data path starts. This is
//! the one cross-process format besides the ring's
//! ([`shmpipe_ring::layout`]), which it names by version. This module
//! specifies it and encodes and decodes a message ([`Hello`]); the steps
//! each side takes, and its checks on what the peer sends, are
//! `exchange`'s.
//!
//! ```text
//! client (connect)                            server (Listener::accept)
//!   connect(path) ───────────────────────────▶ accept, SO_PEERCRED, policy
//!                 ◀─── 1. verdict hello: OK or REFUSED, no descriptors
//!   (REFUSED: PermissionDenied)
//!   our ring <= its max, its ring <= our max?
//!   no: ─── TOO_LARGE hello ─────────────────▶ (error, dropped)
//!   2. client hello: OK + 3 descriptors ─────▶ checks them and both limits
//!                 ◀─── TOO_LARGE hello, or
//!                 ◀─── 3. server hello: OK + 3 descriptors
//!   checks them; connected                     connected
//! ```
//!
//! A client made by [`Options::connect_later`](crate::Options::connect_later)
//! sends message 2 before it reads message 1, so that it need not wait
//! for the accept (its limit checks then happen on the server's side
//! first); the server reads and answers in the same order either way.
//!
//! Every message is one [`Hello`] of [`HELLO_LEN`] bytes, little-endian:
//!
//! ```text
//! offset size field
//!      0    8 magic        MAGIC (b"SHMPIPEH")
//!      8    4 version      VERSION of this handshake
//!     12    4 layout       shmpipe_ring::layout::VERSION (the ring format)
//!     16    1 status       STATUS_OK, STATUS_REFUSED or STATUS_TOO_LARGE
//!     17    7 zero
//!     24    8 capacity     the sender's ring (the pipe it writes), bytes
//!     32    8 max_capacity the largest ring the sender maps from the receiver
//! ```
//!
//! Messages 2 and 3 carry three descriptors (`SCM_RIGHTS`), in this order:
//! the sender's writer region (control block and data of the pipe it
//! writes), its reader region (the head of the pipe it reads), and one end
//! of a socketpair whose other end it keeps as the wake/liveness channel of
//! the pipe it writes. Each side seals its regions so that only its own
//! mapping can write them; the other maps them read-only.
//!
//! Why sockets here, while [`pipe`](crate::pipe)'s ends wake each other
//! through pipes: the peer may be a stranger, and whoever holds an end of
//! a pipe can pin the pipe's lock (a `splice` from an empty socket into it
//! blocks while holding it), so that each read, write or open of ours
//! waits, unkillable, for as long as the peer likes. No lock that a `send`
//! or `recv` of ours takes can be held by the peer. A version-2 hello
//! (one development snapshot sent the write ends of two wake pipes
//! instead) is refused with `InvalidData` naming both versions, as is a
//! hello whose third descriptor is a pipe.
//!
//! The limits: a side never maps a peer's ring larger than its own
//! [`Options::max_peer_capacity`](crate::Options::max_peer_capacity), so a
//! peer cannot spend our address space. Both sides announce their limit
//! before any region is made, so an honest pair fails early with a clear
//! error on both sides (a `STATUS_TOO_LARGE` hello tells the other why);
//! a dishonest peer is caught by the same check on the region itself.

use std::io;
use std::time::Duration;

use shmpipe_ring::layout;

use crate::error;

/// First word of every hello: `b"SHMPIPEH"` read as little-endian.
pub const MAGIC: u64 = u64::from_le_bytes(*b"SHMPIPEH");
/// Version of this handshake; bumped on any change to this file's format.
pub const VERSION: u32 = 1;
/// Bytes in every hello.
pub const HELLO_LEN: usize = 40;
/// Descriptors in a hello that carries them (messages 2 and 3).
pub const FDS: usize = 3;

/// Status: go on (verdict), or here are my descriptors.
pub const STATUS_OK: u8 = b'Y';
/// Status: the listener's policy refuses this peer (verdict only).
pub const STATUS_REFUSED: u8 = b'N';
/// Status: a ring exceeds the receiving or the sending side's limit; the
/// handshake ends. Carries no descriptors.
pub const STATUS_TOO_LARGE: u8 = b'L';

/// Byte offsets of a hello's fields (see the module's diagram).
pub mod offset {
    /// `magic`: u64.
    pub const MAGIC: usize = 0;
    /// `version`: u32.
    pub const VERSION: usize = 8;
    /// `layout`: u32.
    pub const LAYOUT: usize = 12;
    /// `status`: u8.
    pub const STATUS: usize = 16;
    /// `capacity`: u64.
    pub const CAPACITY: usize = 24;
    /// `max_capacity`: u64.
    pub const MAX_CAPACITY: usize = 32;
}

const _: () = {
    assert!(offset::MAX_CAPACITY + 8 == HELLO_LEN);
    assert!(offset::STATUS < offset::CAPACITY);
};

/// How long a handshake may take before the other side is given up on.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// One handshake message, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// [`STATUS_OK`], [`STATUS_REFUSED`] or [`STATUS_TOO_LARGE`].
    pub status: u8,
    /// The capacity of the ring the sender writes, in bytes.
    pub capacity: u64,
    /// The largest ring the sender maps from the receiver, in bytes.
    pub max_capacity: u64,
}

impl Hello {
    /// The message's bytes.
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut h = [0u8; HELLO_LEN];
        put(&mut h, offset::MAGIC, &MAGIC.to_le_bytes());
        put(&mut h, offset::VERSION, &VERSION.to_le_bytes());
        put(&mut h, offset::LAYOUT, &layout::VERSION.to_le_bytes());
        h[offset::STATUS] = self.status;
        put(&mut h, offset::CAPACITY, &self.capacity.to_le_bytes());
        put(
            &mut h,
            offset::MAX_CAPACITY,
            &self.max_capacity.to_le_bytes(),
        );
        h
    }

    /// Checks and decodes a message: `InvalidData` unless it is exactly
    /// [`HELLO_LEN`] bytes of this handshake and ring version with a known
    /// status and zero padding.
    pub fn decode(bytes: &[u8]) -> io::Result<Hello> {
        let not_ours = || error::invalid_data("peer does not speak the shmpipe handshake");
        let h: &[u8; HELLO_LEN] = bytes.try_into().map_err(|_| not_ours())?;
        if u64_at(h, offset::MAGIC) != MAGIC {
            return Err(not_ours());
        }
        let (version, ring) = (u32_at(h, offset::VERSION), u32_at(h, offset::LAYOUT));
        if version != VERSION || ring != layout::VERSION {
            return Err(error::invalid_data(format!(
                "peer speaks shmpipe handshake version {version} with ring layout {ring}; \
                 this side speaks version {VERSION} with ring layout {}",
                layout::VERSION
            )));
        }
        let status = h[offset::STATUS];
        if ![STATUS_OK, STATUS_REFUSED, STATUS_TOO_LARGE].contains(&status)
            || h[offset::STATUS + 1..offset::CAPACITY]
                .iter()
                .any(|&b| b != 0)
        {
            return Err(error::invalid_data("malformed handshake message"));
        }
        Ok(Hello {
            status,
            capacity: u64_at(h, offset::CAPACITY),
            max_capacity: u64_at(h, offset::MAX_CAPACITY),
        })
    }
}

fn put(h: &mut [u8; HELLO_LEN], at: usize, bytes: &[u8]) {
    h[at..at + bytes.len()].copy_from_slice(bytes);
}

fn u64_at(h: &[u8; HELLO_LEN], at: usize) -> u64 {
    u64::from_le_bytes(h[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(h: &[u8; HELLO_LEN], at: usize) -> u32 {
    u32::from_le_bytes(h[at..at + 4].try_into().expect("4 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hello_decodes_to_what_was_encoded() {
        let hello = Hello {
            status: STATUS_OK,
            capacity: 1 << 16,
            max_capacity: 1 << 26,
        };
        assert_eq!(Hello::decode(&hello.encode()).unwrap(), hello);
    }

    #[test]
    fn anything_else_is_invalid_data() {
        let good = Hello {
            status: STATUS_TOO_LARGE,
            capacity: 8,
            max_capacity: 8,
        }
        .encode();
        let mut bad = vec![[0u8; HELLO_LEN].to_vec(), good[..HELLO_LEN - 1].to_vec()];
        for at in [
            offset::MAGIC,
            offset::VERSION,
            offset::LAYOUT,
            offset::STATUS + 1,
        ] {
            let mut h = good;
            h[at] ^= 1;
            bad.push(h.to_vec());
        }
        let mut h = good;
        h[offset::STATUS] = b'?';
        bad.push(h.to_vec());
        for b in bad {
            let e = Hello::decode(&b).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        }
    }
}
