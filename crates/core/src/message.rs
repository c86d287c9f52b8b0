//! Message pipe ends: [`Sender`] and [`Receiver`]. Boundaries are kept:
//! each `recv` returns exactly one `send`, from 0 bytes up to
//! [`Sender::max_message`] (the ring capacity less an 8-byte header).

use std::io;

use shmpipe_ring::frame;
use shmpipe_ring::{Consumer, Producer};

use crate::end::end_settings;
use crate::error;
use crate::shared::run_in_turn;
use crate::view::RingSlice;
use crate::wait::{End, Ready};

/// The sending end of a message pipe.
///
/// # Examples
///
/// ```
/// let (mut rx, mut tx) = shmpipe::message_pipe()?;
/// tx.send(b"one")?;
/// tx.send(b"")?;
/// let mut buf = [0u8; 16];
/// assert_eq!(rx.recv(&mut buf)?, 3);
/// assert_eq!(rx.recv(&mut buf)?, 0);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Sender {
    pub(crate) end: End<Producer>,
}

/// The receiving end of a message pipe. Once every copy of the
/// [`Sender`] is gone and the messages are drained, `recv` fails with
/// `ErrorKind::UnexpectedEof`.
///
/// # Examples
///
/// ```
/// let (mut rx, tx) = shmpipe::message_pipe()?;
/// drop(tx);
/// let mut buf = [0u8; 8];
/// assert_eq!(rx.recv(&mut buf).unwrap_err().kind(), std::io::ErrorKind::UnexpectedEof);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Receiver {
    pub(crate) end: End<Consumer>,
}

end_settings!(Sender, set_write_timeout, write_timeout);
end_settings!(Receiver, set_read_timeout, read_timeout);

impl Sender {
    /// The largest message this pipe carries.
    ///
    /// # Examples
    ///
    /// ```
    /// let (_rx, tx) = shmpipe::Options::new().capacity(4096).message_pipe()?;
    /// assert_eq!(tx.max_message(), 4096 - 8); // an 8-byte header per message
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn max_message(&self) -> usize {
        frame::max_payload(self.end.ring.capacity())
    }

    /// Sends one message and publishes it.
    ///
    /// # Errors
    ///
    /// `InvalidInput` if `msg` is longer than [`max_message`](Self::max_message)
    /// (nothing is sent); `BrokenPipe` once every copy of the receiver is
    /// gone (as for [`Writer`](crate::Writer)'s writes); `WouldBlock` or
    /// `TimedOut` as configured.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut rx, mut tx) = shmpipe::message_pipe()?;
    /// tx.send(b"hello")?;
    /// let too_long = vec![0; tx.max_message() + 1];
    /// assert_eq!(tx.send(&too_long).unwrap_err().kind(), std::io::ErrorKind::InvalidInput);
    /// let mut buf = [0u8; 16];
    /// let n = rx.recv(&mut buf)?;
    /// assert_eq!(&buf[..n], b"hello");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[inline]
    pub fn send(&mut self, msg: &[u8]) -> io::Result<()> {
        if self.end.ring.needs_turn() {
            return run_in_turn(self, |s| &mut s.end, |s| s.send(msg));
        }
        self.feed(msg)?;
        if !self.end.publish() {
            return Err(error::broken_pipe());
        }
        Ok(())
    }

    /// Queues one message without publishing it: a batch of `feed`s is
    /// published with one index store by [`flush`](Self::flush) (or the
    /// next `send`). Pending messages are published before waiting for
    /// space, so `feed` never deadlocks on its own batch.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut rx, mut tx) = shmpipe::message_pipe()?;
    /// tx.feed(b"a")?;
    /// tx.feed(b"b")?;
    /// assert_eq!(rx.peek_len()?, None); // not published yet
    /// tx.flush();
    /// assert_eq!(rx.peek_len()?, Some(1));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[inline]
    pub fn feed(&mut self, msg: &[u8]) -> io::Result<()> {
        // A turn ends published: a fed message of an end other processes
        // may hold is sent at once.
        if self.end.ring.needs_turn() {
            return run_in_turn(self, |s| &mut s.end, |s| s.feed(msg));
        }
        self.wait_free(msg.len())?;
        self.end.ring.push_message(msg);
        Ok(())
    }

    /// Publishes queued messages.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut rx, mut tx) = shmpipe::message_pipe()?;
    /// tx.feed(b"batched")?;
    /// tx.flush();
    /// let mut msg = Vec::new();
    /// rx.recv_vec(&mut msg)?;
    /// assert_eq!(msg, b"batched");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn flush(&mut self) {
        self.end.publish();
    }

    /// Whether a `len`-byte message fits in the ring now: a look at the
    /// receiver's index, no system call, no waiting, and (unlike a
    /// non-blocking `send`) nothing armed; see [`Receiver::peek_len`].
    ///
    /// # Examples
    ///
    /// ```
    /// let (_rx, mut tx) = shmpipe::Options::new().capacity(64).message_pipe()?;
    /// assert!(tx.has_room(56)?);
    /// tx.send(&[0; 40])?;
    /// assert!(!tx.has_room(16)?);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn has_room(&mut self, len: usize) -> io::Result<bool> {
        if len > self.max_message() {
            return Ok(false);
        }
        if self.end.ring.needs_turn() {
            return run_in_turn(self, |s| &mut s.end, |s| s.has_room(len));
        }
        let want = frame::frame_len(len);
        Ok(self.end.ring.free(want).map_err(error::protocol)? >= want)
    }

    /// Waits for room for a `len`-byte message and returns its payload to
    /// fill in place; [`MessageGrant::commit`] sends it.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut rx, mut tx) = shmpipe::message_pipe()?;
    /// let mut grant = tx.reserve(8)?;
    /// grant.copy_from_slice(&42u64.to_le_bytes());
    /// grant.commit();
    /// let msg = rx.recv_in_place()?;
    /// assert_eq!(msg.bytes().to_vec(), 42u64.to_le_bytes());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn reserve(&mut self, len: usize) -> io::Result<MessageGrant<'_>> {
        // An end other processes may hold keeps its turn until the grant
        // is sent or dropped (see `crate::shared`).
        if self.end.ring.needs_turn() {
            self.end.enter_turn()?;
        }
        if let Err(e) = self.wait_free(len) {
            self.end.leave_turn_if_in();
            return Err(e);
        }
        self.end.ring.write_message_header(len);
        Ok(MessageGrant { sender: self, len })
    }

    /// Checks the size and waits for room.
    #[inline]
    fn wait_free(&mut self, len: usize) -> io::Result<()> {
        if len > self.max_message() {
            return Err(too_long(len, self.max_message()));
        }
        self.end.wait_free(frame::frame_len(len))
    }
}

#[cold]
fn too_long(len: usize, max: usize) -> io::Error {
    error::invalid_input(format!(
        "message of {len} bytes exceeds the pipe's maximum of {max}"
    ))
}

/// Room for one message in a [`Sender`]'s ring, filled in place (see
/// [`Sender::reserve`]). Dropping it without committing sends nothing.
///
/// # Examples
///
/// ```
/// let (mut rx, mut tx) = shmpipe::message_pipe()?;
/// drop(tx.reserve(4)?); // not committed: nothing sent
/// assert_eq!(rx.peek_len()?, None);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct MessageGrant<'a> {
    sender: &'a mut Sender,
    len: usize,
}

impl MessageGrant<'_> {
    /// The payload as at most two slices (the second is empty unless it
    /// wraps around the end of the ring).
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut rx, mut tx) = shmpipe::message_pipe()?;
    /// let mut grant = tx.reserve(3)?;
    /// let (a, b) = grant.as_mut_slices();
    /// assert_eq!(a.len() + b.len(), 3);
    /// a.fill(7);
    /// b.fill(7);
    /// grant.commit();
    /// assert_eq!(rx.recv_in_place()?.bytes().to_vec(), [7, 7, 7]);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn as_mut_slices(&mut self) -> (&mut [u8], &mut [u8]) {
        self.sender.end.ring.slices_mut(frame::HEADER, self.len)
    }

    /// Fills the whole payload from `src`.
    ///
    /// # Panics
    ///
    /// If `src.len()` differs from the reserved length.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut rx, mut tx) = shmpipe::message_pipe()?;
    /// let mut grant = tx.reserve(2)?;
    /// grant.copy_from_slice(b"ok");
    /// grant.commit();
    /// assert_eq!(rx.recv_in_place()?.bytes().to_vec(), b"ok");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn copy_from_slice(&mut self, src: &[u8]) {
        assert_eq!(
            src.len(),
            self.len,
            "copy_from_slice: length differs from the grant"
        );
        let (a, b) = self.as_mut_slices();
        let n = a.len();
        a.copy_from_slice(&src[..n]);
        b.copy_from_slice(&src[n..]);
    }

    /// The payload length.
    ///
    /// # Examples
    ///
    /// ```
    /// let (_rx, mut tx) = shmpipe::message_pipe()?;
    /// let grant = tx.reserve(5)?;
    /// assert_eq!(grant.len(), 5);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the payload is empty.
    ///
    /// # Examples
    ///
    /// ```
    /// let (_rx, mut tx) = shmpipe::message_pipe()?;
    /// assert!(tx.reserve(0)?.is_empty());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sends the message.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut rx, mut tx) = shmpipe::message_pipe()?;
    /// let mut grant = tx.reserve(1)?;
    /// grant.copy_from_slice(&[9]);
    /// grant.commit();
    /// assert_eq!(rx.peek_len()?, Some(1));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn commit(self) {
        let _ = self.send();
    }

    /// Sends the message, as [`commit`](Self::commit), and says whether
    /// it went: `BrokenPipe` if this publish found every copy of the
    /// receiver gone before it took the message (as
    /// [`Sender::send`](crate::Sender::send) reports it).
    ///
    /// # Examples
    ///
    /// ```
    /// let (rx, mut tx) = shmpipe::message_pipe()?;
    /// let mut grant = tx.reserve(1)?;
    /// grant.copy_from_slice(&[9]);
    /// grant.send()?;
    /// drop(rx);
    /// let mut grant = tx.reserve(1)?; // room: the reader's going is learnt at the publish
    /// grant.copy_from_slice(&[10]);
    /// assert_eq!(grant.send().unwrap_err().kind(), std::io::ErrorKind::BrokenPipe);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn send(self) -> io::Result<()> {
        self.sender.end.ring.commit(frame::frame_len(self.len));
        if !self.sender.end.publish() {
            return Err(error::broken_pipe());
        }
        Ok(())
    }

    /// Queues the message without publishing (see [`Sender::feed`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut rx, mut tx) = shmpipe::message_pipe()?;
    /// let mut grant = tx.reserve(1)?;
    /// grant.copy_from_slice(&[9]);
    /// grant.commit_unpublished();
    /// assert_eq!(rx.peek_len()?, None);
    /// tx.flush();
    /// assert_eq!(rx.peek_len()?, Some(1));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn commit_unpublished(self) {
        self.sender.end.ring.commit(frame::frame_len(self.len));
    }
}

impl Drop for MessageGrant<'_> {
    /// Ends the turn `reserve` took, if it took one (publishing what was
    /// committed: a turn ends published).
    fn drop(&mut self) {
        self.sender.end.leave_turn_if_in();
    }
}

impl Receiver {
    /// Receives one message into `buf` and returns its length.
    ///
    /// # Errors
    ///
    /// `InvalidInput` if `buf` is too small: the message stays in the pipe
    /// (see [`recv_vec`](Self::recv_vec) and [`recv_in_place`](Self::recv_in_place));
    /// `UnexpectedEof` once the sender is gone and the pipe drained;
    /// `InvalidData` if the sender broke the protocol; `WouldBlock` or
    /// `TimedOut` as configured.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut rx, mut tx) = shmpipe::message_pipe()?;
    /// tx.send(b"too long")?;
    /// let mut small = [0u8; 3];
    /// assert_eq!(rx.recv(&mut small).unwrap_err().kind(), std::io::ErrorKind::InvalidInput);
    /// let mut buf = [0u8; 8];
    /// assert_eq!(rx.recv(&mut buf)?, 8); // it stayed in the pipe
    /// assert_eq!(&buf, b"too long");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[inline]
    pub fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.end.ring.needs_turn() {
            return run_in_turn(self, |s| &mut s.end, |s| s.recv(buf));
        }
        let len = self.next()?;
        if len > buf.len() {
            return Err(too_small(len, buf.len()));
        }
        self.end.ring.peek(frame::HEADER, &mut buf[..len]);
        self.consume(len);
        Ok(len)
    }

    /// Receives one message into `buf`, resized to fit it. The vector
    /// grows only for a message that is wholly in the ring (its length is
    /// checked against what the sender published first), so never past the
    /// ring's capacity, which a connection bounds by
    /// [`Options::max_peer_capacity`](crate::Options::max_peer_capacity).
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut rx, mut tx) = shmpipe::message_pipe()?;
    /// tx.send(&[1; 1000])?;
    /// let mut buf = Vec::new();
    /// rx.recv_vec(&mut buf)?;
    /// assert_eq!(buf, [1; 1000]);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn recv_vec(&mut self, buf: &mut Vec<u8>) -> io::Result<()> {
        if self.end.ring.needs_turn() {
            return run_in_turn(self, |s| &mut s.end, |s| s.recv_vec(buf));
        }
        let len = self.next()?;
        buf.resize(len, 0);
        self.end.ring.peek(frame::HEADER, buf);
        self.consume(len);
        Ok(())
    }

    /// Receives one message and gives a view of it in place; it is
    /// consumed when the [`Message`] is dropped.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut rx, mut tx) = shmpipe::message_pipe()?;
    /// tx.send(b"in place")?;
    /// let msg = rx.recv_in_place()?;
    /// assert_eq!(msg.bytes().to_vec(), b"in place");
    /// drop(msg); // consumed here
    /// assert_eq!(rx.peek_len()?, None);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn recv_in_place(&mut self) -> io::Result<Message<'_>> {
        // An end other processes may hold keeps its turn until the message
        // is dropped (see `crate::shared`).
        if self.end.ring.needs_turn() {
            self.end.enter_turn()?;
        }
        let len = match self.next() {
            Ok(len) => len,
            Err(e) => {
                self.end.leave_turn_if_in();
                return Err(e);
            }
        };
        Ok(Message {
            receiver: self,
            len,
        })
    }

    /// The length of the next message if one is there now: a look at the
    /// sender's index, no system call, no waiting. Unlike a non-blocking
    /// `recv` it does not arm the descriptor (so the sender's next publish
    /// does not have to wake us), which suits a caller that waits its own
    /// way, such as the Python binding. `None` also once the sender is
    /// gone and nothing is left (`recv` then reports the end of file).
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut rx, mut tx) = shmpipe::message_pipe()?;
    /// assert_eq!(rx.peek_len()?, None);
    /// tx.send(b"abc")?;
    /// assert_eq!(rx.peek_len()?, Some(3));
    /// let mut buf = [0u8; 3];
    /// assert_eq!(rx.recv(&mut buf)?, 3);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn peek_len(&mut self) -> io::Result<Option<usize>> {
        if self.end.ring.needs_turn() {
            return run_in_turn(self, |s| &mut s.end, |s| s.peek_len());
        }
        self.parse()
    }

    /// Waits for the next message and returns its checked length.
    #[inline]
    fn next(&mut self) -> io::Result<usize> {
        // Only the cached view here, as in `Reader::read_exact`: once it
        // is drained, `wait` pauses before looking at the sender's tail.
        if self.end.ring.available_cached() > 0 {
            if let Some(len) = self.parse()? {
                return Ok(len);
            }
        }
        self.next_slow()
    }

    #[cold]
    #[inline(never)]
    fn next_slow(&mut self) -> io::Result<usize> {
        loop {
            if self.end.side.wait(&mut self.end.ring, 1)? == Ready::PeerGone {
                return Err(error::eof());
            }
            if let Some(len) = self.parse()? {
                return Ok(len);
            }
        }
    }

    /// The next message's checked length, if one is readable.
    #[inline]
    fn parse(&mut self) -> io::Result<Option<usize>> {
        self.end
            .ring
            .next_message()
            .map_err(error::message_protocol)
    }

    #[inline]
    fn consume(&mut self, len: usize) {
        self.end.ring.consume_message(len);
        self.end.publish();
    }
}

#[cold]
fn too_small(len: usize, buf: usize) -> io::Error {
    error::invalid_input(format!(
        "message of {len} bytes does not fit a {buf}-byte buffer"
    ))
}

/// One received message, read in place; consumed on drop.
///
/// # Examples
///
/// ```
/// let (mut rx, mut tx) = shmpipe::message_pipe()?;
/// tx.send(b"abc")?;
/// let msg: shmpipe::Message<'_> = rx.recv_in_place()?;
/// assert_eq!(msg.len(), 3);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Message<'a> {
    receiver: &'a mut Receiver,
    len: usize,
}

impl Message<'_> {
    /// The payload.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut rx, mut tx) = shmpipe::message_pipe()?;
    /// tx.send(b"abc")?;
    /// let msg = rx.recv_in_place()?;
    /// assert_eq!(msg.bytes().get(1), Some(b'b'));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn bytes(&self) -> RingSlice<'_> {
        RingSlice::new(self.receiver.end.ring.ranges(frame::HEADER, self.len))
    }

    /// The payload length.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut rx, mut tx) = shmpipe::message_pipe()?;
    /// tx.send(b"abc")?;
    /// assert_eq!(rx.recv_in_place()?.len(), 3);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the payload is empty.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut rx, mut tx) = shmpipe::message_pipe()?;
    /// tx.send(b"")?;
    /// assert!(rx.recv_in_place()?.is_empty());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Message<'_> {
    fn drop(&mut self) {
        self.receiver.consume(self.len);
        self.receiver.end.leave_turn_if_in();
    }
}
