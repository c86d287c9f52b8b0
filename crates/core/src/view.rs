//! A read-only view of bytes in the ring that the peer can write.

use std::marker::PhantomData;

/// Bytes in the ring, read in place: at most two ranges (the second is
/// used when the bytes wrap around the end of the buffer).
///
/// This memory belongs to the peer process, which can write it at any time
/// if it breaks the protocol. A `&[u8]` into it would promise Rust that the
/// bytes do not change while borrowed, a promise a hostile peer could
/// break, so this type only hands out copies: each accessor reads each byte
/// once (with a volatile or bulk copy) into memory of ours. With an honest
/// peer the bytes are stable until consumed; with a hostile one you get
/// whatever it wrote, but never undefined behaviour.
///
/// # Examples
///
/// ```
/// let (mut rx, mut tx) = shmpipe::message_pipe()?;
/// tx.send(b"view")?;
/// let msg = rx.recv_in_place()?;
/// let bytes: shmpipe::RingSlice<'_> = msg.bytes();
/// assert_eq!(bytes.to_vec(), b"view"); // a copy, never a borrow
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct RingSlice<'a> {
    parts: [(*const u8, usize); 2],
    _borrow: PhantomData<&'a [u8]>,
}

impl<'a> RingSlice<'a> {
    pub(crate) fn new(parts: [(*const u8, usize); 2]) -> Self {
        RingSlice {
            parts,
            _borrow: PhantomData,
        }
    }

    /// Number of bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut rx, mut tx) = shmpipe::message_pipe()?;
    /// tx.send(b"four")?;
    /// assert_eq!(rx.recv_in_place()?.bytes().len(), 4);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.parts[0].1 + self.parts[1].1
    }

    /// Whether there are no bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut rx, mut tx) = shmpipe::message_pipe()?;
    /// tx.send(b"")?;
    /// assert!(rx.recv_in_place()?.bytes().is_empty());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The byte at `index`, or `None` past the end.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut rx, mut tx) = shmpipe::message_pipe()?;
    /// tx.send(b"ab")?;
    /// let msg = rx.recv_in_place()?;
    /// assert_eq!(msg.bytes().get(0), Some(b'a'));
    /// assert_eq!(msg.bytes().get(2), None);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn get(&self, index: usize) -> Option<u8> {
        let (ptr, len) = if index < self.parts[0].1 {
            (self.parts[0].0, index)
        } else if index < self.len() {
            (self.parts[1].0, index - self.parts[0].1)
        } else {
            return None;
        };
        // SAFETY: `len` (the offset) is inside a range the ring vouched for,
        // readable while `'a` lasts; a volatile read of a u8 is valid for
        // any bit pattern and never assumed stable.
        Some(unsafe { ptr.add(len).read_volatile() })
    }

    /// Copies the first `dst.len()` bytes into `dst`.
    ///
    /// # Panics
    ///
    /// If `dst` is longer than the slice.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut rx, mut tx) = shmpipe::message_pipe()?;
    /// tx.send(&7u32.to_le_bytes())?;
    /// let msg = rx.recv_in_place()?;
    /// let mut word = [0u8; 4];
    /// msg.bytes().copy_to(&mut word);
    /// assert_eq!(u32::from_le_bytes(word), 7);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn copy_to(&self, dst: &mut [u8]) {
        assert!(
            dst.len() <= self.len(),
            "copy_to: destination longer than the slice"
        );
        let first = dst.len().min(self.parts[0].1);
        let (a, b) = dst.split_at_mut(first);
        // SAFETY: both source ranges are readable for `'a` (the ring's
        // ranges), lie in our mapping of the peer's memory, and cannot
        // overlap `dst`, which is our own memory; bytes are plain data.
        unsafe {
            std::ptr::copy_nonoverlapping(self.parts[0].0, a.as_mut_ptr(), a.len());
            std::ptr::copy_nonoverlapping(self.parts[1].0, b.as_mut_ptr(), b.len());
        }
    }

    /// Copies the first `dst.len()` bytes into `dst`, which need not be
    /// initialised (a buffer about to be filled, such as a new Python
    /// `bytes`), and returns it initialised.
    ///
    /// # Panics
    ///
    /// If `dst` is longer than the slice.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::mem::MaybeUninit;
    /// let (mut rx, mut tx) = shmpipe::message_pipe()?;
    /// tx.send(b"hello")?;
    /// let msg = rx.recv_in_place()?;
    /// let mut buf = [MaybeUninit::<u8>::uninit(); 5];
    /// assert_eq!(msg.bytes().copy_to_uninit(&mut buf), b"hello");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn copy_to_uninit<'b>(&self, dst: &'b mut [std::mem::MaybeUninit<u8>]) -> &'b mut [u8] {
        assert!(
            dst.len() <= self.len(),
            "copy_to_uninit: destination longer than the slice"
        );
        let first = dst.len().min(self.parts[0].1);
        let (a, b) = dst.split_at_mut(first);
        // SAFETY: as in `copy_to`: readable source ranges in our mapping of
        // the peer's memory, a destination of ours that cannot overlap
        // them; after the copies every byte of `dst` is initialised, so it
        // may be viewed as `[u8]` (same layout as `[MaybeUninit<u8>]`).
        unsafe {
            std::ptr::copy_nonoverlapping(self.parts[0].0, a.as_mut_ptr().cast(), a.len());
            std::ptr::copy_nonoverlapping(self.parts[1].0, b.as_mut_ptr().cast(), b.len());
            std::slice::from_raw_parts_mut(dst.as_mut_ptr().cast(), dst.len())
        }
    }

    /// Copies the bytes into a new vector.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut rx, mut tx) = shmpipe::message_pipe()?;
    /// tx.send(b"copy")?;
    /// assert_eq!(rx.recv_in_place()?.bytes().to_vec(), b"copy");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.len()];
        self.copy_to(&mut v);
        v
    }

    /// The bytes, one by one.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut rx, mut tx) = shmpipe::message_pipe()?;
    /// tx.send(&[1, 2, 3])?;
    /// let msg = rx.recv_in_place()?;
    /// assert_eq!(msg.bytes().iter().map(u32::from).sum::<u32>(), 6);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn iter(&self) -> impl Iterator<Item = u8> + '_ {
        (0..self.len()).map(|i| self.get(i).expect("in range"))
    }

    /// The bytes as ordinary slices, without a copy.
    ///
    /// # Safety
    ///
    /// The peer must not write these bytes while the slices live. An
    /// honest peer never does (it writes a slot only after this side has
    /// consumed it), so this holds when the peer is trusted to follow the
    /// protocol, e.g. it is your own program. A hostile peer can break it.
    pub unsafe fn as_slices(&self) -> (&'a [u8], &'a [u8]) {
        // SAFETY: the ranges are readable for `'a`; immutability while
        // borrowed is the caller's promise.
        unsafe {
            (
                std::slice::from_raw_parts(self.parts[0].0, self.parts[0].1),
                std::slice::from_raw_parts(self.parts[1].0, self.parts[1].1),
            )
        }
    }
}
