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
            pub fn $set_timeout(
                &mut self,
                timeout: Option<std::time::Duration>,
            ) -> std::io::Result<()> {
                self.end.side.settings.timeout = crate::wait::check_timeout(timeout)?;
                Ok(())
            }

            /// The timeout set by the matching setter.
            pub fn $timeout(&self) -> Option<std::time::Duration> {
                self.end.side.settings.timeout
            }

            /// In non-blocking mode a call that would wait fails with
            /// `ErrorKind::WouldBlock` instead.
            pub fn set_nonblocking(&mut self, nonblocking: bool) {
                self.end.side.settings.nonblocking = nonblocking;
            }

            /// How long to spin before sleeping in the kernel (default
            /// [`DEFAULT_SPIN`](crate::DEFAULT_SPIN)); zero sleeps at once.
            pub fn set_spin(&mut self, spin: std::time::Duration) {
                self.end.side.settings.spin = spin;
            }

            /// The ring's capacity in bytes.
            pub fn capacity(&self) -> usize {
                self.end.ring.capacity()
            }
        }

        impl std::os::fd::AsFd for $ty {
            /// The end's wake/liveness socket: it turns readable when the
            /// peer wakes this end and hangs up when the peer is gone.
            fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
                self.end.side.sock.as_fd()
            }
        }
    };
}

pub(crate) use end_settings;
