//! Building ring ends on shared memory: creating the two regions of a pipe,
//! mapping them, and attaching a `Producer` or `Consumer` to them, with
//! every check a region from another process needs.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;

use rustix::fs::SealFlags;
use shmpipe_ring::data::Data;
use shmpipe_ring::layout::{self, Control, Role, DATA_OFFSET, READER_REGION_LEN};
use shmpipe_ring::{Consumer, Producer};

use crate::error;
use crate::sys::{self, Mapping};

/// One side's own region, created and mapped writable by its owner.
#[derive(Debug)]
pub(crate) struct OwnRegion {
    pub(crate) fd: OwnedFd,
    pub(crate) map: Mapping,
}

impl OwnRegion {
    /// Creates and initialises the region for `role` of a ring of
    /// `capacity` bytes, then seals it against resizing and, if
    /// `exclusive`, against any new writable mapping (`F_SEAL_FUTURE_WRITE`):
    /// from then on only this mapping can write it, and a peer can map it
    /// read-only at most.
    pub(crate) fn create(role: Role, capacity: usize, exclusive: bool) -> io::Result<OwnRegion> {
        if layout::check_capacity(capacity as u64).is_err() {
            return Err(error::bad_capacity(capacity));
        }
        let (name, len) = match role {
            Role::Writer => ("shmpipe-data", layout::writer_region_len(capacity as u64)),
            Role::Reader => ("shmpipe-head", READER_REGION_LEN),
        };
        // The file is longer than the ring by its mark page, which only a
        // holder maps (see `sys::maps`).
        let len = sys::file_len(len);
        let fd = sys::memfd(name, len)?;
        let map = Mapping::new(fd.as_fd(), len, true)?;
        control(&map)
            .init(role, capacity as u64)
            .map_err(error::protocol)?;
        crate::shared::init_lock(control(&map).lock_area())?;
        let seals = if exclusive {
            sys::SIZE_SEALS | SealFlags::FUTURE_WRITE
        } else {
            sys::SIZE_SEALS
        };
        sys::seal(fd.as_fd(), seals)?;
        Ok(OwnRegion { fd, map })
    }

    /// Maps an existing region of ours (handed down by a parent) writable.
    /// Makes our reader region declare the capacity the peer chose for
    /// the ring it writes (across a connection each side picks the
    /// capacity of the pipe it writes, and we made this region before we
    /// knew it).
    /// A peer's ring larger than `max` bytes is refused before it is
    /// mapped: it would cost us that much address space.
    pub(crate) fn follow_writer(&self, peer_writer: BorrowedFd<'_>, max: u64) -> io::Result<()> {
        let head = map_peer(peer_writer, READER_REGION_LEN)?;
        let capacity = control(&head)
            .check(Role::Writer)
            .map_err(error::protocol)?;
        if capacity > max {
            return Err(error::invalid_data(format!(
                "the peer's ring of {capacity} bytes exceeds the {max} it announced \
                 or this side's limit (Options::max_peer_capacity)"
            )));
        }
        control(&self.map)
            .set_capacity(capacity)
            .map_err(error::protocol)
    }

    /// The region must be as long as `OwnRegion::create` makes it for its
    /// ring, and is mapped whole: ring and mark page (see `sys::maps`).
    pub(crate) fn open(fd: OwnedFd, role: Role) -> io::Result<OwnRegion> {
        let len = sys::check_sealed(fd.as_fd())?;
        if sys::seals(fd.as_fd())?.contains(SealFlags::FUTURE_WRITE) {
            return Err(error::unsupported(
                "this end's memory is sealed for its creating process only",
            ));
        }
        // Reading a control block past the end of the file would SIGBUS.
        if len < READER_REGION_LEN {
            return Err(error::invalid_data(
                "region is shorter than a control block",
            ));
        }
        let head = Mapping::new(fd.as_fd(), READER_REGION_LEN, true)?;
        let capacity = control(&head).check(role).map_err(error::protocol)?;
        let needed = match role {
            Role::Writer => layout::writer_region_len(capacity),
            Role::Reader => READER_REGION_LEN,
        };
        if len != sys::file_len(needed) {
            return Err(error::invalid_data(format!(
                "region is {len} bytes, its ring's and mark page's {}",
                sys::file_len(needed)
            )));
        }
        let map = Mapping::new(fd.as_fd(), len, true)?;
        drop(head);
        Ok(OwnRegion { fd, map })
    }
}

/// The control block at the start of a mapping.
fn control(map: &Mapping) -> &Control {
    // SAFETY: every mapping we make is at least one page (>= the control
    // block), page-aligned (>= its 128-byte alignment), and Control is all
    // atomics, valid for any bit pattern; the reference lives no longer
    // than the mapping.
    unsafe { map.ptr().cast::<Control>().as_ref() }
}

/// Maps the first `min_len` bytes of the peer's region read-only after
/// checking it is a memfd sealed against resizing and at least that long.
/// Only what the ring uses is mapped, so a peer cannot make us map (and
/// spend address space on) a region of any size it likes.
fn map_peer(fd: BorrowedFd<'_>, min_len: usize) -> io::Result<Mapping> {
    let len = sys::check_sealed(fd)?;
    if len < min_len {
        return Err(error::invalid_data(format!(
            "peer's region is {len} bytes, expected {min_len}"
        )));
    }
    Mapping::new(fd, min_len, false)
}

/// Makes the reader's view of the writer's region (the ring's part, not
/// the mark page) writable where the writer's region lets anyone who holds
/// it map it so: a pipe made in this process tree, not sealed
/// `F_SEAL_FUTURE_WRITE`. The reader never writes it; the permission alone
/// makes each line it fetches from the writer's cache cheaper (AMD Zen 4
/// guest: 20-40 ns a line; the tail it polls and the data it copies out
/// are both such lines, see docs/roundtrip.md). A connection's region
/// forbids it, which is its seal's point: it stays read-only. Without
/// the mark page this view is no holder's (`sys::maps_writable`). Any
/// failure leaves the view read-only: slower, never wrong.
#[cold]
fn open_peer_view(peer_map: &Mapping, peer: BorrowedFd<'_>) {
    let sealed = SealFlags::FUTURE_WRITE | SealFlags::WRITE;
    let open = sys::seals(peer).is_ok_and(|s| !s.intersects(sealed));
    let page = rustix::param::page_size();
    if open && page == DATA_OFFSET {
        let _ = peer_map.make_writable(peer_map.len() / page * page);
    }
}

/// Attaches the writing end: our region is the writer's, the peer's the
/// reader's.
pub(crate) fn producer(own: OwnRegion, peer: BorrowedFd<'_>) -> io::Result<(Producer, OwnedFd)> {
    let capacity = control(&own.map)
        .check(Role::Writer)
        .map_err(error::protocol)?;
    if own.map.len() < layout::writer_region_len(capacity) {
        return Err(error::invalid_data(
            "writer region shorter than its capacity",
        ));
    }
    let peer_map = map_peer(peer, READER_REGION_LEN)?;
    let OwnRegion { fd, map: own_map } = own;
    let own_ctl = own_map.ptr().cast::<Control>();
    let peer_ctl = peer_map.ptr().cast::<Control>();
    // SAFETY: the data area is `capacity` bytes at DATA_OFFSET inside our
    // writable mapping (length checked above), kept alive by the Arc below.
    let data = unsafe { Data::new(own_map.ptr().as_ptr().add(DATA_OFFSET), capacity as usize) };
    let keep = Arc::new((own_map, peer_map));
    // SAFETY: both control blocks and the data live in mappings owned by
    // `keep`; this is the only Producer built on this mapping.
    let mut producer =
        unsafe { Producer::new(own_ctl, peer_ctl, data, keep) }.map_err(error::protocol)?;
    producer.use_light_fences(sys::light_fences());
    crate::shared::adopt(producer.gate(), fd.as_fd());
    Ok((producer, fd))
}

/// Attaches the reading end: our region is the reader's, the peer's the
/// writer's (mapped read-only).
pub(crate) fn consumer(own: OwnRegion, peer: BorrowedFd<'_>) -> io::Result<(Consumer, OwnedFd)> {
    let capacity = control(&own.map)
        .check(Role::Reader)
        .map_err(error::protocol)?;
    let peer_map = map_peer(peer, layout::writer_region_len(capacity))?;
    open_peer_view(&peer_map, peer);
    let OwnRegion { fd, map: own_map } = own;
    let own_ctl = own_map.ptr().cast::<Control>();
    let peer_ctl: NonNull<Control> = peer_map.ptr().cast();
    // SAFETY: the peer's region is at least writer_region_len(capacity)
    // bytes (checked by map_peer) and sealed against shrinking, so the
    // data area is readable for its whole length while `keep` lives. The
    // consumer never writes it (the mapping is read-only anyway).
    let data = unsafe { Data::new(peer_map.ptr().as_ptr().add(DATA_OFFSET), capacity as usize) };
    let keep = Arc::new((own_map, peer_map));
    // SAFETY: as in `producer`.
    let mut consumer =
        unsafe { Consumer::new(own_ctl, peer_ctl, data, keep) }.map_err(error::protocol)?;
    consumer.use_light_fences(sys::light_fences());
    crate::shared::adopt(consumer.gate(), fd.as_fd());
    Ok((consumer, fd))
}
