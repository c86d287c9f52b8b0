//! Access to the ring's data bytes: the one place that touches slots.
//!
//! Positions are free-running `u64` counters; a position's slot is
//! `pos & (capacity - 1)`. Every access is masked, so no value of a position
//! (including one a hostile peer chose) can reach outside the buffer. A range
//! that crosses the end of the buffer is split in two.
//!
//! Under `cfg(loom)` the bytes are loom `UnsafeCell`s, whose every access
//! loom checks against the others: a read not ordered after the write it
//! reads, or a write not ordered after an earlier read of the same slot (a
//! missing Release/Acquire on either index), fails the model.
//!
//! # Examples
//!
//! ```
//! // A range across the end of the buffer wraps to its start: 6 bytes
//! // pushed at position 4 of an 8-byte ring land in slots 4..8 and 0..2.
//! let (mut tx, mut rx) = shmpipe_ring::local::channel(8).unwrap();
//! tx.push(b"....");
//! let _ = tx.publish();
//! rx.available(1).unwrap();
//! rx.consume(4);
//! let _ = rx.publish();
//! tx.free(6).unwrap();
//! let (a, b) = tx.slices_mut(0, 6);
//! assert_eq!((a.len(), b.len()), (4, 2));
//! ```

#[cfg(not(loom))]
use crate::bulk::{self, READ_VECTOR_MAX, WRITE_VECTOR_MAX};

/// The data area of a ring: `capacity` bytes, `capacity` a power of two.
#[derive(Debug)]
pub struct Data {
    #[cfg(not(loom))]
    ptr: std::ptr::NonNull<u8>,
    #[cfg(loom)]
    cells: std::sync::Arc<[loom::cell::UnsafeCell<u8>]>,
    mask: usize,
}

// SAFETY: `Data` is a pointer to shared bytes; which side may write which
// bytes is the ring protocol's business, enforced by Producer/Consumer.
#[cfg(not(loom))]
unsafe impl Send for Data {}

// SAFETY: as above; under loom every access to a cell is checked by loom,
// which fails the model on a data race instead of letting it happen.
#[cfg(loom)]
unsafe impl Send for Data {}

impl Data {
    /// Wraps `capacity` bytes at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr` must be valid for reads of `capacity` bytes (and for writes, if
    /// a `Producer` will use it) for as long as the `Data` (and anything
    /// built from it) lives, and
    /// `capacity` must be a power of two. Within this process, only the
    /// ring's one producer may write those bytes.
    #[cfg(not(loom))]
    pub unsafe fn new(ptr: *mut u8, capacity: usize) -> Data {
        assert!(capacity.is_power_of_two());
        Data {
            ptr: std::ptr::NonNull::new(ptr).expect("null data pointer"),
            mask: capacity - 1,
        }
    }

    /// A data area of `capacity` loom atomics.
    #[cfg(loom)]
    pub fn new_loom(capacity: usize) -> Data {
        assert!(capacity.is_power_of_two());
        let cells = (0..capacity)
            .map(|_| loom::cell::UnsafeCell::new(0u8))
            .collect();
        Data {
            cells,
            mask: capacity - 1,
        }
    }

    /// Capacity in bytes.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// The first byte (for [`Hot`](crate::Hot)).
    #[cfg(not(loom))]
    #[inline]
    pub(crate) fn base(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Splits `len` bytes starting at position `pos` into the slot offset
    /// and the lengths before and after the end of the buffer.
    #[cfg(not(loom))]
    #[inline]
    fn split(&self, pos: u64, len: usize) -> (usize, usize, usize) {
        debug_assert!(len <= self.capacity());
        let off = (pos as usize) & self.mask;
        let first = len.min(self.capacity() - off);
        (off, first, len - first)
    }

    /// Whether `len` bytes from slot `off` (at most the mask) end at or
    /// before the end of the buffer. Written as `off + len - 1 <= mask`,
    /// one compare with the mask, where `len <= capacity - off` took
    /// three more instructions on every item of a stream. (`off + len`
    /// cannot overflow: `off` is at most the mask, below `usize::MAX / 2`
    /// for any power-of-two capacity, and `len`, a slice's length, at most
    /// `isize::MAX`; `len` 0 at `off` 0 wraps to `usize::MAX` and takes
    /// the split path, which copies nothing.)
    #[cfg(not(loom))]
    #[inline(always)]
    fn fits(&self, off: usize, len: usize) -> bool {
        (off + len).wrapping_sub(1) <= self.mask
    }

    /// Copies `src` into the slots starting at `pos`. `src.len()` must not
    /// exceed the capacity.
    #[inline]
    pub(crate) fn write(&self, pos: u64, src: &[u8]) {
        let off = (pos as usize) & self.mask;
        #[cfg(not(loom))]
        if self.fits(off, src.len()) {
            // SAFETY: off + len <= capacity: inside the buffer `new` vouched
            // for; src is a separate Rust slice, so no overlap. (The usual
            // case, kept short so that a copy whose length the compiler
            // knows becomes a move or two.)
            unsafe {
                copy::<WRITE_VECTOR_MAX>(src.as_ptr(), self.ptr.as_ptr().add(off), src.len())
            };
            return;
        }
        self.write_split(off, src);
    }

    /// `write` of a range that crosses the end of the buffer (and every
    /// write under loom).
    #[cold]
    fn write_split(&self, off: usize, src: &[u8]) {
        assert!(src.len() <= self.capacity());
        let first = src.len().min(self.capacity() - off);
        #[cfg(not(loom))]
        // SAFETY: off + first <= capacity and the rest, src.len() - first,
        // is at most off (because src.len() <= capacity), so both ranges
        // are inside the buffer; src is a separate Rust slice.
        unsafe {
            let base = self.ptr.as_ptr();
            copy::<WRITE_VECTOR_MAX>(src.as_ptr(), base.add(off), first);
            copy::<WRITE_VECTOR_MAX>(src.as_ptr().add(first), base, src.len() - first);
        }
        #[cfg(loom)]
        {
            let _ = first;
            for (i, b) in src.iter().enumerate() {
                let cell = &self.cells[(off + i) & self.mask];
                // SAFETY: loom checks this write against every other access
                // to the cell and fails the model on a race.
                cell.with_mut(|p| unsafe { *p = *b });
            }
        }
    }

    /// Copies the slots starting at `pos` into `dst`. `dst.len()` must not
    /// exceed the capacity.
    ///
    /// The peer may be writing these bytes at the same time if it is
    /// hostile; they are copied as plain bytes (every bit pattern is a valid
    /// `u8`) and never read twice, so what lands in `dst` may be garbage but
    /// nothing else can go wrong.
    #[inline]
    pub(crate) fn read(&self, pos: u64, dst: &mut [u8]) {
        let off = (pos as usize) & self.mask;
        #[cfg(not(loom))]
        if self.fits(off, dst.len()) {
            // SAFETY: as in `write`: the source range is inside the buffer
            // and dst is a distinct Rust slice of exactly that length.
            unsafe {
                copy::<READ_VECTOR_MAX>(self.ptr.as_ptr().add(off), dst.as_mut_ptr(), dst.len())
            };
            return;
        }
        self.read_split(off, dst);
    }

    /// The bytes from position `pos`, at most 8 and at most `len` of
    /// them (`len` > 0), as a little-endian word, zero above them.
    #[inline]
    pub(crate) fn read_word(&self, pos: u64, len: usize) -> u64 {
        #[cfg(not(loom))]
        {
            let off = (pos as usize) & self.mask;
            if len >= 8 && off + 8 <= self.capacity() {
                // SAFETY: off + 8 <= capacity: inside the buffer `new`
                // vouched for; any bit pattern is a valid u64.
                let w = unsafe { self.ptr.as_ptr().add(off).cast::<u64>().read_unaligned() };
                return u64::from_le(w);
            }
        }
        self.read_word_split(pos, len.min(8))
    }

    /// `read_word` of fewer than 8 bytes or across the end of the buffer
    /// (and every `read_word` under loom).
    #[cold]
    fn read_word_split(&self, pos: u64, len: usize) -> u64 {
        let mut w = [0u8; 8];
        self.read(pos, &mut w[..len]);
        u64::from_le_bytes(w)
    }

    /// `read` of a range that crosses the end of the buffer (and every
    /// read under loom).
    #[cold]
    fn read_split(&self, off: usize, dst: &mut [u8]) {
        assert!(dst.len() <= self.capacity());
        let first = dst.len().min(self.capacity() - off);
        #[cfg(not(loom))]
        // SAFETY: as in `write_split`.
        unsafe {
            let base = self.ptr.as_ptr();
            copy::<READ_VECTOR_MAX>(base.add(off), dst.as_mut_ptr(), first);
            copy::<READ_VECTOR_MAX>(base, dst.as_mut_ptr().add(first), dst.len() - first);
        }
        #[cfg(loom)]
        {
            let _ = first;
            for (i, d) in dst.iter_mut().enumerate() {
                let cell = &self.cells[(off + i) & self.mask];
                // SAFETY: as in `write_split`.
                *d = cell.with(|p| unsafe { *p });
            }
        }
    }

    /// The (at most two) raw ranges holding `len` bytes from `pos`, as
    /// pointer and length. Every range lies inside the buffer.
    #[cfg(not(loom))]
    #[inline]
    pub(crate) fn ranges(&self, pos: u64, len: usize) -> [(*mut u8, usize); 2] {
        let (off, first, second) = self.split(pos, len);
        let base = self.ptr.as_ptr();
        // SAFETY: off < capacity, so base + off is inside the buffer.
        let at = unsafe { base.add(off) };
        [(at, first), (base, second)]
    }
}

impl Data {
    /// A second handle on the same bytes (for a copy of an end as `fork`
    /// leaves one, see `local::fork_copy`).
    pub(crate) fn clone_loom(&self) -> Data {
        Data {
            #[cfg(loom)]
            cells: self.cells.clone(),
            #[cfg(not(loom))]
            ptr: self.ptr,
            mask: self.mask,
        }
    }
}

/// Copies `src` into `dst` (of the same length) as `copy` does: small
/// copies inline, without a call to `memcpy`.
#[inline(always)]
pub(crate) fn copy_small(src: &[u8], dst: &mut [u8]) {
    assert_eq!(src.len(), dst.len());
    #[cfg(not(loom))]
    // SAFETY: two distinct Rust slices of the same length.
    unsafe {
        copy::<0>(src.as_ptr(), dst.as_mut_ptr(), src.len())
    };
    #[cfg(loom)]
    dst.copy_from_slice(src);
}

/// Stores the first `dst.len()` bytes of `words` (little-endian, `words[i]`
/// holding bytes `8 * i ..`) into `dst`, of at most `8 * N` bytes: a
/// store per word, from registers (a reply of 8 bytes is one store; a
/// loop over a slice of them became a call to `memcpy`).
#[inline(always)]
pub(crate) fn put_words<const N: usize>(words: [u64; N], dst: &mut [u8]) {
    let n = dst.len();
    debug_assert!(n <= 8 * N);
    for (i, w) in words.into_iter().enumerate() {
        let at = 8 * i;
        if n >= at + 8 {
            dst[at..at + 8].copy_from_slice(&w.to_le_bytes());
        } else {
            if n > at {
                put_word_part(w, &mut dst[at..]);
            }
            return;
        }
    }
}

/// The last, partial word of `put_words` (1 to 7 bytes): two stores at most.
#[inline(always)]
fn put_word_part(w: u64, dst: &mut [u8]) {
    let n = dst.len();
    if n >= 4 {
        // Two 4-byte stores that overlap when n < 8.
        dst[..4].copy_from_slice(&(w as u32).to_le_bytes());
        dst[n - 4..].copy_from_slice(&((w >> (8 * (n - 4))) as u32).to_le_bytes());
    } else if n >= 2 {
        dst[..2].copy_from_slice(&(w as u16).to_le_bytes());
        dst[n - 2..].copy_from_slice(&((w >> (8 * (n - 2))) as u16).to_le_bytes());
    } else {
        dst[0] = w as u8;
    }
}

/// Copies `len` bytes. Up to 16 bytes (the common small message) are
/// moved inline with a few unaligned loads and stores instead of a call to
/// `memcpy`, which costs more than the copy itself at that size; longer
/// copies go as [`crate::bulk`] says, by vectors up to `VECTOR_MAX` bytes
/// where they win.
///
/// # Safety
///
/// As for `ptr::copy_nonoverlapping`.
#[cfg(not(loom))]
#[inline(always)]
unsafe fn copy<const VECTOR_MAX: usize>(src: *const u8, dst: *mut u8, len: usize) {
    use std::ptr::{read_unaligned as rd, write_unaligned as wr};
    // SAFETY: every access stays below `len` bytes from `src` and `dst`,
    // which the caller vouches for, and the ranges do not overlap;
    // unaligned reads and writes of plain integers are allowed.
    unsafe {
        if len > 16 {
            bulk::copy::<VECTOR_MAX>(src, dst, len);
        } else if len >= 8 {
            // Two 8-byte moves that overlap when len < 16.
            let (a, b) = (rd(src.cast::<u64>()), rd(src.add(len - 8).cast::<u64>()));
            wr(dst.cast::<u64>(), a);
            wr(dst.add(len - 8).cast::<u64>(), b);
        } else if len >= 4 {
            let (a, b) = (rd(src.cast::<u32>()), rd(src.add(len - 4).cast::<u32>()));
            wr(dst.cast::<u32>(), a);
            wr(dst.add(len - 4).cast::<u32>(), b);
        } else {
            for k in 0..len {
                *dst.add(k) = *src.add(k);
            }
        }
    }
}
