//! The lending API: a connection's two ends lend their hot state to a
//! fast path in a layer above (the RPC client's stubs), which then writes
//! requests and reads replies in place with no call into the ends.
//!
//! [`Lanes`] hold what is lent: positions, bounds and pointers into the
//! rings' memory, with a [`Keepalive`](shmpipe_ring::Keepalive) of each
//! ring, so the pointers stay valid whatever becomes of the ends. Every
//! publish goes through the ring crate ([`shmpipe_ring::publish_lent`]),
//! the one place the protocol is written; this module only keeps the
//! bookkeeping of what was lent and tells the ends how far the fast path
//! went. Not a user-facing API: `#[doc(hidden)]` at the crate root.

use std::cell::Cell;
use std::io;
use std::marker::PhantomData;
use std::sync::atomic::AtomicU64;

use shmpipe_ring::inline::INLINE_MAX;
use shmpipe_ring::layout::PARKED;
use shmpipe_ring::Keepalive;

use crate::wait::Ready;
use crate::{error, Reader, Writer};

/// The size of a frame's header on the lanes: what [`Lanes::wait_reply`]
/// hands back for "read this reply the general way" is a header of zeros.
pub const HEADER: usize = 8;

/// A connection's hot state, lent to a fast path while the ends are not
/// otherwise used (see the module docs). Positions are the rings'
/// free-running ones.
///
/// # Examples
///
/// ```
/// let lanes = shmpipe::lend::Lanes::default(); // not lent: nothing fits
/// assert!(lanes.reserve::<16>().is_none());
/// ```
pub struct Lanes {
    /// The request ring's next position to write.
    q_pos: Cell<u64>,
    /// How far the fast path may write: the reader's head (as last seen)
    /// plus the capacity, or the end of this lap of the ring, whichever
    /// is first. `q_pos` when not lent.
    q_end: Cell<u64>,
    /// The data's address minus this lap's first position: position `p`
    /// of this lap is at `q_base + p`.
    q_base: Cell<*mut u8>,
    /// Our tail in shared memory.
    q_index: Cell<*const AtomicU64>,
    /// The server's parked word on the request ring.
    q_parked: Cell<*const AtomicU64>,
    /// Publish with a full fence (not the ring's light fences).
    heavy: Cell<bool>,
    /// How far the producer knows `q_pos` went: it is told only when the
    /// lanes are taken back or the server must be woken, not at every
    /// call (see `wait_reply`).
    q_told: Cell<u64>,
    /// Keeps the request ring mapped while its pointers are held.
    q_keep: Cell<Option<Keepalive>>,
    /// The reply ring's next position to read.
    r_pos: Cell<u64>,
    /// How far replies may be read in place: the writer's tail (as last
    /// seen), the end of this lap, or a quarter ring past the last
    /// published head, whichever is first.
    r_end: Cell<u64>,
    /// As `q_base`, for the reply ring.
    r_base: Cell<*const u8>,
    /// The reply ring's data.
    r_data: Cell<*const u8>,
    /// How far the consumer knows `r_pos` went.
    r_told: Cell<u64>,
    /// The head last published.
    r_published: Cell<u64>,
    /// Keeps the reply ring mapped while its pointers are held.
    r_keep: Cell<Option<Keepalive>>,
    /// The last small reply waited for, copied out of the ring (see
    /// `wait_reply`).
    reply: Cell<[u8; INLINE_MAX]>,
}

impl std::fmt::Debug for Lanes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lanes")
            .field("q_pos", &self.q_pos.get())
            .field("q_end", &self.q_end.get())
            .field("r_pos", &self.r_pos.get())
            .field("r_end", &self.r_end.get())
            .finish_non_exhaustive()
    }
}

// SAFETY: the pointers point into the rings' shared mappings, kept alive
// by `q_keep` and `r_keep` while they are used; nothing is tied to a thread.
unsafe impl Send for Lanes {}

impl Default for Lanes {
    fn default() -> Self {
        Lanes {
            q_pos: Cell::new(0),
            q_end: Cell::new(0),
            q_base: Cell::new(std::ptr::null_mut()),
            q_index: Cell::new(std::ptr::null()),
            q_parked: Cell::new(std::ptr::null()),
            heavy: Cell::new(true),
            q_told: Cell::new(0),
            q_keep: Cell::new(None),
            r_pos: Cell::new(0),
            r_end: Cell::new(0),
            r_base: Cell::new(std::ptr::null()),
            r_data: Cell::new(std::ptr::null()),
            r_told: Cell::new(0),
            r_published: Cell::new(0),
            r_keep: Cell::new(None),
            reply: Cell::new([0; INLINE_MAX]),
        }
    }
}

/// Eight zero bytes: not a frame header (no tag), so no stub takes them
/// for its reply.
static NO_REPLY: [u8; HEADER] = [0; HEADER];

impl Lanes {
    /// Lends both ends' state: `w` writes requests, `r` reads replies.
    pub fn lend(&self, r: &mut Reader, w: &mut Writer) {
        self.lend_writer(w, true);
        self.lend_reader(r);
    }

    /// Takes the state back: the ends learn how far the fast path went.
    pub fn revoke(&self, r: &mut Reader, w: &mut Writer) {
        self.revoke_writer(w);
        self.revoke_reader(r);
    }

    /// The peer sleeps on the request ring: the writer publishes the same
    /// tail again, which wakes it (once per parking), and lends again.
    pub fn wake_peer(&self, w: &mut Writer) {
        self.revoke_writer(w);
        self.lend_writer(w, false);
    }

    fn lend_writer(&self, w: &mut Writer, look: bool) {
        w.end.publish();
        if look {
            // A fresh look at the reader's head: the fast path never makes
            // one. (Not at every wait for a reply: the head's line is the
            // server's, and a look costs a miss while the room is ample.)
            let _ = w.end.ring.free(w.end.ring.capacity());
        }
        let Some(h) = w.end.ring.hot() else {
            self.q_end.set(self.q_pos.get());
            return;
        };
        // The keepalive first: the pointers below are valid while it lives.
        self.q_keep.set(Some(w.end.ring.keepalive()));
        let lap = h.pos & !h.mask;
        self.q_pos.set(h.pos);
        self.q_told.set(h.pos);
        self.q_end.set(h.limit.min(lap.wrapping_add(h.mask + 1)));
        self.q_base.set(h.data.wrapping_sub(lap as usize));
        self.q_index.set(h.index);
        self.q_parked.set(h.peer_parked);
        self.heavy.set(!h.light);
    }

    fn revoke_writer(&self, w: &mut Writer) {
        let n = self.q_pos.get().wrapping_sub(self.q_told.get());
        if n > 0 {
            w.end.ring.commit(n as usize);
            self.q_told.set(self.q_pos.get());
        }
        w.end.publish();
        self.q_end.set(self.q_pos.get());
    }

    fn lend_reader(&self, r: &mut Reader) {
        r.end.publish();
        let Some(h) = r.end.ring.hot() else {
            self.r_end.set(self.r_pos.get());
            return;
        };
        self.r_keep.set(Some(r.end.ring.keepalive()));
        self.r_pos.set(h.pos);
        self.r_told.set(h.pos);
        self.r_published.set(h.pos);
        self.r_data.set(h.data.cast_const());
        self.set_r_end(h.pos, h.limit, h.mask + 1);
    }

    /// `r_end` and `r_base` for reading from `pos` with the writer's tail
    /// at `tail`.
    fn set_r_end(&self, pos: u64, tail: u64, cap: u64) {
        let lap = pos & !(cap - 1);
        let end = tail
            .min(lap.wrapping_add(cap))
            .min(self.r_published.get().wrapping_add(cap / 4));
        self.r_end.set(end);
        self.r_base
            .set(self.r_data.get().wrapping_sub(lap as usize));
    }

    fn revoke_reader(&self, r: &mut Reader) {
        self.catch_up_reader(r);
        r.end.publish();
        self.r_published.set(self.r_pos.get());
        self.r_end.set(self.r_pos.get());
    }

    /// Tells the reader how far the fast path read, without publishing.
    fn catch_up_reader(&self, r: &mut Reader) {
        let n = self.r_pos.get().wrapping_sub(self.r_told.get());
        if n > 0 {
            r.end.ring.consume(n as usize);
            self.r_told.set(self.r_pos.get());
        }
    }

    /// Room for a request of `Q` bytes in place, if it lies inside this
    /// lap of the request ring and within the room last seen (a lap's
    /// last frame, a full ring or lanes not lent: `None`).
    #[inline(always)]
    pub fn reserve<const Q: usize>(&self) -> Option<Room<'_, Q>> {
        let pos = self.q_pos.get();
        let end = pos.wrapping_add(Q as u64);
        // (Positions do not wrap around u64. No frame is shorter than its
        // header: the check folds away.)
        if end > self.q_end.get() || Q < HEADER {
            return None;
        }
        // The room from `pos` to `end` lies inside this lap of the ring
        // and below the reader's head plus the capacity: ours to write
        // until published.
        Some(Room {
            ptr: self.q_base.get().wrapping_add(pos as usize),
            end,
            _room: PhantomData,
        })
    }

    /// Publishes the request written in the room [`reserve`](Self::reserve)
    /// gave; `true` if the peer sleeps and [`wake_peer`](Self::wake_peer)
    /// must be called.
    #[inline(always)]
    pub fn publish<const Q: usize>(&self, room: Room<'_, Q>) -> bool {
        let end = room.end;
        self.q_pos.set(end);
        // SAFETY: a room was reserved, so the writer was lent: `q_index`
        // and `q_parked` are its Hot's, kept mapped by `q_keep`.
        let parked = unsafe {
            shmpipe_ring::publish_lent(self.q_index.get(), self.q_parked.get(), end, || {
                self.heavy.get()
            })
        };
        parked & PARKED != 0
    }

    /// The first `HEADER + R` bytes of the next reply, if they are in view
    /// now (no wait, no call).
    #[inline(always)]
    pub fn reply_in_view<const R: usize>(&self) -> Option<ReplyAt<'_, R>> {
        let n = (HEADER + R) as u64;
        let pos = self.r_pos.get();
        if self.r_end.get().wrapping_sub(pos) >= n {
            return Some(ReplyAt {
                ptr: self.r_base.get().wrapping_add(pos as usize),
                _view: PhantomData,
            });
        }
        None
    }

    /// Waits until the reply's first `HEADER + R` bytes can be read and
    /// returns where they are: in place, or copied out if small. A reply
    /// the general path must read (a large one across the ring's end, one
    /// arrived in part, the end of the stream, lanes not lent) gives a
    /// header of zeros, which no reply has; an error the wait met is
    /// returned for the general path to report.
    ///
    /// `r` and `w` are the ends lent to these lanes.
    pub fn wait_reply<const R: usize>(
        &self,
        r: &mut Reader,
        w: &mut Writer,
    ) -> io::Result<ReplyAt<'_, R>> {
        let n = (HEADER + R) as u64;
        if self.r_data.get().is_null() {
            return Ok(ReplyAt::default());
        }
        let pos = self.r_pos.get();
        let cap = r.end.ring.capacity() as u64;
        self.catch_up_reader(r);
        // The replies read are given back a quarter ring at a time: the
        // server then always finds room for a small reply, so the client
        // may sleep without publishing its head.
        if pos.wrapping_sub(self.r_published.get()) >= cap / 4 {
            r.end.publish();
            self.r_published.set(pos);
        }
        if n > cap / 4 {
            return Ok(ReplyAt::default());
        }
        // The send is noted as the writer's first since this thread's last
        // wait (the request's bytes are out already, published by the
        // lane): the wait then knows a reply is awaited, and our CPU hint
        // for the server is refreshed, which may switch the writer's fences
        // (see the ring's `peer_shares_cpu`); the lane takes up whichever
        // way it publishes now. The writer is not told how far the lane
        // went (it commits nothing, so this publish stores nothing: a store
        // would take back the tail's line the server is reading).
        w.end.publish();
        if let Some(h) = w.end.ring.hot() {
            self.heavy.set(!h.light);
        }
        loop {
            match r.end.ring.available(n as usize) {
                Ok(a) if a as u64 >= n => break,
                Ok(0) => {}
                // Part of a frame: the general path reads it.
                Ok(_) => return Ok(ReplyAt::default()),
                Err(e) => return Err(error::protocol(e)),
            }
            match r.end.side.wait(&mut r.end.ring, 1)? {
                Ready::Yes => {}
                // The general path reports the end of the stream.
                Ready::PeerGone => return Ok(ReplyAt::default()),
            }
        }
        let ring = &r.end.ring;
        let tail = pos.wrapping_add(ring.available_cached() as u64);
        self.set_r_end(pos, tail, cap);
        if n as usize <= INLINE_MAX {
            // A small reply is copied out as the ring's reads do: from the
            // copy the server kept beside its tail (see the ring's
            // `inline`), which came with the tail the wait saw, when it
            // holds the reply; read in place from the data instead, it
            // would cost a second cross-core transfer. Across the ring's
            // end too.
            let mut buf = [0u8; INLINE_MAX];
            ring.peek(0, &mut buf[..n as usize]);
            self.reply.set(buf);
            if self.r_end.get().wrapping_sub(pos) < n {
                // Read across the ring's end (or past the quarter ring):
                // nothing after it is in view, and `r_end` stays at or
                // past `r_pos` once the stub moves it on.
                self.r_end.set(pos.wrapping_add(n));
            }
            return Ok(ReplyAt {
                ptr: self.reply.as_ptr().cast_const().cast(),
                _view: PhantomData,
            });
        }
        if self.r_end.get().wrapping_sub(pos) < n {
            // Across the ring's end.
            return Ok(ReplyAt::default());
        }
        Ok(ReplyAt {
            ptr: self.r_base.get().wrapping_add(pos as usize),
            _view: PhantomData,
        })
    }

    /// The reply [`ReplyAt`] showed was read: moves past its `HEADER + R`
    /// bytes (given back to the server later, a quarter ring at a time).
    #[inline(always)]
    pub fn consume<const R: usize>(&self) {
        self.r_pos
            .set(self.r_pos.get().wrapping_add((HEADER + R) as u64));
    }

    /// Whether the writer publishes with full fences now (for tests).
    pub fn heavy(&self) -> bool {
        self.heavy.get()
    }
}

/// What a layer above does with a [`Writer`] on its general path, beside
/// the lanes.
impl Writer {
    /// Appends `bytes` to the ring without publishing them, waiting for
    /// room only if there is none now.
    #[doc(hidden)]
    #[inline(always)]
    pub fn push_or_write(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.end.ring.try_push(bytes) {
            return Ok(());
        }
        self.write_all_cold(bytes)
    }

    #[cold]
    #[inline(never)]
    fn write_all_cold(&mut self, bytes: &[u8]) -> io::Result<()> {
        io::Write::write_all(self, bytes)
    }

    /// Publishes what was written (and wakes the reader if it sleeps).
    #[doc(hidden)]
    #[inline]
    pub fn publish_now(&mut self) {
        self.end.publish();
    }

    /// Lets `fill` write up to `len` bytes in place if that much room is
    /// free and contiguous now (no wait), then commits and publishes the
    /// `n` bytes it says it wrote; hands `fill` back otherwise.
    #[doc(hidden)]
    #[inline]
    pub fn write_in_place<F: FnOnce(&mut [u8]) -> usize>(
        &mut self,
        len: usize,
        fill: F,
    ) -> Result<(), F> {
        let ring = &mut self.end.ring;
        if !matches!(ring.free(len), Ok(free) if free >= len) {
            return Err(fill);
        }
        let (room, _) = ring.slices_mut(0, len);
        if room.len() < len {
            return Err(fill);
        }
        let n = fill(&mut room[..len]).min(len);
        ring.commit(n);
        self.end.publish();
        Ok(())
    }
}

/// What a layer above does with a [`Reader`] on its general path, beside
/// the lanes.
impl Reader {
    /// Reads exactly `dst.len()` bytes, looking at the writer's index at
    /// once (a reply is usually on its way or there already), then
    /// waiting as a read does.
    #[doc(hidden)]
    #[inline(always)]
    pub fn take_exact(&mut self, dst: &mut [u8]) -> io::Result<()> {
        let ring = &mut self.end.ring;
        if ring.available_cached() >= dst.len() {
            ring.pop(dst);
            return Ok(());
        }
        self.take_exact_slow(dst)
    }

    #[cold]
    #[inline(never)]
    fn take_exact_slow(&mut self, dst: &mut [u8]) -> io::Result<()> {
        // A look at once: a wait would pause before its first look, which
        // suits streams of small items, not a reply awaited.
        let ring = &mut self.end.ring;
        if matches!(ring.available(dst.len()), Ok(n) if n >= dst.len()) {
            ring.pop(dst);
            return Ok(());
        }
        // Free what was read so far: the writer may be waiting for room
        // to write the rest of a large frame.
        self.end.publish();
        io::Read::read_exact(self, dst)
    }

    /// Publishes what was read, giving the writer its room.
    #[doc(hidden)]
    #[inline]
    pub fn publish_now(&mut self) {
        self.end.publish();
    }

    /// Refreshes the view of what the writer published, without waiting.
    #[doc(hidden)]
    #[inline]
    pub fn look_now(&mut self) {
        let _ = self.end.ring.available(1);
    }
}

/// `Q` bytes of room in the request ring, reserved by [`Lanes::reserve`]:
/// written through [`bytes`](Self::bytes), then given to
/// [`Lanes::publish`].
///
/// # Examples
///
/// ```
/// let lanes = shmpipe::lend::Lanes::default();
/// let room: Option<shmpipe::lend::Room<'_, 16>> = lanes.reserve(); // not lent: none
/// assert!(room.is_none());
/// ```
#[derive(Debug)]
pub struct Room<'a, const Q: usize> {
    ptr: *mut u8,
    /// The request ring's position after the room.
    end: u64,
    _room: PhantomData<&'a mut [u8; Q]>,
}

impl<const Q: usize> Room<'_, Q> {
    /// The room's bytes, to write the frame.
    #[inline(always)]
    pub fn bytes(&mut self) -> FrameBytes<'_, Q> {
        FrameBytes {
            ptr: self.ptr,
            _room: PhantomData,
        }
    }
}

/// `Q` bytes a frame is written into: a [`Room`]'s in the request ring,
/// or a buffer of the caller's ([`FrameBytes::new`]).
///
/// # Examples
///
/// ```
/// let mut buf = [0u8; 12];
/// let mut frame = shmpipe::lend::FrameBytes::new(&mut buf);
/// frame.put(8, &7u32.to_ne_bytes());
/// assert_eq!(&buf[8..], &7u32.to_ne_bytes());
/// ```
#[derive(Debug)]
pub struct FrameBytes<'a, const Q: usize> {
    ptr: *mut u8,
    _room: PhantomData<&'a mut [u8; Q]>,
}

impl<'a, const Q: usize> FrameBytes<'a, Q> {
    /// A frame written into `buf`.
    #[inline(always)]
    pub fn new(buf: &'a mut [u8; Q]) -> Self {
        FrameBytes {
            ptr: buf.as_mut_ptr(),
            _room: PhantomData,
        }
    }

    /// Writes `bytes` at offset `off`.
    ///
    /// # Panics
    ///
    /// If they do not fit in the frame (the stubs' offsets are constants:
    /// the check folds away).
    #[inline(always)]
    pub fn put(&mut self, off: usize, bytes: &[u8]) {
        assert!(
            off <= Q && bytes.len() <= Q - off,
            "shmpipe: FrameBytes::put past the frame"
        );
        // SAFETY: `ptr` points to `Q` writable bytes (a buffer we borrow,
        // or room reserved in the request ring, kept mapped by the lanes'
        // keepalive, that no one else writes until it is published), and
        // `off + len <= Q`; `bytes` is a separate value.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.add(off), bytes.len()) };
    }
}

/// Where the first `HEADER + R` bytes of a reply can be read (see
/// [`Lanes::reply_in_view`] and [`Lanes::wait_reply`]).
///
/// # Examples
///
/// ```
/// let lanes = shmpipe::lend::Lanes::default();
/// assert!(lanes.reply_in_view::<4>().is_none());
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ReplyAt<'a, const R: usize> {
    ptr: *const u8,
    _view: PhantomData<&'a [u8]>,
}

impl<const R: usize> Default for ReplyAt<'_, R> {
    /// A header of zeros: the general path reads this reply.
    fn default() -> Self {
        ReplyAt {
            ptr: NO_REPLY.as_ptr(),
            _view: PhantomData,
        }
    }
}

impl<const R: usize> ReplyAt<'_, R> {
    /// The reply's header, as the little-endian word it is.
    #[inline(always)]
    pub fn header(&self) -> u64 {
        // SAFETY: `ptr` points at `HEADER` readable bytes at least: in the
        // reply ring's data (kept mapped by the lanes' keepalive), in the
        // lanes' copy of a small reply (left alone until the next wait),
        // or at `NO_REPLY`; plain bytes, copied once (a hostile server may
        // scribble on the ring's: the caller checks what was copied).
        u64::from_le_bytes(unsafe { self.ptr.cast::<[u8; HEADER]>().read_unaligned() })
    }

    /// The `R` bytes after the header, if the header is `ok` (which is
    /// never zero: a header of zeros has no body).
    #[inline(always)]
    pub fn body_if(&self, ok: u64) -> Option<[u8; R]> {
        if self.header() != ok || ok == 0 {
            return None;
        }
        // SAFETY: as for `header`; a header that is not zero is one of a
        // reply's, whose view holds `HEADER + R` bytes.
        Some(unsafe { self.ptr.add(HEADER).cast::<[u8; R]>().read_unaligned() })
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::*;

    fn pin(cpu: usize) {
        let mut set = rustix::thread::CpuSet::new();
        set.set(cpu);
        rustix::thread::sched_setaffinity(None, &set).unwrap();
    }

    /// The lanes publish as the writer does now: with a full fence unless
    /// the writer publishes with light ones. The writer's fences follow
    /// where the server runs (`peer_shares_cpu`, switched at the CPU-hint
    /// exchange of the publish that notes a send, in `wait_reply`, while
    /// the lanes are lent); lanes still on light fences after the writer
    /// went full and cleared its header flag publish without the fence
    /// the server's park, skipping its membarrier, relies on: a lost
    /// wake-up (the ring's loom model `fence_switch_*` deadlocks on such a
    /// publish).
    #[test]
    fn lanes_fence_as_the_writer_does() {
        let allowed = rustix::thread::sched_getaffinity(None).unwrap();
        let cpus: Vec<usize> = (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| allowed.is_set(c))
            .take(2)
            .collect();
        if !crate::sys::light_fences() || cpus.len() < 2 {
            eprintln!("skipped: needs light fences (membarrier) and two CPUs");
            return;
        }
        let (ours, other) = (cpus[0], cpus[1]);
        let path =
            std::env::temp_dir().join(format!("shmpipe-lanes-fences-{}.sock", std::process::id()));
        let listener = crate::Listener::bind(&path).unwrap();
        // The server runs on another CPU and never sleeps, but its hint
        // says it runs on ours (a hint gone stale: it last waited here, then
        // moved). The client's publishes never wake it, so `wake_peer`
        // never re-lends the writer: only `wait_reply`'s note of the send
        // sees the hint.
        pin(ours);
        const CALLS: u32 = 50;
        const OK: u64 = 0x0004_0000_0000_0001;
        let (lent_tx, lent_rx) = std::sync::mpsc::channel::<()>();
        // Set when this test ends, however: the server stops spinning.
        struct Over(Arc<AtomicBool>);
        impl Drop for Over {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let over = Over(Default::default());
        let done = over.0.clone();
        let server = std::thread::spawn(move || {
            pin(other);
            let (mut r, mut w) = listener.accept().unwrap().split();
            if lent_rx.recv().is_err() {
                return;
            }
            r.end.ring.exchange_cpu_hint(ours as u32);
            let mut q = [0u8; HEADER + 4];
            for _ in 0..CALLS {
                while r.end.ring.available(q.len()).unwrap() < q.len() {
                    if done.load(Ordering::Relaxed) {
                        return;
                    }
                    std::hint::spin_loop();
                }
                r.end.ring.pop(&mut q);
                r.end.publish();
                let x = u32::from_ne_bytes(q[8..].try_into().unwrap());
                let mut reply = [0u8; HEADER + 4];
                reply[..8].copy_from_slice(&OK.to_le_bytes());
                reply[8..].copy_from_slice(&(x + 1).to_ne_bytes());
                w.write_all(&reply).unwrap();
                w.flush().unwrap();
            }
        });
        let (mut r, mut w) = crate::connect(&path).unwrap().split();
        let lanes = Lanes::default();
        lanes.lend(&mut r, &mut w);
        lent_tx.send(()).unwrap();
        let _ = std::fs::remove_file(&path);
        for x in 0..CALLS {
            let mut room = lanes.reserve::<12>().expect("room in a fresh ring");
            let mut frame = room.bytes();
            frame.put(0, &1u64.to_le_bytes());
            frame.put(8, &x.to_ne_bytes());
            if lanes.publish(room) {
                lanes.wake_peer(&mut w);
            }
            let at = match lanes.reply_in_view::<4>() {
                Some(at) => at,
                None => lanes.wait_reply::<4>(&mut r, &mut w).unwrap(),
            };
            let got = at
                .body_if(OK)
                .unwrap_or_else(|| panic!("call {x}: no reply"));
            lanes.consume::<4>();
            assert_eq!(u32::from_ne_bytes(got), x + 1);
            assert!(
                lanes.heavy() || w.end.ring.hot().is_some_and(|h| h.light),
                "call {x}: the lanes publish with light fences, the writer's header says full ones"
            );
        }
        server.join().unwrap();
        lanes.revoke(&mut r, &mut w);
        drop(over);
        let mut rest = Vec::new();
        drop(w);
        let _ = r.read_to_end(&mut rest);
    }
}
