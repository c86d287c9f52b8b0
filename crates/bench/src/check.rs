//! The consistency checks: every item, message and stream a test moves
//! carries stamps that the receiving side checks. A failed check is an
//! [`io::ErrorKind::InvalidData`] error, which aborts the bench.

use std::io;

/// Words are stamped every `stride` bytes: one per 4 KiB page at most, so
/// that checking costs little next to the copy, but every message is
/// checked.
pub(crate) fn stride(size: usize) -> usize {
    size.clamp(8, 4096) & !7
}

/// Stamps `seq` into every checked word of a round-trip message.
pub(crate) fn stamp_message(buf: &mut [u8], seq: u64) {
    let s = stride(buf.len());
    let mut k = 0;
    while k + 8 <= buf.len() {
        buf[k..k + 8].copy_from_slice(&(seq ^ (k as u64) << 32).to_le_bytes());
        k += s;
    }
}

/// Checks the words [`stamp_message`] stamped.
pub(crate) fn check_message(buf: &[u8], seq: u64) -> io::Result<()> {
    let s = stride(buf.len());
    let mut k = 0;
    while k + 8 <= buf.len() {
        let got = u64::from_le_bytes(buf[k..k + 8].try_into().expect("8 bytes"));
        let want = seq ^ (k as u64) << 32;
        if got != want {
            return Err(check_failed(format!(
                "message {seq}: word at {k} is {got:#x}, expected {want:#x}"
            )));
        }
        k += s;
    }
    Ok(())
}

/// The error a failed consistency check gives; it aborts the bench.
pub fn check_failed(what: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("consistency check failed: {what}"),
    )
}

/// In a bandwidth stream the word at stream offset `o` (a multiple of the
/// stride) holds `o / 8 + 1`.
pub(crate) fn stamp_chunk(buf: &mut [u8], offset: u64) {
    let s = stride(buf.len());
    let mut k = 0;
    while k + 8 <= buf.len() {
        buf[k..k + 8].copy_from_slice(&((offset + k as u64) / 8 + 1).to_le_bytes());
        k += s;
    }
}

/// Checks the stamped words that lie wholly in `buf`, which holds the
/// stream's bytes from `offset` on. Returns how many words it checked.
pub(crate) fn check_chunk(buf: &[u8], offset: u64, stride: u64) -> io::Result<u64> {
    let end = offset + buf.len() as u64;
    let mut o = offset.next_multiple_of(stride);
    let mut checked = 0;
    while o + 8 <= end {
        let k = (o - offset) as usize;
        let got = u64::from_le_bytes(buf[k..k + 8].try_into().expect("8 bytes"));
        if got != o / 8 + 1 {
            return Err(check_failed(format!(
                "stream offset {o}: {got:#x}, expected {:#x}",
                o / 8 + 1
            )));
        }
        checked += 1;
        o += stride;
    }
    Ok(checked)
}

/// Checks that a stream item carries its sequence number: a compare in
/// the loop, the error built out of line.
#[inline(always)]
pub(crate) fn check_item(item: [u8; 8], i: u64) -> io::Result<()> {
    let got = u64::from_le_bytes(item);
    if got == i {
        Ok(())
    } else {
        Err(item_failed(i, got))
    }
}

/// The error of [`check_item`], built out of line.
#[cold]
#[inline(never)]
pub(crate) fn item_failed(i: u64, got: u64) -> io::Error {
    check_failed(format!("item {i} arrived as {got}"))
}
