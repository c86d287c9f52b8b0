//! Message framing: an 8-byte header, then the payload, padded to 8 bytes.
//!
//! ```text
//! [ len: u32 LE | !len: u32 LE ][ payload: len bytes ][ pad to 8 ]
//! ```
//!
//! The inverted copy of the length catches a reader and writer that
//! disagree on framing, and most garbage, before the length is used.

use crate::ProtocolError;

/// Bytes in a message header; frames start on multiples of it.
pub const HEADER: usize = 8;

/// Bytes a message of `payload_len` bytes takes in the ring.
pub const fn frame_len(payload_len: usize) -> usize {
    HEADER + payload_len.div_ceil(HEADER) * HEADER
}

/// The largest payload a ring of `capacity` bytes carries: what fits
/// after one header, and no more than the header's 32-bit length can say
/// (`u32::MAX`, on rings of 8 GiB and more).
///
/// ```
/// use shmpipe_ring::frame::max_payload;
/// assert_eq!(max_payload(4096), 4088);
/// assert_eq!(max_payload(1 << 33), u32::MAX as usize);
/// ```
pub const fn max_payload(capacity: usize) -> usize {
    let fits = capacity - HEADER;
    if fits > MAX_LEN {
        MAX_LEN
    } else {
        fits
    }
}

/// The largest length a header can hold.
pub const MAX_LEN: usize = u32::MAX as usize;

/// Encodes the header of a `len`-byte message.
///
/// # Panics
///
/// If `len` does not fit in 32 bits.
pub fn encode_header(len: usize) -> [u8; HEADER] {
    let len = u32::try_from(len).expect("message length over 4 GiB");
    let mut h = [0u8; HEADER];
    h[..4].copy_from_slice(&len.to_le_bytes());
    h[4..].copy_from_slice(&(!len).to_le_bytes());
    h
}

/// Decodes and checks a header read from a ring of `capacity` bytes.
pub fn decode_header(h: [u8; HEADER], capacity: u64) -> Result<usize, ProtocolError> {
    let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
    let check = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
    if check != !len || u64::from(len) > capacity - HEADER as u64 {
        return Err(ProtocolError::BadMessage {
            len: u64::from(len),
        });
    }
    Ok(len as usize)
}
