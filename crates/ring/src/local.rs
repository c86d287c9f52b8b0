//! A ring in this process's heap: for tests, Miri, loom and fuzzing, which
//! exercise the very protocol code the shared-memory pipes run.

use std::ptr::NonNull;
use std::sync::Arc;

use crate::data::Data;
use crate::layout::{Control, Role};
use crate::{Consumer, Producer, ProtocolError};

struct Blocks {
    writer: Control,
    reader: Control,
    #[cfg(not(loom))]
    data: *mut [u8],
}

// SAFETY: the raw data pointer is only dereferenced through the ring ends,
// which keep the protocol's one-writer rule; Control is all atomics.
unsafe impl Send for Blocks {}
// SAFETY: as above.
unsafe impl Sync for Blocks {}

#[cfg(not(loom))]
impl Drop for Blocks {
    fn drop(&mut self) {
        // SAFETY: `data` came from Box::into_raw in `channel` and is freed
        // once, here, after both ends (which hold the Arc) are gone.
        drop(unsafe { Box::from_raw(self.data) });
    }
}

/// Makes a ring of `capacity` bytes (a power of two, at least 8) in the heap.
///
/// # Examples
///
/// ```
/// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
/// tx.push(b"hi");
/// let _ = tx.publish();
/// let mut buf = [0u8; 2];
/// assert_eq!(rx.available(1).unwrap(), 2);
/// assert_eq!(rx.pop(&mut buf), 2);
/// assert_eq!(&buf, b"hi");
/// ```
pub fn channel(capacity: usize) -> Result<(Producer, Consumer), ProtocolError> {
    crate::layout::check_capacity(capacity as u64)?;
    #[cfg(not(loom))]
    let (data, raw) = {
        let raw = Box::into_raw(vec![0u8; capacity].into_boxed_slice());
        // SAFETY: the boxed slice is `capacity` bytes, freed only when the
        // Blocks (kept alive by both ends) drop.
        (unsafe { Data::new(raw.cast::<u8>(), capacity) }, raw)
    };
    #[cfg(loom)]
    let data = Data::new_loom(capacity);
    let blocks = Arc::new(Blocks {
        writer: Control::new(),
        reader: Control::new(),
        #[cfg(not(loom))]
        data: raw,
    });
    blocks.writer.init(Role::Writer, capacity as u64)?;
    blocks.reader.init(Role::Reader, capacity as u64)?;
    let w = NonNull::from(&blocks.writer);
    let r = NonNull::from(&blocks.reader);
    #[cfg(not(loom))]
    // SAFETY: same buffer as `data`, kept alive by the Arc in both ends.
    let data2 = unsafe { Data::new(raw.cast::<u8>(), capacity) };
    #[cfg(loom)]
    let data2 = data.clone_loom();
    // SAFETY: the blocks live in the Arc handed to each end as keepalive;
    // there is exactly one producer.
    let producer = unsafe { Producer::new(w, r, data, blocks.clone())? };
    // SAFETY: as above.
    let consumer = unsafe { Consumer::new(r, w, data2, blocks)? };
    Ok((producer, consumer))
}
