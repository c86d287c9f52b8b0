//! What one Zenoh message of a carried connection holds: a whole RPC
//! frame, a grant of window back to the sender, or the end of the
//! connection. Pure data, no Zenoh: both sides check what they receive
//! here before it reaches a local end.
//!
//! ```text
//! message: [ kind: u8 ][ body ]
//!   FRAME: an RPC frame as the local end wrote it, its header (see
//!          shmpipe_rpc::wire) and the first bytes of its body; the
//!          header's length is at most the bridge's max_frame
//!   MORE:  the next bytes of the body of the frame being sent, until
//!          the header's length is reached
//!   ACK:   u64 little-endian: window bytes the receiver has passed on
//!   END:   UTF-8: why the connection ended (empty: its end hung up)
//! ```

// Without the `zenoh` feature only `charge` and `PREFIX` (for the
// bounds) are used; the rest is the bridge's and its tests'.
#![cfg_attr(not(feature = "zenoh"), allow(dead_code))]

use shmpipe_rpc::wire;

/// A whole RPC frame.
pub(crate) const FRAME: u8 = 0;
/// Window given back.
pub(crate) const ACK: u8 = 1;
/// The connection's end, in order after its last frame.
pub(crate) const END: u8 = 2;
/// The rest of a frame's body, after its FRAME message.
pub(crate) const MORE: u8 = 3;

/// The most bytes one message carries, its kind byte included: a frame
/// goes in pieces of this size, so that a piece fits one batch of
/// Zenoh's link (64 KiB less its headers) and crosses as it is read,
/// with no fragmenting and defragmenting in Zenoh and no wait for the
/// whole frame.
pub(crate) const PIECE: usize = 60 << 10;

/// Bytes before an RPC frame's body in a FRAME message.
pub(crate) const PREFIX: usize = 1 + wire::HEADER;

/// Window bytes a message of `len` bytes takes: its length and a fixed
/// cost, so that a flood of empty frames is bounded as well as a few
/// large ones.
pub(crate) const fn charge(len: usize) -> usize {
    len + 64
}

/// The length of the RPC frame body a FRAME message's prefix announces,
/// if the prefix is one.
pub(crate) fn frame_len(prefix: &[u8; PREFIX], max_frame: u32) -> Result<usize, &'static str> {
    if prefix[0] != FRAME {
        return Err("not a frame");
    }
    let word = u64::from_le_bytes(prefix[1..].try_into().expect("8 bytes"));
    match wire::parse_header(word) {
        None => Err("a frame without the RPC tag"),
        Some((len, _)) if len > max_frame => Err("a frame over the bridge's max_frame"),
        Some((len, _)) => Ok(len as usize),
    }
}

/// An ACK message granting `bytes` back.
pub(crate) fn ack(bytes: u64) -> Vec<u8> {
    let mut m = Vec::with_capacity(9);
    m.push(ACK);
    m.extend_from_slice(&bytes.to_le_bytes());
    m
}

/// An END message saying why.
pub(crate) fn end(why: &str) -> Vec<u8> {
    let mut m = Vec::with_capacity(1 + why.len());
    m.push(END);
    m.extend_from_slice(why.as_bytes());
    m
}

/// The RPC `BUSY` reply a local client gets in place of the hello's when
/// the bridge cannot carry its connection (its `connect` returns
/// `ConnectionRefused` with this text).
pub(crate) fn busy(why: &str) -> Vec<u8> {
    let text = format!("shmpipe bridge: {why}");
    let mut f = Vec::with_capacity(wire::HEADER + text.len());
    f.extend_from_slice(&wire::header(text.len() as u32, wire::BUSY));
    f.extend_from_slice(text.as_bytes());
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(kind: u8, word: u64) -> [u8; PREFIX] {
        let mut p = [0u8; PREFIX];
        p[0] = kind;
        p[1..].copy_from_slice(&word.to_le_bytes());
        p
    }

    #[test]
    fn a_frame_prefix_is_checked() {
        let ok = prefix(FRAME, wire::header_word(10, wire::OK));
        assert_eq!(frame_len(&ok, 10), Ok(10));
        assert!(frame_len(&ok, 9).is_err(), "over max_frame");
        assert!(frame_len(&prefix(FRAME, 10), 100).is_err(), "no tag");
        assert!(frame_len(&prefix(ACK, wire::header_word(1, 0)), 100).is_err());
    }

    #[test]
    fn busy_is_an_rpc_frame() {
        let f = busy("full");
        let word = u64::from_le_bytes(f[..8].try_into().unwrap());
        let (len, code) = wire::parse_header(word).unwrap();
        assert_eq!(code, wire::BUSY);
        assert_eq!(len as usize, f.len() - 8);
    }
}
