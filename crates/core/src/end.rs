//! What every pipe end has in common: the blocking settings and the
//! descriptor behind it.

/// Implements the settings methods shared by all four end types, which
/// each hold a `side: Side` and a `ring` (Producer or Consumer).
macro_rules! end_settings {
    ($ty:ident, $set_timeout:ident, $timeout:ident) => {
        impl $ty {
            /// Sets how long a blocking call waits before failing with
            /// `ErrorKind::TimedOut`; `None` waits forever (the default).
            ///
            /// # Errors
            ///
            /// `InvalidInput` for `Some(Duration::ZERO)`, as in `std`.
            ///
            /// # Examples
            ///
            /// ```
            /// use std::time::Duration;
            /// let (mut rx, _tx) = shmpipe::message_pipe()?;
            /// rx.set_read_timeout(Some(Duration::from_millis(1)))?;
            /// let err = rx.recv(&mut [0u8; 8]).unwrap_err();
            /// assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
            /// let zero = rx.set_read_timeout(Some(Duration::ZERO)).unwrap_err();
            /// assert_eq!(zero.kind(), std::io::ErrorKind::InvalidInput);
            /// # Ok::<(), std::io::Error>(())
            /// ```
            pub fn $set_timeout(
                &mut self,
                timeout: Option<std::time::Duration>,
            ) -> std::io::Result<()> {
                self.end.side.settings.timeout = crate::wait::check_timeout(timeout)?;
                Ok(())
            }

            /// The timeout set by the matching setter.
            ///
            /// # Examples
            ///
            /// ```
            /// use std::time::Duration;
            /// let (_rx, mut tx) = shmpipe::message_pipe()?;
            /// assert_eq!(tx.write_timeout(), None);
            /// tx.set_write_timeout(Some(Duration::from_secs(5)))?;
            /// assert_eq!(tx.write_timeout(), Some(Duration::from_secs(5)));
            /// # Ok::<(), std::io::Error>(())
            /// ```
            pub fn $timeout(&self) -> Option<std::time::Duration> {
                self.end.side.settings.timeout
            }

            /// In non-blocking mode a call that would wait fails with
            /// `ErrorKind::WouldBlock` instead.
            ///
            /// # Examples
            ///
            /// ```
            /// let (mut rx, _tx) = shmpipe::message_pipe()?;
            /// rx.set_nonblocking(true);
            /// let mut buf = [0u8; 8];
            /// let err = rx.recv(&mut buf).unwrap_err();
            /// assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
            /// # Ok::<(), std::io::Error>(())
            /// ```
            pub fn set_nonblocking(&mut self, nonblocking: bool) {
                self.end.side.settings.nonblocking = nonblocking;
            }

            /// How long to spin before sleeping in the kernel (default
            /// [`Spin::Adaptive`](crate::Spin::Adaptive), at most
            /// [`DEFAULT_SPIN`](crate::DEFAULT_SPIN)): a
            /// [`Duration`](std::time::Duration) is kept exactly, and zero
            /// sleeps at once.
            ///
            /// # Examples
            ///
            /// ```
            /// use std::time::Duration;
            /// let (mut rx, mut tx) = shmpipe::message_pipe()?;
            /// rx.set_spin(Duration::ZERO); // sleep in the kernel at once
            /// tx.set_spin(shmpipe::Spin::Adaptive);
            /// tx.send(b"x")?;
            /// let mut buf = [0u8; 1];
            /// assert_eq!(rx.recv(&mut buf)?, 1);
            /// # Ok::<(), std::io::Error>(())
            /// ```
            pub fn set_spin(&mut self, spin: impl Into<crate::Spin>) {
                self.end.side.settings.spin = spin.into();
            }

            /// The ring's capacity in bytes.
            ///
            /// # Examples
            ///
            /// ```
            /// let (rx, tx) = shmpipe::Options::new().capacity(1 << 16).message_pipe()?;
            /// assert_eq!(rx.capacity(), 1 << 16);
            /// assert_eq!(tx.capacity(), 1 << 16);
            /// # Ok::<(), std::io::Error>(())
            /// ```
            pub fn capacity(&self) -> usize {
                self.end.ring.capacity()
            }

            /// Level-triggered readiness: `Ok(true)` if the next operation
            /// can progress now (a reading end: data or EOF; a writing end:
            /// room for what its last `WouldBlock` wanted, any room once
            /// that was found, or a gone reader), and then the descriptor
            /// ([`AsFd`](std::os::fd::AsFd)) polls readable until that
            /// readiness is consumed. Otherwise
            /// `Ok(false)`, and the descriptor polls readable once the
            /// operation can progress. Call it before each poll of the
            /// descriptor when you do not try the operation first (as
            /// Python's `multiprocessing.connection.wait` does).
            ///
            /// A busy end needs none of this: an operation that returns
            /// `WouldBlock` arms the descriptor itself.
            ///
            /// # Errors
            ///
            /// The system's, if the descriptor cannot be made (`EMFILE`);
            /// `InvalidData` if the peer broke the protocol.
            ///
            /// # Examples
            ///
            /// ```
            /// use std::os::fd::AsRawFd;
            /// let (mut rx, mut tx) = shmpipe::message_pipe()?;
            /// let readable = |fd: i32| {
            ///     let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
            ///     // SAFETY: one valid pollfd.
            ///     let n = unsafe { libc::poll(&mut p, 1, 0) };
            ///     n == 1
            /// };
            /// assert!(!rx.arm()?); // nothing there: armed
            /// assert!(!readable(rx.as_raw_fd()));
            /// tx.send(b"hi")?;
            /// assert!(readable(rx.as_raw_fd()));
            /// assert!(rx.arm()?); // ready, and stays readable until received
            /// let mut buf = [0u8; 2];
            /// rx.recv(&mut buf)?;
            /// assert!(!rx.arm()?);
            /// assert!(!readable(rx.as_raw_fd()));
            /// # Ok::<(), std::io::Error>(())
            /// ```
            pub fn arm(&mut self) -> std::io::Result<bool> {
                if crate::shared::Shared::needs_turn(&self.end.ring) {
                    // From the shared indices, under the end's lock.
                    return self.end.in_turn(|end| end.arm());
                }
                self.end.arm()
            }

            /// Whether this end takes turns with copies other processes
            /// may hold (see docs/shared-ends.md): true from a `fork` or
            /// a hand-off until an operation finds this copy the only one
            /// left, and then it is back on its fast path.
            ///
            /// # Examples
            ///
            /// ```
            /// let (mut rx, mut tx) = shmpipe::message_pipe()?;
            /// assert!(!rx.takes_turns());
            /// let _fds = rx.as_fds(); // as if handed to another process
            /// assert!(rx.takes_turns());
            /// # let _ = &mut tx;
            /// # Ok::<(), std::io::Error>(())
            /// ```
            #[doc(hidden)]
            pub fn takes_turns(&self) -> bool {
                crate::shared::Shared::gate(&self.end.ring).is_shared()
            }

            /// If this end takes turns, takes an empty one, which puts the
            /// end back on its fast path if this copy is the only one
            /// left. For code that lends the end's state (the C API's
            /// inline calls), which only an end on its fast path can.
            ///
            /// # Examples
            ///
            /// ```
            /// let (mut rx, mut tx) = shmpipe::message_pipe()?;
            /// let fds = rx.as_fds().map(|fd| fd.try_clone_to_owned().unwrap());
            /// let copy = shmpipe::Receiver::from_fds(fds)?; // a second copy
            /// drop(copy);
            /// assert!(rx.takes_turns());
            /// rx.check_copies()?;
            /// assert!(!rx.takes_turns()); // the only copy left
            /// # let _ = &mut tx;
            /// # Ok::<(), std::io::Error>(())
            /// ```
            /// Leaves the turn that an in-place message, chunk or grant
            /// left open when it was forgotten (`std::mem::forget`, to
            /// read it again later: the Python binding peeks at a
            /// message's length so), publishing nothing it did not
            /// consume. Other holders of the end wait on its lock while a
            /// turn is open, so code that forgets one must leave it
            /// before it returns to its caller. Does nothing outside a
            /// turn.
            ///
            /// # Examples
            ///
            /// ```
            /// let (mut rx, mut tx) = shmpipe::message_pipe()?;
            /// tx.send(b"peeked")?;
            /// let _fds = rx.as_fds(); // as if handed on: rx takes turns
            /// std::mem::forget(rx.recv_in_place()?); // its turn stays open
            /// rx.leave_turn();
            /// let mut got = Vec::new();
            /// rx.recv_vec(&mut got)?;
            /// assert_eq!(got, b"peeked"); // still there
            /// # Ok::<(), std::io::Error>(())
            /// ```
            #[doc(hidden)]
            pub fn leave_turn(&mut self) {
                self.end.leave_turn_if_in();
            }

            #[doc(hidden)]
            pub fn check_copies(&mut self) -> std::io::Result<()> {
                if crate::shared::Shared::needs_turn(&self.end.ring) {
                    self.end.in_turn(|_| Ok(()))?;
                }
                Ok(())
            }
        }

        impl std::os::fd::AsFd for $ty {
            /// The end's readiness descriptor, a readiness source as a
            /// non-blocking socket is: after an operation returned
            /// `WouldBlock` (or [`arm`](Self::arm) returned false) it polls
            /// readable (`POLLIN`) once that operation can progress (data
            /// or room arrived, or the peer is gone). Edge-triggered users
            /// (tokio's `AsyncFd`, `EPOLLET`) clear their readiness only
            /// after `WouldBlock`; level-triggered ones call `arm` before
            /// each poll. It may, rarely, poll readable spuriously once;
            /// the operation then returns `WouldBlock` again.
            ///
            /// Made on first use: an epoll instance holding what the end
            /// sleeps on (the read end of its wake pipe, or its wake
            /// socket for an end of a connection) and an eventfd (two more
            /// descriptors, kept until the end is dropped). If they cannot
            /// be made, this is that pipe or socket itself (use `arm` to
            /// see the error).
            fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
                self.end.side.fd()
            }
        }

        impl std::os::fd::AsRawFd for $ty {
            /// See [`AsFd`](std::os::fd::AsFd).
            fn as_raw_fd(&self) -> std::os::fd::RawFd {
                use std::os::fd::AsFd;
                self.as_fd().as_raw_fd()
            }
        }
    };
}

pub(crate) use end_settings;
