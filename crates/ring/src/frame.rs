//! Message framing: an 8-byte header, then the payload, padded to 8 bytes.
//!
//! ```text
//! [ len: u32 LE | !len: u32 LE ][ payload: len bytes ][ pad to 8 ]
//! ```
//!
//! The inverted copy of the length catches a reader and writer that
//! disagree on framing, and most garbage, before the length is used.
//!
//! # Examples
//!
//! ```
//! use shmpipe_ring::frame::{decode_header, encode_header, frame_len};
//!
//! let header = encode_header(13);
//! assert_eq!(decode_header(header, 64), Ok(13));
//! assert_eq!(frame_len(13), 24); // 8 of header, 13 of payload, 3 of pad
//! ```

use crate::ProtocolError;

/// Bytes in a message header; frames start on multiples of it.
///
/// # Examples
///
/// ```
/// use shmpipe_ring::frame::{encode_header, HEADER};
/// assert_eq!(encode_header(5).len(), HEADER);
/// ```
pub const HEADER: usize = 8;

/// Bytes a message of `payload_len` bytes takes in the ring.
///
/// # Examples
///
/// ```
/// use shmpipe_ring::frame::frame_len;
/// assert_eq!(frame_len(0), 8);
/// assert_eq!(frame_len(1), 16); // header, payload padded to 8
/// assert_eq!(frame_len(8), 16);
/// ```
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
///
/// # Examples
///
/// ```
/// use shmpipe_ring::frame::{max_payload, MAX_LEN};
/// assert_eq!(MAX_LEN, u32::MAX as usize);
/// assert_eq!(max_payload(1 << 40), MAX_LEN);
/// ```
pub const MAX_LEN: usize = u32::MAX as usize;

/// Encodes the header of a `len`-byte message.
///
/// # Panics
///
/// If `len` does not fit in 32 bits.
///
/// # Examples
///
/// ```
/// use shmpipe_ring::frame::encode_header;
/// let h = encode_header(5);
/// assert_eq!(h, [5, 0, 0, 0, !5, 0xff, 0xff, 0xff]);
/// ```
pub fn encode_header(len: usize) -> [u8; HEADER] {
    let len = u32::try_from(len).expect("message length over 4 GiB");
    let mut h = [0u8; HEADER];
    h[..4].copy_from_slice(&len.to_le_bytes());
    h[4..].copy_from_slice(&(!len).to_le_bytes());
    h
}

/// Decodes and checks a header read from a ring of `capacity` bytes.
///
/// # Examples
///
/// ```
/// use shmpipe_ring::frame::{decode_header, encode_header};
/// use shmpipe_ring::ProtocolError;
///
/// assert_eq!(decode_header(encode_header(5), 64), Ok(5));
/// // Longer than a ring of 64 bytes can hold after the header.
/// assert_eq!(
///     decode_header(encode_header(57), 64),
///     Err(ProtocolError::BadMessage { len: 57 })
/// );
/// // The inverted copy does not match.
/// assert!(decode_header([5, 0, 0, 0, 0, 0, 0, 0], 64).is_err());
/// ```
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
