//! A ring in this process's heap: for tests, Miri, loom and fuzzing, which
//! exercise the very protocol code the shared-memory pipes run.
//!
//! [`channel`] makes an honest ring. With the `test-kit` feature (not under
//! loom), `hostile` makes a ring whose shared fields a test can overwrite at
//! will, to play a misbehaving peer: see `Hostile`.
//!
//! # Examples
//!
//! ```
//! let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
//! tx.push_message(b"in the heap");
//! let _ = tx.publish();
//! assert_eq!(rx.next_message(), Ok(Some(11)));
//! ```

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

/// A second, identical copy of a reading end, as `fork` leaves one in the
/// child: both copies own the same head and parked word, each with its own
/// private state (cached indices, fence mode, gate). For models and tests
/// of copies that take turns (`tests/loom.rs`, `tests/turns.rs`).
///
/// # Examples
///
/// ```
/// let (_tx, rx) = shmpipe_ring::local::channel(64).unwrap();
/// let copy = shmpipe_ring::local::fork_copy(&rx);
/// assert_eq!(copy.capacity(), rx.capacity());
/// ```
pub fn fork_copy(rx: &Consumer) -> Consumer {
    rx.fork_copy()
}

/// A second, identical copy of a writing end, as `fork` leaves one in the
/// child (see [`fork_copy`]).
///
/// # Safety
///
/// The two copies live in one process here, where the producer's
/// contract wants one: never hold slices of both at once
/// ([`Producer::slices_mut`]). (In separate processes they may.)
///
/// # Examples
///
/// ```
/// let (tx, _rx) = shmpipe_ring::local::channel(64).unwrap();
/// // SAFETY: neither copy lends slices here.
/// let copy = unsafe { shmpipe_ring::local::fork_copy_producer(&tx) };
/// assert_eq!(copy.capacity(), tx.capacity());
/// ```
pub unsafe fn fork_copy_producer(tx: &Producer) -> Producer {
    tx.fork_copy()
}

#[cfg(all(feature = "test-kit", not(loom)))]
pub use hostile::{hostile, ConsumerRef, Field, Hostile, ProducerRef, Scribbler};

/// A testing aid: a ring whose shared memory a test or fuzzer can overwrite,
/// to play a peer that breaks the protocol. Only with the `test-kit`
/// feature, which tests and fuzz targets enable.
#[cfg(all(feature = "test-kit", not(loom)))]
mod hostile {
    use std::ptr::NonNull;
    use std::sync::Arc;

    use crate::data::Data;
    use crate::layout::{Control, Role, MAGIC, VERSION};
    use crate::sync::{AtomicU32, AtomicU64, Ordering};
    use crate::{Consumer, Producer, ProtocolError};

    /// A control block as this module sees it: the bytes of a [`Control`],
    /// with its fields at the offsets `layout` gives them, and every other
    /// byte inside an atomic too.
    ///
    /// Why not `Control` itself: `layout` keeps the header fields private,
    /// as it should for honest code. Why no padding: the ends see this
    /// memory as a `Control`, and a reference to it may only be shared
    /// with theirs if every byte that is an atomic in `Control` is one here
    /// as well, whatever fields `layout` adds to its lines (Miri checks).
    /// The size and the offsets of index, the inline copy, parked and cpu are checked at
    /// compile time; the header's by `hostile` when it starts.
    #[repr(C, align(128))]
    struct RawControl {
        magic: AtomicU64,
        version: AtomicU32,
        role: AtomicU32,
        capacity: AtomicU64,
        flags: AtomicU32,
        _header_rest: [AtomicU32; 25],
        index: AtomicU64,
        inline_at: AtomicU64,
        inline_len: AtomicU64,
        inline: AtomicU64,
        _index_rest: [AtomicU64; 12],
        parked: AtomicU64,
        _parked_rest: [AtomicU64; 15],
        cpu: AtomicU32,
        _cpu_rest: [AtomicU32; 31],
        pending: AtomicU32,
        holders: [AtomicU32; crate::layout::HOLDER_SLOTS],
        turn_lock: [AtomicU64; 8],
    }

    const _: () = {
        use std::mem::{align_of, offset_of, size_of};
        assert!(size_of::<RawControl>() == size_of::<Control>());
        assert!(align_of::<RawControl>() == align_of::<Control>());
        assert!(offset_of!(RawControl, magic) == crate::layout::offset::MAGIC);
        assert!(offset_of!(RawControl, capacity) == crate::layout::offset::CAPACITY);
        assert!(offset_of!(RawControl, flags) == crate::layout::offset::FLAGS);
        assert!(offset_of!(RawControl, index) == offset_of!(Control, index));
        assert!(offset_of!(RawControl, inline_at) == crate::layout::offset::INLINE_AT);
        assert!(offset_of!(RawControl, inline_len) == crate::layout::offset::INLINE_LEN);
        assert!(offset_of!(RawControl, inline) == crate::layout::offset::INLINE);
        assert!(offset_of!(RawControl, parked) == offset_of!(Control, parked));
        assert!(offset_of!(RawControl, cpu) == offset_of!(Control, cpu));
        assert!(offset_of!(RawControl, pending) == crate::layout::offset::PENDING);
        assert!(offset_of!(RawControl, holders) == crate::layout::offset::HOLDERS);
        assert!(offset_of!(RawControl, turn_lock) == crate::layout::offset::TURN_LOCK);
    };

    impl RawControl {
        fn new() -> Self {
            RawControl {
                magic: AtomicU64::new(0),
                version: AtomicU32::new(0),
                role: AtomicU32::new(0),
                capacity: AtomicU64::new(0),
                flags: AtomicU32::new(0),
                _header_rest: std::array::from_fn(|_| AtomicU32::new(0)),
                index: AtomicU64::new(0),
                inline_at: AtomicU64::new(0),
                inline_len: AtomicU64::new(0),
                inline: AtomicU64::new(0),
                _index_rest: std::array::from_fn(|_| AtomicU64::new(0)),
                parked: AtomicU64::new(0),
                _parked_rest: std::array::from_fn(|_| AtomicU64::new(0)),
                cpu: AtomicU32::new(u32::MAX),
                _cpu_rest: std::array::from_fn(|_| AtomicU32::new(0)),
                pending: AtomicU32::new(0),
                holders: std::array::from_fn(|_| AtomicU32::new(0)),
                turn_lock: std::array::from_fn(|_| AtomicU64::new(0)),
            }
        }

        fn as_control(&self) -> &Control {
            // SAFETY: RawControl has Control's size and alignment and its
            // atomics at Control's offsets (checked above and in
            // `hostile`), and every byte of it is inside an atomic, so the
            // bytes are a valid Control and shared references to both may
            // alias.
            unsafe { NonNull::from(self).cast::<Control>().as_ref() }
        }
    }

    /// Which shared field [`Hostile::store`] and [`Scribbler::store`] write.
    ///
    /// `Version`, `Role`, `Flags` and `Cpu` are 32-bit fields: a stored
    /// value is truncated to its low 32 bits.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Field {
        /// Header: the magic word.
        Magic,
        /// Header: the layout version (32 bits).
        Version,
        /// Header: the role tag (32 bits).
        Role,
        /// Header: the capacity in bytes.
        Capacity,
        /// Header: the flags word (32 bits at offset 24; light fences).
        Flags,
        /// The free-running position: tail in the writer's block, head in
        /// the reader's.
        Index,
        /// The owner's park epoch.
        Parked,
        /// The CPU the owner last ran on, a scheduling hint (32 bits).
        Cpu,
        /// The writer's inline copy: the position of its first byte.
        InlineAt,
        /// The writer's inline copy: its length in bytes.
        InlineLen,
        /// The writer's inline copy: its first 8 bytes, little-endian.
        Inline,
    }

    impl Field {
        /// Every field, for fuzzers and table-driven tests.
        pub const ALL: [Field; 11] = [
            Field::Magic,
            Field::Version,
            Field::Role,
            Field::Capacity,
            Field::Flags,
            Field::Index,
            Field::Parked,
            Field::Cpu,
            Field::InlineAt,
            Field::InlineLen,
            Field::Inline,
        ];
    }

    struct Blocks {
        writer: RawControl,
        reader: RawControl,
        data: *mut [u8],
    }

    // SAFETY: the data pointer is dereferenced only through `Data` handles
    // whose use the owning `Hostile` serialises (see `Hostile::write_data`);
    // everything else is atomics.
    unsafe impl Send for Blocks {}
    // SAFETY: as above.
    unsafe impl Sync for Blocks {}

    impl Drop for Blocks {
        fn drop(&mut self) {
            // SAFETY: `data` came from Box::into_raw in `hostile` and is
            // freed once, here, after every end and handle is gone.
            drop(unsafe { Box::from_raw(self.data) });
        }
    }

    impl Blocks {
        fn block(&self, role: Role) -> &RawControl {
            match role {
                Role::Writer => &self.writer,
                Role::Reader => &self.reader,
            }
        }

        fn store(&self, role: Role, field: Field, value: u64) {
            let b = self.block(role);
            let o = Ordering::SeqCst;
            match field {
                Field::Magic => b.magic.store(value, o),
                Field::Version => b.version.store(value as u32, o),
                Field::Role => b.role.store(value as u32, o),
                Field::Capacity => b.capacity.store(value, o),
                Field::Flags => b.flags.store(value as u32, o),
                Field::Index => b.index.store(value, o),
                Field::Parked => b.parked.store(value, o),
                Field::Cpu => b.cpu.store(value as u32, o),
                Field::InlineAt => b.inline_at.store(value, o),
                Field::InlineLen => b.inline_len.store(value, o),
                Field::Inline => b.inline.store(value, o),
            }
        }

        fn load(&self, role: Role, field: Field) -> u64 {
            let b = self.block(role);
            let o = Ordering::SeqCst;
            match field {
                Field::Magic => b.magic.load(o),
                Field::Version => u64::from(b.version.load(o)),
                Field::Role => u64::from(b.role.load(o)),
                Field::Capacity => b.capacity.load(o),
                Field::Flags => u64::from(b.flags.load(o)),
                Field::Index => b.index.load(o),
                Field::Parked => b.parked.load(o),
                Field::Cpu => u64::from(b.cpu.load(o)),
                Field::InlineAt => b.inline_at.load(o),
                Field::InlineLen => b.inline_len.load(o),
                Field::Inline => b.inline.load(o),
            }
        }

        fn data(&self, capacity: usize) -> Data {
            // SAFETY: `data` is `capacity` bytes (a power of two), valid
            // while the Blocks live, which every end keeps alive.
            unsafe { Data::new(self.data.cast::<u8>(), capacity) }
        }
    }

    /// A ring in the heap whose shared memory a test can overwrite, to play
    /// a peer that breaks the protocol.
    ///
    /// **A testing aid.** It owns the two honest ends, which the test drives
    /// through [`producer`](Self::producer) and [`consumer`](Self::consumer);
    /// whichever end the test checks is the victim, and the `Hostile` plays
    /// its peer, writing what a hostile process could write into shared
    /// memory:
    ///
    /// - [`store`](Self::store): any value into any field of either control
    ///   block (see [`Field`]: the header's magic, version, role, capacity
    ///   and flags; index, the inline copy, parked and cpu), at any time.
    ///   [`scribbler`](Self::scribbler) hands out a `Send + Sync` handle
    ///   that does the same from another thread while the victim runs.
    /// - [`write_data`](Self::write_data): any bytes at any position of the
    ///   data area, between calls on the ends.
    /// - [`attach_producer`](Self::attach_producer) /
    ///   [`attach_consumer`](Self::attach_consumer): attach an end afresh,
    ///   to check the header checks on attach.
    ///
    /// Everything is safe. Control fields are atomics, so they may change
    /// under a running victim. The data bytes are not atomics (the ends copy
    /// them with plain memory copies), so a concurrent write would be a data
    /// race in this process; `write_data` therefore takes `&mut self`, and
    /// the ends are reachable only through this value, so no end can run
    /// during it. A victim reads every data byte once into its own buffer,
    /// so bytes changed between its calls exercise the same paths as bytes
    /// changed during one.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe_ring::layout::Role;
    /// use shmpipe_ring::local::{hostile, Field};
    /// use shmpipe_ring::ProtocolError;
    ///
    /// let mut h = hostile(64).unwrap();
    /// // The writer's tail jumps two rings ahead: the consumer refuses it.
    /// h.store(Role::Writer, Field::Index, 128);
    /// assert_eq!(
    ///     h.consumer().available(1),
    ///     Err(ProtocolError::IndexOutOfRange { which: "tail", value: 128 })
    /// );
    /// ```
    #[derive(Debug)]
    pub struct Hostile {
        blocks: Arc<Blocks>,
        capacity: usize,
        data: Data,
        producer: Option<Producer>,
        consumer: Option<Consumer>,
    }

    impl std::fmt::Debug for Blocks {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Blocks")
        }
    }

    /// Makes a [`Hostile`] ring of `capacity` bytes (a power of two, at
    /// least 8) with both honest ends attached.
    pub fn hostile(capacity: usize) -> Result<Hostile, ProtocolError> {
        crate::layout::check_capacity(capacity as u64)?;
        let raw = Box::into_raw(vec![0u8; capacity].into_boxed_slice());
        let blocks = Arc::new(Blocks {
            writer: RawControl::new(),
            reader: RawControl::new(),
            data: raw,
        });
        for role in [Role::Writer, Role::Reader] {
            blocks
                .block(role)
                .as_control()
                .init(role, capacity as u64)?;
            // RawControl must find what `init` wrote where `layout` put it.
            let got = Field::ALL.map(|f| blocks.load(role, f));
            let want = [
                MAGIC,
                u64::from(VERSION),
                role as u64,
                capacity as u64,
                0,
                0,
                0,
                u64::from(u32::MAX),
                u64::MAX,
                0,
                0,
            ];
            assert_eq!(
                got, want,
                "local::hostile's RawControl no longer mirrors layout::Control"
            );
        }
        let data = blocks.data(capacity);
        let mut h = Hostile {
            blocks,
            capacity,
            data,
            producer: None,
            consumer: None,
        };
        h.attach_producer()?;
        h.attach_consumer()?;
        Ok(h)
    }

    impl Hostile {
        /// Ring capacity in bytes (as made; the header may say otherwise).
        pub fn capacity(&self) -> usize {
            self.capacity
        }

        /// Stores `value` into `field` of the `block`'s control block.
        pub fn store(&self, block: Role, field: Field, value: u64) {
            self.blocks.store(block, field, value);
        }

        /// Loads `field` of the `block`'s control block.
        pub fn load(&self, block: Role, field: Field) -> u64 {
            self.blocks.load(block, field)
        }

        /// Writes `bytes` into the data area from position `pos` (masked,
        /// wrapping around the end like the ring does).
        ///
        /// # Panics
        ///
        /// If `bytes` is longer than the capacity.
        pub fn write_data(&mut self, pos: u64, bytes: &[u8]) {
            // `&mut self` excludes every use of the ends, which live in
            // `self`: no other access to the bytes runs during this write.
            self.data.write(pos, bytes);
        }

        /// The addresses the data area occupies, to check that the ranges
        /// and slices the ends hand out stay inside it.
        pub fn data_addresses(&self) -> std::ops::Range<usize> {
            let start = self.blocks.data.cast::<u8>() as usize;
            start..start + self.capacity
        }

        /// A handle that stores into the control blocks from any thread.
        pub fn scribbler(&self) -> Scribbler {
            Scribbler {
                blocks: self.blocks.clone(),
            }
        }

        /// The honest producer, to drive as victim or as honest peer.
        ///
        /// # Panics
        ///
        /// If it is detached (after a failed attach, or a detach).
        pub fn producer(&mut self) -> ProducerRef<'_> {
            ProducerRef(self.producer.as_mut().expect("producer detached"))
        }

        /// The honest consumer, to drive as victim or as honest peer.
        ///
        /// # Panics
        ///
        /// If it is detached (after a failed attach, or a detach).
        pub fn consumer(&mut self) -> ConsumerRef<'_> {
            ConsumerRef(self.consumer.as_mut().expect("consumer detached"))
        }

        /// Both ends at once.
        ///
        /// # Panics
        ///
        /// If either is detached.
        pub fn ends(&mut self) -> (ProducerRef<'_>, ConsumerRef<'_>) {
            (
                ProducerRef(self.producer.as_mut().expect("producer detached")),
                ConsumerRef(self.consumer.as_mut().expect("consumer detached")),
            )
        }

        /// Whether a producer is attached.
        pub fn has_producer(&self) -> bool {
            self.producer.is_some()
        }

        /// Whether a consumer is attached.
        pub fn has_consumer(&self) -> bool {
            self.consumer.is_some()
        }

        /// Drops the producer.
        pub fn detach_producer(&mut self) {
            self.producer = None;
        }

        /// Drops the consumer.
        pub fn detach_consumer(&mut self) {
            self.consumer = None;
        }

        /// Drops the producer and attaches a new one to the blocks as they
        /// are now (so its header checks run on whatever was stored). On
        /// error the producer stays detached.
        pub fn attach_producer(&mut self) -> Result<(), ProtocolError> {
            self.producer = None; // at most one Producer per ring (Producer::new)
            let own = NonNull::from(&self.blocks.writer).cast::<Control>();
            let peer = NonNull::from(&self.blocks.reader).cast::<Control>();
            let data = self.blocks.data(self.capacity);
            // SAFETY: the blocks (laid out as Control, see RawControl) and
            // the data live in the Arc passed as keepalive; the old producer
            // was dropped above, so this is the only one.
            self.producer = Some(unsafe { Producer::new(own, peer, data, self.blocks.clone())? });
            Ok(())
        }

        /// Drops the consumer and attaches a new one to the blocks as they
        /// are now. On error the consumer stays detached.
        pub fn attach_consumer(&mut self) -> Result<(), ProtocolError> {
            self.consumer = None;
            let own = NonNull::from(&self.blocks.reader).cast::<Control>();
            let peer = NonNull::from(&self.blocks.writer).cast::<Control>();
            let data = self.blocks.data(self.capacity);
            // SAFETY: as in `attach_producer`.
            self.consumer = Some(unsafe { Consumer::new(own, peer, data, self.blocks.clone())? });
            Ok(())
        }
    }

    /// Stores into a [`Hostile`] ring's control blocks from any thread, at
    /// any time, while the victim runs elsewhere. A testing aid.
    #[derive(Debug, Clone)]
    pub struct Scribbler {
        blocks: Arc<Blocks>,
    }

    impl Scribbler {
        /// Stores `value` into `field` of the `block`'s control block.
        pub fn store(&self, block: Role, field: Field, value: u64) {
            self.blocks.store(block, field, value);
        }

        /// Loads `field` of the `block`'s control block.
        pub fn load(&self, block: Role, field: Field) -> u64 {
            self.blocks.load(block, field)
        }
    }

    /// The producer of a [`Hostile`] ring, lent out for a call or a few.
    ///
    /// A wrapper rather than `&mut Producer` so that the end cannot be
    /// swapped out of its `Hostile` (which would let a `write_data` race
    /// with it). Every method forwards to [`Producer`]'s.
    #[derive(Debug)]
    pub struct ProducerRef<'a>(&'a mut Producer);

    impl std::ops::Deref for ProducerRef<'_> {
        type Target = Producer;
        fn deref(&self) -> &Producer {
            self.0
        }
    }

    #[allow(missing_docs)] // see the Producer methods of the same names
    impl ProducerRef<'_> {
        pub fn free(&mut self, want: usize) -> Result<usize, ProtocolError> {
            self.0.free(want)
        }
        pub fn push(&mut self, src: &[u8]) {
            self.0.push(src)
        }
        pub fn push_message(&mut self, msg: &[u8]) {
            self.0.push_message(msg)
        }
        pub fn write_message_header(&mut self, payload_len: usize) {
            self.0.write_message_header(payload_len)
        }
        pub fn slices_mut(&mut self, offset: usize, len: usize) -> (&mut [u8], &mut [u8]) {
            self.0.slices_mut(offset, len)
        }
        pub fn commit(&mut self, n: usize) {
            self.0.commit(n)
        }
        #[must_use = "a parked consumer must be woken"]
        pub fn publish(&mut self) -> bool {
            self.0.publish()
        }
        pub fn park(&mut self, want: usize) -> Result<bool, ProtocolError> {
            self.0.park(want)
        }
        pub fn unpark(&mut self) {
            self.0.unpark()
        }
        pub fn exchange_cpu_hint(&mut self, cpu: u32) -> u32 {
            self.0.exchange_cpu_hint(cpu)
        }
    }

    /// The consumer of a [`Hostile`] ring, lent out for a call or a few.
    /// See [`ProducerRef`] for why it is a wrapper.
    #[derive(Debug)]
    pub struct ConsumerRef<'a>(&'a mut Consumer);

    impl std::ops::Deref for ConsumerRef<'_> {
        type Target = Consumer;
        fn deref(&self) -> &Consumer {
            self.0
        }
    }

    #[allow(missing_docs)] // see the Consumer methods of the same names
    impl ConsumerRef<'_> {
        pub fn available(&mut self, want: usize) -> Result<usize, ProtocolError> {
            self.0.available(want)
        }
        pub fn pop(&mut self, dst: &mut [u8]) -> usize {
            self.0.pop(dst)
        }
        pub fn consume(&mut self, n: usize) {
            self.0.consume(n)
        }
        pub fn next_message(&mut self) -> Result<Option<usize>, ProtocolError> {
            self.0.next_message()
        }
        pub fn consume_message(&mut self, payload_len: usize) {
            self.0.consume_message(payload_len)
        }
        #[must_use = "a parked producer must be woken"]
        pub fn publish(&mut self) -> bool {
            self.0.publish()
        }
        pub fn park(&mut self) -> Result<bool, ProtocolError> {
            self.0.park()
        }
        pub fn unpark(&mut self) {
            self.0.unpark()
        }
        pub fn exchange_cpu_hint(&mut self, cpu: u32) -> u32 {
            self.0.exchange_cpu_hint(cpu)
        }
        #[must_use = "a parked producer must be woken"]
        pub fn take_reply(&mut self, dst: &mut [u8]) -> Option<bool> {
            self.0.take_reply(dst)
        }
    }
}
