//! The shared-memory layout both processes agree on.
//!
//! Each pipe has two regions, one per side, each written by its owner only:
//!
//! ```text
//! writer region: [ Control (role WRITER, index = tail) | pad to 4 KiB | data: capacity bytes ]
//! reader region: [ Control (role READER, index = head) ]
//! ```
//!
//! The last line of a block, [`Turns`], is for the copies of its end
//! (left by `fork`, or handed to other processes): which processes hold
//! one, and the lock they take turns under (see docs/shared-ends.md).
//!
//! The 64 bytes from the index on are one cache line (x86, most ARM):
//! in the writer's block they also hold the inline copy of its last small
//! publish (see [`crate::inline`]), so a reader that waits on the tail gets
//! the bytes with it. The copy is a hint; the tail and the data decide.
//!
//! Two separately built processes share this layout, so every size here is
//! fixed, not taken from the target: lines are 128 bytes (adjacent-line
//! prefetch on x86, 128-byte lines on big ARM cores) and the control block is
//! padded to one 4 KiB page so the data starts on its own page.
//!
//! # Examples
//!
//! ```
//! use shmpipe_ring::layout::{offset, writer_region_len, Control, Role};
//! use shmpipe_ring::layout::{DATA_OFFSET, READER_REGION_LEN};
//!
//! let block = Control::new();
//! block.init(Role::Writer, 4096).unwrap();
//! assert_eq!(block.check(Role::Writer), Ok(4096));
//! assert_eq!(std::mem::size_of::<Control>(), offset::END);
//! assert_eq!(writer_region_len(4096), DATA_OFFSET + 4096);
//! assert_eq!(READER_REGION_LEN, DATA_OFFSET);
//! ```

use crate::inline::Inline;
use crate::sync::{AtomicU32, AtomicU64, Ordering};
use crate::ProtocolError;

/// First word of every control block: `b"SHMPIPE\0"` read as little-endian.
///
/// # Examples
///
/// ```
/// assert_eq!(&shmpipe_ring::layout::MAGIC.to_le_bytes(), b"SHMPIPE\0");
/// ```
pub const MAGIC: u64 = u64::from_le_bytes(*b"SHMPIPE\0");
/// Layout version; bumped on any change to this file. 3: the inline copy
/// beside the index. 4: the turns line (holders of the end, their lock).
///
/// # Examples
///
/// ```
/// use shmpipe_ring::layout::{Control, Role, VERSION};
/// use shmpipe_ring::ProtocolError;
///
/// let c = Control::new();
/// assert_eq!(c.check(Role::Writer), Err(ProtocolError::BadMagic(0)));
/// c.init(Role::Writer, 64).unwrap();
/// assert_eq!(c.check(Role::Writer), Ok(64)); // a block of this VERSION
/// assert_eq!(VERSION, 4);
/// ```
pub const VERSION: u32 = 4;
/// Bytes from the start of the writer's region to the first data byte.
///
/// # Examples
///
/// ```
/// use shmpipe_ring::layout::{offset, writer_region_len, DATA_OFFSET};
/// assert!(offset::END <= DATA_OFFSET);
/// assert_eq!(writer_region_len(64), DATA_OFFSET + 64);
/// ```
pub const DATA_OFFSET: usize = 4096;
/// Smallest ring, in bytes (one message header).
///
/// # Examples
///
/// ```
/// use shmpipe_ring::layout::{check_capacity, MIN_CAPACITY};
/// assert!(check_capacity(MIN_CAPACITY).is_ok());
/// assert!(check_capacity(MIN_CAPACITY / 2).is_err());
/// ```
pub const MIN_CAPACITY: u64 = 8;
/// Largest ring, in bytes.
///
/// # Examples
///
/// ```
/// use shmpipe_ring::layout::{check_capacity, MAX_CAPACITY};
/// assert!(check_capacity(MAX_CAPACITY).is_ok());
/// assert!(check_capacity(MAX_CAPACITY * 2).is_err());
/// ```
pub const MAX_CAPACITY: u64 = 1 << 40;

/// Which side owns a control block.
///
/// # Examples
///
/// ```
/// use shmpipe_ring::layout::{Control, Role};
/// use shmpipe_ring::ProtocolError;
///
/// let c = Control::new();
/// c.init(Role::Reader, 64).unwrap();
/// assert_eq!(c.check(Role::Reader), Ok(64));
/// assert_eq!(
///     c.check(Role::Writer),
///     Err(ProtocolError::BadRole(Role::Reader as u32))
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Role {
    /// The writer's block: its index is the tail.
    Writer = 0x5752,
    /// The reader's block: its index is the head.
    Reader = 0x5244,
}

/// Pads and aligns `T` to 128 bytes so two hot words never share a line.
///
/// # Examples
///
/// ```
/// use shmpipe_ring::layout::CachePadded;
/// assert_eq!(std::mem::size_of::<CachePadded<u64>>(), 128);
/// assert_eq!(std::mem::align_of::<CachePadded<u8>>(), 128);
/// ```
#[derive(Debug, Default)]
#[repr(C, align(128))]
pub struct CachePadded<T>(pub T);

/// The header at offset 0 of a control block: written once by the owner
/// before the region is shared, checked once by the peer on attach.
///
/// # Examples
///
/// ```
/// use shmpipe_ring::layout::{offset, Header};
/// // Magic, version, role, capacity and flags, before the index's line.
/// assert!(std::mem::size_of::<Header>() <= offset::INDEX);
/// ```
#[derive(Debug)]
#[repr(C)]
pub struct Header {
    magic: AtomicU64,
    version: AtomicU32,
    role: AtomicU32,
    capacity: AtomicU64,
    /// [`LIGHT_FENCES`] when the owner publishes with a compiler fence
    /// only. Offset 24.
    flags: AtomicU32,
}

/// Header flag: the owner publishes without a hardware fence, so before it
/// re-checks after parking, the peer must make every CPU that runs the
/// owner execute one (`membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)`).
///
/// # Examples
///
/// ```
/// use shmpipe_ring::layout::{offset, Control, Role, LIGHT_FENCES};
///
/// let c = Control::new();
/// c.init(Role::Writer, 64).unwrap();
/// let flags = |c: &Control| {
///     // SAFETY: FLAGS is the offset of a u32 inside the block, and nothing
///     // writes the block while it is read.
///     unsafe { (c as *const Control).cast::<u8>().add(offset::FLAGS).cast::<u32>().read() }
/// };
/// assert_eq!(flags(&c) & LIGHT_FENCES, 0); // full fences after init
/// ```
pub const LIGHT_FENCES: u32 = 1;

/// Bit of a control block's `parked` word that says the owner sleeps (or
/// is about to); the bits above it count the owner's parkings.
///
/// # Examples
///
/// ```
/// use shmpipe_ring::layout::{offset, Control, Role, PARKED};
///
/// let c = Control::new();
/// c.init(Role::Reader, 64).unwrap();
/// let block = (&c as *const Control).cast::<u8>();
/// // SAFETY: PARKED is the offset of a u64 inside the block, and nothing
/// // writes the block while it is read.
/// let parked = unsafe { block.add(offset::PARKED).cast::<u64>().read() };
/// assert_eq!(parked & PARKED, 0); // not asleep after init
/// ```
pub const PARKED: u64 = 1;

/// The line of a control block that starts with its index.
///
/// # Examples
///
/// ```
/// use shmpipe_ring::layout::{offset, IndexLine};
/// // The index and the inline copy fit in one 64-byte line.
/// assert!(offset::INDEX + std::mem::size_of::<IndexLine>() <= offset::INDEX + 64);
/// ```
#[derive(Debug)]
#[repr(C)]
pub struct IndexLine {
    /// Free-running position: the tail in the writer's block, the head in
    /// the reader's. Offset 128.
    pub(crate) pos: AtomicU64,
    /// The writer's inline copy of its last small publish (unused, zero,
    /// in the reader's block). Offsets 136 to 192.
    pub(crate) inline: Inline,
}

/// How many holder slots a [`Turns`] line has.
///
/// # Examples
///
/// ```
/// use shmpipe_ring::layout::{offset, HOLDER_SLOTS};
/// assert_eq!(offset::HOLDERS + 4 * HOLDER_SLOTS, offset::TURN_LOCK);
/// ```
pub const HOLDER_SLOTS: usize = 15;

/// The line of a control block for the copies of its end: the holders
/// (each a process id, or a fork not yet claimed) and the lock they take
/// turns under. Written by every holder of the end, never by the peer.
///
/// # Examples
///
/// ```
/// use shmpipe_ring::layout::{offset, Turns};
/// assert_eq!(std::mem::size_of::<Turns>(), offset::END - offset::PENDING);
/// ```
#[derive(Debug)]
#[repr(C)]
pub struct Turns {
    /// Copies made (a fork, a hand-off) and not yet claimed by the
    /// process that got them. Offset 512.
    pub(crate) pending: AtomicU32,
    /// Process ids of the holders, 0 for a free slot. Offsets 516 to 576.
    pub(crate) holders: [AtomicU32; HOLDER_SLOTS],
    /// The lock: a process-shared robust mutex, set up by the `shmpipe`
    /// crate; zero here. Offsets 576 to 640.
    pub(crate) lock: [AtomicU64; 8],
}

/// One side's control block. Only the owner writes it; the peer maps it
/// read-only (where the two ends were set up by different processes).
///
/// # Examples
///
/// ```
/// use shmpipe_ring::layout::{offset, Control, Role};
///
/// let c = Control::new();
/// c.init(Role::Writer, 4096).unwrap();
/// assert_eq!(c.check(Role::Writer), Ok(4096));
/// assert_eq!(std::mem::size_of::<Control>(), offset::END);
/// ```
#[derive(Debug)]
#[repr(C)]
pub struct Control {
    /// Magic, version, role and capacity.
    pub(crate) header: CachePadded<Header>,
    /// The index (offset 128) and, in the writer's block, the inline copy
    /// on the same 64-byte line.
    pub(crate) index: CachePadded<IndexLine>,
    /// [`PARKED`] set while the owner is asleep (or about to sleep) waiting
    /// for the peer; the bits above it are the owner's park epoch, kept
    /// across parkings and re-attachments of the end. Offset 256.
    pub(crate) parked: CachePadded<AtomicU64>,
    /// The CPU the owner last ran on when it began to wait (`u32::MAX`:
    /// unknown). Only a hint: a waiter whose peer shares its CPU yields at
    /// once instead of spinning, since the peer cannot run while it spins.
    /// Offset 384.
    pub(crate) cpu: CachePadded<AtomicU32>,
    /// The holders of this end and their lock (see [`Turns`]). Offset 512.
    pub(crate) turns: CachePadded<Turns>,
}

/// Byte offsets of every field of a [`Control`] block, for programs (and
/// tests) that read or write one without this crate's types. Each is
/// checked against the struct at compile time.
///
/// ```text
/// offset  size  field
///      0     8  magic      MAGIC
///      8     4  version    VERSION
///     12     4  role       Role as u32
///     16     8  capacity   ring bytes, a power of two
///     24     4  flags      LIGHT_FENCES
///    128     8  index      tail (writer) or head (reader), free-running
///    136     8  inline_at  writer: position of the inline copy's first
///                          byte; u64::MAX while it is being rewritten
///    144     8  inline_len writer: bytes in the inline copy, at most 40
///    152    40  inline     writer: the bytes, little-endian words
///    256     8  parked     park epoch << 1 | PARKED
///    384     4  cpu        hint: the owner's CPU, u32::MAX unknown
///    512     4  pending    copies made and not yet claimed
///    516    60  holders    15 process ids (u32), 0: a free slot
///    576    64  lock       process-shared robust mutex (the shmpipe crate's)
///    640        end of the block (the region is padded to DATA_OFFSET)
/// ```
pub mod offset {
    /// `magic`: u64.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe_ring::layout::{offset, Control, Role, MAGIC};
    ///
    /// let c = Control::new();
    /// c.init(Role::Writer, 64).unwrap();
    /// let block = (&c as *const Control).cast::<u8>();
    /// // SAFETY: the offset is that of a u64 inside the block, and nothing
    /// // writes the block while it is read.
    /// let magic = unsafe { block.add(offset::MAGIC).cast::<u64>().read() };
    /// assert_eq!(magic, MAGIC);
    /// ```
    pub const MAGIC: usize = 0;
    /// `version`: u32.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe_ring::layout::{offset, Control, Role, VERSION};
    ///
    /// let c = Control::new();
    /// c.init(Role::Writer, 64).unwrap();
    /// let block = (&c as *const Control).cast::<u8>();
    /// // SAFETY: the offset is that of a u32 inside the block, and nothing
    /// // writes the block while it is read.
    /// let v = unsafe { block.add(offset::VERSION).cast::<u32>().read() };
    /// assert_eq!(v, VERSION);
    /// ```
    pub const VERSION: usize = 8;
    /// `role`: u32.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe_ring::layout::{offset, Control, Role};
    ///
    /// let c = Control::new();
    /// c.init(Role::Reader, 64).unwrap();
    /// let block = (&c as *const Control).cast::<u8>();
    /// // SAFETY: the offset is that of a u32 inside the block, and nothing
    /// // writes the block while it is read.
    /// let role = unsafe { block.add(offset::ROLE).cast::<u32>().read() };
    /// assert_eq!(role, Role::Reader as u32);
    /// ```
    pub const ROLE: usize = 12;
    /// `capacity`: u64.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe_ring::layout::{offset, Control, Role};
    ///
    /// let c = Control::new();
    /// c.init(Role::Writer, 64).unwrap();
    /// let block = (&c as *const Control).cast::<u8>();
    /// // SAFETY: the offset is that of a u64 inside the block, and nothing
    /// // writes the block while it is read.
    /// let cap = unsafe { block.add(offset::CAPACITY).cast::<u64>().read() };
    /// assert_eq!(cap, 64);
    /// ```
    pub const CAPACITY: usize = 16;
    /// `flags`: u32.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe_ring::layout::offset;
    /// assert!(offset::FLAGS + 4 <= offset::INDEX); // in the header's line
    /// ```
    pub const FLAGS: usize = 24;
    /// `index`: u64, on its own 128-byte line.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe_ring::layout::offset;
    /// assert_eq!(offset::INDEX % 128, 0); // its own line
    /// ```
    pub const INDEX: usize = 128;
    /// `inline_at`: u64, the inline copy's position (writer's block).
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe_ring::layout::offset;
    /// assert_eq!(offset::INLINE_AT, offset::INDEX + 8);
    /// ```
    pub const INLINE_AT: usize = 136;
    /// `inline_len`: u64, the inline copy's length (writer's block).
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe_ring::layout::offset;
    /// assert_eq!(offset::INLINE_LEN, offset::INLINE_AT + 8);
    /// ```
    pub const INLINE_LEN: usize = 144;
    /// `inline`: the inline copy's bytes, [`crate::inline::INLINE_MAX`]
    /// of them (writer's block).
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe_ring::{inline::INLINE_MAX, layout::offset};
    /// assert_eq!(offset::INLINE + INLINE_MAX, offset::INDEX + 64);
    /// ```
    pub const INLINE: usize = 152;
    /// `parked`: u64, on its own 128-byte line.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe_ring::layout::offset;
    /// assert_eq!(offset::PARKED % 128, 0); // its own line
    /// ```
    pub const PARKED: usize = 256;
    /// `cpu`: u32, on its own 128-byte line.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe_ring::layout::{offset, Control, Role};
    ///
    /// let c = Control::new();
    /// c.init(Role::Writer, 64).unwrap();
    /// let block = (&c as *const Control).cast::<u8>();
    /// // SAFETY: the offset is that of a u32 inside the block, and nothing
    /// // writes the block while it is read.
    /// let cpu = unsafe { block.add(offset::CPU).cast::<u32>().read() };
    /// assert_eq!(cpu, u32::MAX); // unknown
    /// ```
    pub const CPU: usize = 384;
    /// `pending`: u32, copies of the end not yet claimed.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe_ring::layout::offset;
    /// assert_eq!(offset::PENDING % 128, 0); // its own line
    /// ```
    pub const PENDING: usize = 512;
    /// `holders`: [`HOLDER_SLOTS`](super::HOLDER_SLOTS) u32 process ids.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe_ring::layout::offset;
    /// assert_eq!(offset::HOLDERS, offset::PENDING + 4);
    /// ```
    pub const HOLDERS: usize = 516;
    /// `lock`: 64 bytes for a process-shared mutex.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe_ring::layout::offset;
    /// assert_eq!(offset::TURN_LOCK % 64, 0);
    /// ```
    pub const TURN_LOCK: usize = 576;
    /// Size of the whole control block.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe_ring::layout::{offset, Control, DATA_OFFSET};
    /// assert_eq!(std::mem::size_of::<Control>(), offset::END);
    /// assert!(offset::END <= DATA_OFFSET);
    /// ```
    pub const END: usize = 640;
}

#[cfg(not(loom))]
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<Control>() == offset::END);
    assert!(offset_of!(Control, header) == 0);
    assert!(offset_of!(Header, magic) == offset::MAGIC);
    assert!(offset_of!(Header, version) == offset::VERSION);
    assert!(offset_of!(Header, role) == offset::ROLE);
    assert!(offset_of!(Header, capacity) == offset::CAPACITY);
    assert!(offset_of!(Header, flags) == offset::FLAGS);
    assert!(offset_of!(Control, index) == offset::INDEX);
    assert!(offset::INDEX + offset_of!(IndexLine, inline) == offset::INLINE_AT);
    assert!(offset::INLINE_AT + Inline::LEN_OFFSET == offset::INLINE_LEN);
    assert!(offset::INLINE_AT + Inline::WORDS_OFFSET == offset::INLINE);
    // The index and the whole copy share one 64-byte line.
    assert!(offset::INLINE + crate::inline::INLINE_MAX == offset::INDEX + 64);
    assert!(offset_of!(Control, parked) == offset::PARKED);
    assert!(offset_of!(Control, cpu) == offset::CPU);
    assert!(offset_of!(Control, turns) == offset::PENDING);
    assert!(offset::PENDING + offset_of!(Turns, holders) == offset::HOLDERS);
    assert!(offset::PENDING + offset_of!(Turns, lock) == offset::TURN_LOCK);
    assert!(size_of::<Control>() <= DATA_OFFSET);
};

impl Default for Control {
    fn default() -> Self {
        Self::new()
    }
}

impl Control {
    /// A zeroed control block (what a fresh memfd holds), for rings in
    /// ordinary memory.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe_ring::layout::{Control, Role};
    /// use shmpipe_ring::ProtocolError;
    ///
    /// let c = Control::new(); // all zero: no header yet
    /// assert_eq!(c.check(Role::Writer), Err(ProtocolError::BadMagic(0)));
    /// ```
    pub fn new() -> Self {
        Control {
            header: CachePadded(Header {
                magic: AtomicU64::new(0),
                version: AtomicU32::new(0),
                role: AtomicU32::new(0),
                capacity: AtomicU64::new(0),
                flags: AtomicU32::new(0),
            }),
            index: CachePadded(IndexLine {
                pos: AtomicU64::new(0),
                inline: Inline::new(),
            }),
            parked: CachePadded(AtomicU64::new(0)),
            cpu: CachePadded(AtomicU32::new(u32::MAX)),
            turns: CachePadded(Turns {
                pending: AtomicU32::new(0),
                holders: std::array::from_fn(|_| AtomicU32::new(0)),
                lock: std::array::from_fn(|_| AtomicU64::new(0)),
            }),
        }
    }

    /// Writes the header. Called by the owner before the block is shared;
    /// sharing (fd passing, fork, thread spawn) orders these stores before
    /// the peer's loads, so Relaxed is enough.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe_ring::layout::{Control, Role};
    /// use shmpipe_ring::ProtocolError;
    ///
    /// let c = Control::new();
    /// assert_eq!(c.init(Role::Writer, 100), Err(ProtocolError::BadCapacity(100)));
    /// c.init(Role::Writer, 128).unwrap();
    /// assert_eq!(c.check(Role::Writer), Ok(128));
    /// ```
    pub fn init(&self, role: Role, capacity: u64) -> Result<(), ProtocolError> {
        check_capacity(capacity)?;
        let h = &self.header.0;
        h.magic.store(MAGIC, Ordering::Relaxed);
        h.version.store(VERSION, Ordering::Relaxed);
        h.role.store(role as u32, Ordering::Relaxed);
        h.capacity.store(capacity, Ordering::Relaxed);
        h.flags.store(0, Ordering::Relaxed);
        self.index.0.pos.store(0, Ordering::Relaxed);
        self.index.0.inline.clear();
        self.parked.0.store(0, Ordering::Relaxed);
        self.cpu.0.store(u32::MAX, Ordering::Relaxed);
        let t = &self.turns.0;
        t.pending.store(0, Ordering::Relaxed);
        t.holders.iter().for_each(|h| h.store(0, Ordering::Relaxed));
        t.lock.iter().for_each(|w| w.store(0, Ordering::Relaxed));
        Ok(())
    }

    /// Sets the capacity a reader's block declares, to the one its writer
    /// chose: across a connection the reader's block is made before the
    /// writer's capacity is known. The owner calls it before attaching.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe_ring::layout::{Control, Role};
    ///
    /// let c = Control::new();
    /// c.init(Role::Reader, 64).unwrap();
    /// c.set_capacity(4096).unwrap(); // the writer chose 4096
    /// assert_eq!(c.check(Role::Reader), Ok(4096));
    /// ```
    pub fn set_capacity(&self, capacity: u64) -> Result<(), ProtocolError> {
        check_capacity(capacity)?;
        self.header.0.capacity.store(capacity, Ordering::Relaxed);
        Ok(())
    }

    /// Checks the header against what this side expects and returns the
    /// capacity it declares. Each field is loaded once.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe_ring::layout::{Control, Role};
    /// use shmpipe_ring::ProtocolError;
    ///
    /// let c = Control::new();
    /// c.init(Role::Writer, 64).unwrap();
    /// assert_eq!(c.check(Role::Writer), Ok(64));
    /// assert_eq!(
    ///     c.check(Role::Reader),
    ///     Err(ProtocolError::BadRole(Role::Writer as u32))
    /// );
    /// ```
    pub fn check(&self, role: Role) -> Result<u64, ProtocolError> {
        let h = &self.header.0;
        let magic = h.magic.load(Ordering::Relaxed);
        if magic != MAGIC {
            return Err(ProtocolError::BadMagic(magic));
        }
        let version = h.version.load(Ordering::Relaxed);
        if version != VERSION {
            return Err(ProtocolError::BadVersion(version));
        }
        let r = h.role.load(Ordering::Relaxed);
        if r != role as u32 {
            return Err(ProtocolError::BadRole(r));
        }
        let capacity = h.capacity.load(Ordering::Relaxed);
        check_capacity(capacity)?;
        Ok(capacity)
    }
}

impl Control {
    /// Sets or clears [`LIGHT_FENCES`] in our own header.
    pub(crate) fn set_light_fences(&self, on: bool) {
        // SYNC: Release pairs with the Acquire in `light_fences`. An end
        // handed from a light-fenced owner to a fully fenced one: the new
        // owner stores the flag after the old owner's last index store
        // (the hand-over orders them), so a parker that reads the new flag
        // and skips the membarrier still sees that index store.
        self.header
            .0
            .flags
            .store(if on { LIGHT_FENCES } else { 0 }, Ordering::Release);
    }

    /// Whether the owner says it publishes with light fences. Any value is
    /// harmless: a peer that lies only risks its own wake-ups.
    pub(crate) fn light_fences(&self) -> bool {
        // SYNC: Acquire pairs with the Release in `set_light_fences`.
        self.header.0.flags.load(Ordering::Acquire) & LIGHT_FENCES != 0
    }
}

/// A capacity is a power of two between [`MIN_CAPACITY`] and [`MAX_CAPACITY`].
///
/// # Examples
///
/// ```
/// use shmpipe_ring::layout::check_capacity;
/// use shmpipe_ring::ProtocolError;
///
/// assert_eq!(check_capacity(4096), Ok(()));
/// assert_eq!(check_capacity(100), Err(ProtocolError::BadCapacity(100)));
/// ```
pub fn check_capacity(capacity: u64) -> Result<(), ProtocolError> {
    if capacity.is_power_of_two() && (MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity) {
        Ok(())
    } else {
        Err(ProtocolError::BadCapacity(capacity))
    }
}

/// Size of the writer's region for a ring of `capacity` bytes.
///
/// # Examples
///
/// ```
/// use shmpipe_ring::layout::{writer_region_len, DATA_OFFSET};
/// assert_eq!(writer_region_len(4096), DATA_OFFSET + 4096);
/// ```
pub fn writer_region_len(capacity: u64) -> usize {
    DATA_OFFSET + capacity as usize
}

/// Size of the reader's region.
///
/// # Examples
///
/// ```
/// use shmpipe_ring::layout::{offset, READER_REGION_LEN};
/// assert!(offset::END <= READER_REGION_LEN); // one page holds the block
/// ```
pub const READER_REGION_LEN: usize = DATA_OFFSET;
