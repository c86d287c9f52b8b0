//! Byte-stream pipe ends: [`Reader`] and [`Writer`], shaped like the ends of
//! `std::io::pipe()`.

use std::io::{self, Read, Write};

use shmpipe_ring::{Consumer, Producer};

use crate::end::end_settings;
use crate::error;
use crate::view::RingSlice;
use crate::wait::{End, Ready};

/// The most bytes one `read` or `write` copies before publishing them: a
/// quarter of the ring, at most 64 KiB. A large copy published only at its
/// end leaves the peer idle meanwhile: a write as large as the ring, read
/// by a reader with as large a buffer, made the two take turns (measured:
/// 8.8 GB/s instead of 17). Published in pieces, the peer starts on the
/// first while the next is copied.
#[inline]
fn publish_step(capacity: usize) -> usize {
    (capacity / 4).clamp(64, 64 * 1024)
}

/// The reading end of a byte-stream pipe.
///
/// `read` blocks until at least one byte is there, and returns 0 (EOF)
/// once every copy of the [`Writer`] is gone and the data is drained.
///
/// # Examples
///
/// ```
/// use std::io::{Read, Write};
/// let (mut r, mut w) = shmpipe::pipe()?;
/// w.write_all(b"hello")?;
/// drop(w);
/// let mut s = String::new();
/// r.read_to_string(&mut s)?;
/// assert_eq!(s, "hello");
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Reader {
    pub(crate) end: End<Consumer>,
}

/// The writing end of a byte-stream pipe.
///
/// Each `write` call publishes what it wrote at once. Once every copy of
/// the [`Reader`] is gone, writes fail with `ErrorKind::BrokenPipe` (no
/// SIGPIPE is raised): from the first write after the last copy was
/// dropped, and within 64 KiB of data (four of the ring's `WINDOW`s) after a
/// reader killed or ended without dropping its end (its first write if
/// the reader was asleep waiting for data).
///
/// # Examples
///
/// ```
/// use std::io::Write;
/// let (mut reader, mut writer) = shmpipe::pipe()?;
/// writer.write_all(b"published at once")?;
/// assert_eq!(reader.read_chunk()?.len(), 17);
/// drop(reader);
/// // Without a reader, the next write fails, as on a kernel pipe.
/// let err = writer.write(b"lost").unwrap_err();
/// assert_eq!(err.kind(), std::io::ErrorKind::BrokenPipe);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Writer {
    pub(crate) end: End<Producer>,
}

end_settings!(Reader, set_read_timeout, read_timeout);
end_settings!(Writer, set_write_timeout, write_timeout);

impl Reader {
    /// Waits for readable bytes and returns a view of them in place, or an
    /// empty chunk at EOF. Nothing is consumed until [`ReadChunk::consume`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::Write;
    /// let (mut r, mut w) = shmpipe::pipe()?;
    /// w.write_all(b"abc")?;
    /// let chunk = r.read_chunk()?;
    /// assert_eq!(chunk.bytes().to_vec(), b"abc");
    /// chunk.consume(2);
    /// assert_eq!(r.read_chunk()?.bytes().get(0), Some(b'c'));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn read_chunk(&mut self) -> io::Result<ReadChunk<'_>> {
        // An end other processes may hold keeps its turn until the chunk
        // is consumed or dropped (see `crate::shared`).
        if self.end.ring.needs_turn() {
            self.end.enter_turn()?;
        }
        let len = match self.end.side.wait(&mut self.end.ring, 1) {
            Ok(Ready::Yes) => self.end.ring.available_cached(),
            Ok(Ready::PeerGone) => 0,
            Err(e) => {
                self.end.leave_turn_if_in();
                return Err(e);
            }
        };
        Ok(ReadChunk { reader: self, len })
    }

    /// Bytes readable without waiting by what this end already knows of
    /// the writer's progress (the writer may have added more since). A
    /// caller that wants a fixed-size item can use the fast path of
    /// `read_exact` when this covers it, and `read` otherwise (the C API
    /// does so).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// let (mut r, mut w) = shmpipe::pipe()?;
    /// assert_eq!(r.buffered(), 0);
    /// w.write_all(b"abcd")?;
    /// let mut one = [0; 1];
    /// r.read_exact(&mut one)?; // looks at the writer's index
    /// assert_eq!(r.buffered(), 3);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[inline]
    pub fn buffered(&self) -> usize {
        self.end.ring.available_cached()
    }

    /// The ring's hot state, lent to the C API's inline read path (see
    /// [`shmpipe_ring::Hot`]); `None` if it cannot be lent now.
    ///
    /// # Examples
    ///
    /// ```
    /// let (r, _w) = shmpipe::pipe()?;
    /// assert_eq!(r.hot().map(|h| h.limit - h.pos), Some(0));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[doc(hidden)]
    pub fn hot(&self) -> Option<shmpipe_ring::Hot> {
        self.end.ring.hot()
    }

    fn consume(&mut self, n: usize) {
        self.end.ring.consume(n);
        self.end.publish();
    }
}

impl Read for Reader {
    /// Reads what the cached view holds, or waits for at least one byte.
    #[inline]
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let ring = &self.end.ring;
        let n = buf.len().min(ring.available_cached());
        if n > 0 && n <= publish_step(ring.capacity()) && self.end.try_take(&mut buf[..n]) {
            return Ok(n);
        }
        read_slow(self, buf)
    }

    /// As `Read::read_exact`, with a fast path when the ring already holds
    /// all of `buf` (one copy, one publish). Always inlined, as `write_all`.
    #[inline(always)]
    fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        // Only the cached view here: a reader that has caught up goes to
        // `wait`, which looks at the writer's tail once and then backs off,
        // instead of pulling the tail's line away from the writer twice.
        // One ring call that reads and publishes (`try_take`): one test
        // for an empty stash, none whether the head moved. A stream's
        // reader took 44 instructions an item with `pop` and `publish`
        // (callgrind; see the ring's `pop_publish`).
        if buf.len() <= publish_step(self.end.ring.capacity()) && self.end.try_take(buf) {
            return Ok(());
        }
        read_exact_slow(self, buf)
    }
}

/// `Read::read` when the cached view is empty or the copy is large.
#[cold]
#[inline(never)]
fn read_slow(r: &mut Reader, buf: &mut [u8]) -> io::Result<usize> {
    if buf.is_empty() {
        return Ok(0);
    }
    if r.end.ring.needs_turn() {
        return r.end.in_turn(|end| read_some(end, buf));
    }
    read_some(&mut r.end, buf)
}

/// Waits for at least one byte and takes what is there, up to `buf.len()`.
#[inline(always)]
fn read_some(end: &mut End<Consumer>, buf: &mut [u8]) -> io::Result<usize> {
    if end.side.wait(&mut end.ring, 1)? == Ready::PeerGone {
        return Ok(0);
    }
    Ok(take(end, buf))
}

/// Copies what the cached view holds, up to `buf.len()`, into `buf`,
/// publishing every `publish_step` bytes; returns how many. Always
/// inlined: in `read_exact_slow` it runs between a wait's return and the
/// reply, a round trip's critical path (a call there cost 10 instructions
/// of saved registers per read).
#[inline(always)]
fn take(end: &mut End<Consumer>, buf: &mut [u8]) -> usize {
    let there = end.ring.available_cached();
    let n = buf.len().min(there);
    if n <= publish_step(end.ring.capacity()) {
        end.ring.pop(&mut buf[..n]);
        end.publish();
        if there > n {
            // Bytes left beyond these: the next reads take the fast path.
            end.ring.refresh_gate();
        }
        return n;
    }
    take_in_steps(end, &mut buf[..n])
}

/// `take` of more than one publish step, out of line.
#[cold]
#[inline(never)]
fn take_in_steps(end: &mut End<Consumer>, buf: &mut [u8]) -> usize {
    let step = publish_step(end.ring.capacity());
    for piece in buf.chunks_mut(step) {
        end.ring.pop(piece);
        end.publish();
    }
    buf.len()
}

/// `Read::read_exact` when the cached view does not hold all of `buf`:
/// a reply taken at the first look if that is what it finds (see
/// `End::take_reply`), else `read_exact_wait`. Small, with no call on
/// the reply's way: its frame is what a round trip's read pays.
#[cold]
#[inline(never)]
fn read_exact_slow(r: &mut Reader, buf: &mut [u8]) -> io::Result<()> {
    if r.end.ring.needs_turn() {
        // The whole read in one turn: readers taking turns each get
        // whole items, as long as each reads whole items.
        return r.end.in_turn(|end| read_exact_in(end, buf));
    }
    if r.end.ring.available_cached() == 0 && r.end.take_reply(buf) {
        return Ok(());
    }
    read_exact_wait(r, buf)
}

/// `read_exact_slow` past its first look: takes what the cached view
/// holds, then waits for more, directly (the wait's return is on a round
/// trip's critical path: no detour through `read`).
#[inline(never)]
fn read_exact_wait(r: &mut Reader, buf: &mut [u8]) -> io::Result<()> {
    read_exact_in(&mut r.end, buf)
}

/// `read_exact_slow`'s loop, in a turn or not.
#[inline(always)]
fn read_exact_in(end: &mut End<Consumer>, mut buf: &mut [u8]) -> io::Result<()> {
    loop {
        if end.ring.available_cached() > 0 {
            let n = take(end, buf);
            buf = &mut buf[n..];
            if buf.is_empty() {
                return Ok(());
            }
        }
        match end.side.wait(&mut end.ring, 1) {
            Ok(Ready::Yes) => {}
            Ok(Ready::PeerGone) => return Err(error::eof()),
            Err(e) => read_error(e)?,
        }
    }
}

/// An error of a wait in `read_exact`: `Interrupted` is retried (as std's
/// `read_exact` does), anything else returned.
#[cold]
#[inline(never)]
fn read_error(e: io::Error) -> io::Result<()> {
    if e.kind() == io::ErrorKind::Interrupted {
        Ok(())
    } else {
        Err(e)
    }
}

/// Bytes waiting in a [`Reader`], seen in place (see [`Reader::read_chunk`]).
///
/// # Examples
///
/// ```
/// use std::io::Write;
/// let (mut r, mut w) = shmpipe::pipe()?;
/// w.write_all(b"xy")?;
/// let chunk: shmpipe::ReadChunk<'_> = r.read_chunk()?;
/// assert_eq!(chunk.len(), 2);
/// # chunk.consume(2);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct ReadChunk<'a> {
    reader: &'a mut Reader,
    len: usize,
}

impl ReadChunk<'_> {
    /// The bytes (empty at EOF).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::Write;
    /// let (mut r, mut w) = shmpipe::pipe()?;
    /// w.write_all(b"xyz")?;
    /// let chunk = r.read_chunk()?;
    /// assert_eq!(chunk.bytes().iter().collect::<Vec<u8>>(), b"xyz");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn bytes(&self) -> RingSlice<'_> {
        RingSlice::new(self.reader.end.ring.ranges(0, self.len))
    }

    /// Number of bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::Write;
    /// let (mut r, mut w) = shmpipe::pipe()?;
    /// w.write_all(b"xyz")?;
    /// assert_eq!(r.read_chunk()?.len(), 3);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the chunk is empty (EOF).
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut r, w) = shmpipe::pipe()?;
    /// drop(w);
    /// assert!(r.read_chunk()?.is_empty()); // EOF
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Consumes the first `n` bytes and tells the writer.
    ///
    /// # Panics
    ///
    /// If `n` exceeds the chunk's length.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// let (mut r, mut w) = shmpipe::pipe()?;
    /// w.write_all(b"header:body")?;
    /// r.read_chunk()?.consume(7); // skip "header:"
    /// let mut rest = [0u8; 4];
    /// r.read_exact(&mut rest)?;
    /// assert_eq!(&rest, b"body");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn consume(self, n: usize) {
        assert!(n <= self.len, "consume beyond the chunk");
        self.reader.consume(n);
    }
}

impl Drop for ReadChunk<'_> {
    /// Ends the turn `read_chunk` took, if it took one.
    fn drop(&mut self) {
        self.reader.end.leave_turn_if_in();
    }
}

impl Writer {
    /// Waits until `len` bytes are free and returns them to fill in place;
    /// [`WriteGrant::commit`] publishes what was filled.
    ///
    /// # Errors
    ///
    /// `InvalidInput` if `len` exceeds the capacity; `BrokenPipe` if the
    /// reader is gone; `WouldBlock` or `TimedOut` as configured.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::Read;
    /// let (mut r, mut w) = shmpipe::pipe()?;
    /// let mut grant = w.reserve(4)?;
    /// let (a, b) = grant.as_mut_slices();
    /// let n = a.len();
    /// a.copy_from_slice(&b"ping"[..n]);
    /// b.copy_from_slice(&b"ping"[n..]);
    /// grant.commit(4);
    /// let mut buf = [0; 4];
    /// r.read_exact(&mut buf)?;
    /// assert_eq!(&buf, b"ping");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn reserve(&mut self, len: usize) -> io::Result<WriteGrant<'_>> {
        if len > self.end.ring.capacity() {
            return Err(error::invalid_input("reserve: larger than the ring"));
        }
        // An end other processes may hold keeps its turn until the grant
        // is committed or dropped (see `crate::shared`).
        if self.end.ring.needs_turn() {
            self.end.enter_turn()?;
        }
        if let Err(e) = self.end.wait_free(len) {
            self.end.leave_turn_if_in();
            return Err(e);
        }
        Ok(WriteGrant { writer: self, len })
    }
}

impl Writer {
    /// The ring's hot state, lent to the C API's inline write path (see
    /// [`shmpipe_ring::Hot`]); `None` if it cannot be lent now.
    ///
    /// # Examples
    ///
    /// ```
    /// let (_r, w) = shmpipe::pipe()?;
    /// let hot = w.hot().expect("nothing unpublished");
    /// assert!(hot.limit > hot.pos); // room: a window of the free space
    /// assert!(hot.limit - hot.pos <= hot.mask + 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[doc(hidden)]
    pub fn hot(&self) -> Option<shmpipe_ring::Hot> {
        self.end.ring.hot()
    }

    /// After the C API's inline write published and saw the reader's
    /// parked word: wakes the reader, and `BrokenPipe` if it is gone
    /// without having taken them. Not `flush`, which succeeds when it had
    /// nothing to publish: here the inline write's bytes were published,
    /// and are lost if it is gone; but a reader that took them and then
    /// went got them, and the write succeeded (as `End::publish` says).
    ///
    /// # Examples
    ///
    /// ```
    /// let (r, mut w) = shmpipe::pipe()?;
    /// w.sync_lent()?; // nothing to publish, nobody to wake
    /// let mut grant = w.reserve(1)?;
    /// grant.as_mut_slices().0[0] = b'x';
    /// grant.commit_unpublished(1); // as the inline write leaves it
    /// drop(r);
    /// assert_eq!(w.sync_lent().unwrap_err().kind(), std::io::ErrorKind::BrokenPipe);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[doc(hidden)]
    pub fn sync_lent(&mut self) -> io::Result<()> {
        // The catch-up before this call published the inline write's
        // bytes already (and may have found the reader gone there).
        if !self.end.publish() || (self.end.side.peer_gone && !self.end.ring.consumed_all()) {
            return Err(error::broken_pipe());
        }
        Ok(())
    }
}

impl Write for Writer {
    /// Writes what fits by the cached view, or waits for room for at least
    /// one byte.
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let ring = &self.end.ring;
        let n = buf.len().min(ring.free_cached());
        if n > 0 && n <= publish_step(ring.capacity()) {
            if !self.end.try_send(&buf[..n]) {
                return write_joining(self, buf, n);
            }
            return Ok(n);
        }
        write_slow(self, buf)
    }

    /// As `Write::write_all`, with a fast path when the ring has room for
    /// all of `buf` (one copy, one publish). Always inlined: at the call
    /// site the length is often a constant, and the copy becomes a move.
    #[inline(always)]
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        if buf.len() <= publish_step(self.end.ring.capacity()) && self.end.try_send(buf) {
            return Ok(());
        }
        write_all_slow(self, buf)
    }

    /// Publishes bytes committed with [`WriteGrant::commit_unpublished`];
    /// `BrokenPipe` if there were some and the reader is known to be gone.
    /// With nothing to publish it succeeds even then, as a kernel pipe's
    /// or socket's flush does: a copy (`tokio::io::copy`) flushes after
    /// its last write, when the reader may already have taken it all and
    /// left.
    fn flush(&mut self) -> io::Result<()> {
        let pending = self.end.ring.has_unpublished();
        let published = self.end.publish() && !self.end.side.peer_gone;
        if pending && !published {
            return Err(error::broken_pipe());
        }
        Ok(())
    }
}

/// `Write::write`'s fast path when `try_send` did not send its first
/// `n` bytes: the end may have other holders (a turn then), or a batch
/// waits to be published and these bytes join it, or its publish found
/// the reader gone (`BrokenPipe`: the bytes are lost with the reader).
#[cold]
#[inline(never)]
fn write_joining(w: &mut Writer, buf: &[u8], n: usize) -> io::Result<usize> {
    if w.end.ring.needs_turn() {
        return w.end.in_turn(|end| write_in_turn(end, buf));
    }
    if w.end.side.peer_gone {
        return Err(error::broken_pipe());
    }
    w.end.ring.push(&buf[..n]);
    if !w.end.publish() {
        return Err(error::broken_pipe());
    }
    Ok(n)
}

/// The most bytes a write to an end other processes may hold publishes
/// in one store, as a kernel pipe's `PIPE_BUF`: a write of at most this
/// (and at most the ring) waits for room for all of it and is then
/// seen whole or not at all, never interleaved with another holder's.
pub(crate) const PIPE_BUF: usize = 4096;

/// `Write::write` in a turn (see `crate::shared`).
fn write_in_turn(end: &mut End<Producer>, buf: &[u8]) -> io::Result<usize> {
    if !buf.is_empty() && buf.len() <= PIPE_BUF.min(end.ring.capacity()) {
        end.wait_free(buf.len())?;
        if end.side.peer_gone {
            return Err(error::broken_pipe());
        }
        end.ring.push(buf);
        if !end.publish() {
            return Err(error::broken_pipe());
        }
        return Ok(buf.len());
    }
    write_some(end, buf)
}

/// `Write::write` when the ring looks full or the copy is large.
#[cold]
#[inline(never)]
fn write_slow(w: &mut Writer, buf: &[u8]) -> io::Result<usize> {
    if buf.is_empty() {
        return Ok(0);
    }
    if w.end.ring.needs_turn() {
        return w.end.in_turn(|end| write_in_turn(end, buf));
    }
    write_some(&mut w.end, buf)
}

/// Waits for room for one byte, then writes what fits.
fn write_some(end: &mut End<Producer>, buf: &[u8]) -> io::Result<usize> {
    end.wait_free(1)?;
    let n = buf.len().min(end.ring.free_cached());
    let step = publish_step(end.ring.capacity());
    let mut done = 0;
    for piece in buf[..n].chunks(step) {
        // A publish may find the reader gone: what it took before it went
        // was written (a short count), the rest is not.
        if end.side.peer_gone {
            break;
        }
        end.ring.push(piece);
        if !end.publish() {
            break;
        }
        done += piece.len();
    }
    if done == 0 {
        return Err(error::broken_pipe());
    }
    Ok(done)
}

/// `Write::write_all` as std writes it, for the slow path.
#[cold]
#[inline(never)]
fn write_all_slow(w: &mut Writer, buf: &[u8]) -> io::Result<()> {
    if w.end.ring.needs_turn() {
        // The whole write in one turn: no other holder's bytes inside it.
        return w.end.in_turn(|end| write_all_in(end, buf));
    }
    write_all_in_writer(w, buf)
}

/// `write_all` in a turn.
fn write_all_in(end: &mut End<Producer>, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match write_in_turn(end, buf) {
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `write_all` as std writes it.
fn write_all_in_writer(w: &mut Writer, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match w.write(buf) {
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Free space in a [`Writer`]'s ring, to fill in place (see
/// [`Writer::reserve`]). Dropping it without committing writes nothing.
///
/// # Examples
///
/// ```
/// use std::io::Read;
/// let (mut r, mut w) = shmpipe::pipe()?;
/// drop(w.reserve(8)?); // not committed: nothing written
/// r.set_nonblocking(true);
/// let err = r.read(&mut [0; 8]).unwrap_err();
/// assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct WriteGrant<'a> {
    writer: &'a mut Writer,
    len: usize,
}

impl WriteGrant<'_> {
    /// The granted space as at most two slices (the second is empty unless
    /// the space wraps around the end of the ring). This memory is ours
    /// alone: the reader maps it read-only and reads it only after commit.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::Read;
    /// let (mut r, mut w) = shmpipe::pipe()?;
    /// let mut grant = w.reserve(3)?;
    /// let (a, b) = grant.as_mut_slices();
    /// a.fill(b'z');
    /// b.fill(b'z');
    /// grant.commit(3);
    /// let mut buf = [0u8; 3];
    /// r.read_exact(&mut buf)?;
    /// assert_eq!(&buf, b"zzz");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn as_mut_slices(&mut self) -> (&mut [u8], &mut [u8]) {
        self.writer.end.ring.slices_mut(0, self.len)
    }

    /// Number of bytes granted.
    ///
    /// # Examples
    ///
    /// ```
    /// let (_r, mut w) = shmpipe::pipe()?;
    /// assert_eq!(w.reserve(100)?.len(), 100);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the grant is empty.
    ///
    /// # Examples
    ///
    /// ```
    /// let (_r, mut w) = shmpipe::pipe()?;
    /// assert!(w.reserve(0)?.is_empty());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Commits the first `n` bytes and publishes them.
    ///
    /// # Panics
    ///
    /// If `n` exceeds the grant.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut r, mut w) = shmpipe::pipe()?;
    /// let mut grant = w.reserve(16)?;
    /// grant.as_mut_slices().0[0] = b'!';
    /// grant.commit(1); // only the first byte
    /// assert_eq!(r.read_chunk()?.bytes().to_vec(), b"!");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn commit(self, n: usize) {
        assert!(n <= self.len, "commit beyond the grant");
        self.writer.end.ring.commit(n);
        // A reader found gone here is reported by the next write.
        let _ = self.writer.end.publish();
    }

    /// Commits the first `n` bytes without publishing: a batch of grants
    /// is published by one index store at the next commit, write or
    /// `flush`.
    ///
    /// # Panics
    ///
    /// If `n` exceeds the grant.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// let (mut r, mut w) = shmpipe::pipe()?;
    /// w.reserve(4)?.commit_unpublished(4);
    /// r.set_nonblocking(true);
    /// let err = r.read(&mut [0; 4]).unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock); // not published yet
    /// w.flush()?;
    /// assert_eq!(r.read_chunk()?.len(), 4);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn commit_unpublished(self, n: usize) {
        assert!(n <= self.len, "commit beyond the grant");
        self.writer.end.ring.commit(n);
    }
}

impl Drop for WriteGrant<'_> {
    /// Ends the turn `reserve` took, if it took one (publishing what was
    /// committed: a turn ends published).
    fn drop(&mut self) {
        self.writer.end.leave_turn_if_in();
    }
}
