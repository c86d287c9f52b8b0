//! The peers: other shared-memory IPC crates, behind the cargo feature
//! `peers` so that the default build does not compile them.
//!
//! iceoryx2 is measured as its own examples and benchmarks use it:
//! publish-subscribe of a `u64`, one publisher and one subscriber per
//! direction, no history, no overflow (the publisher retries until the
//! subscriber has room, so no item is lost), and the receiver busy-polls
//! `receive()`. Each process makes its own node and ports after `fork`.
//!
//! shmem-ipc is measured through its `sharedring` module, as its own
//! benchmark (`benches/sharedring1.rs`) sets it up: the parent makes a
//! `Sender::new(capacity)` and opens the `Receiver` on clones of its memfd
//! and eventfds, before `fork`; the `MAP_SHARED` mapping and the fds survive
//! `fork`, so nothing is passed over a socket. The ring carries `u8`, so it
//! is a byte stream like a pipe and runs the size sweep and the bandwidth
//! tests too, with a 256 KiB ring as shmpipe's default. At its best
//! settings it busy-polls: both sides use the ring through the documented
//! low-level `sender_mut()` / `receiver_mut()`, which skip the eventfd
//! signalling (`send_raw` writes the empty-signal eventfd on every empty to
//! non-empty edge, a system call that only a blocked receiver needs), and
//! spin with [`crate::links::spin_until`] while the ring is empty or full.

#[cfg(feature = "peers")]
use std::io;

/// Whether this build has the peers.
pub const ENABLED: bool = cfg!(feature = "peers");

/// An iceoryx2 error as an I/O error.
#[cfg(feature = "peers")]
pub(crate) fn ice_err(e: impl std::fmt::Debug) -> io::Error {
    io::Error::other(format!("iceoryx2: {e:?}"))
}

/// Spins (see [`crate::links::spin_until`]) until `take`, a peer's
/// non-blocking receive, yields an item (`Some`) or fails, or until
/// `give_up` says to stop waiting (`None`).
#[cfg(feature = "peers")]
pub(crate) fn spin_take<T, E: std::fmt::Debug>(
    mut take: impl FnMut() -> Result<Option<T>, E>,
    mut give_up: impl FnMut() -> bool,
) -> io::Result<Option<T>> {
    let mut got = None;
    let mut failed = None;
    crate::links::spin_until(|| match take() {
        Ok(Some(v)) => {
            got = Some(v);
            true
        }
        Ok(None) => give_up(),
        Err(e) => {
            failed = Some(ice_err(e));
            true
        }
    })?;
    match failed {
        Some(e) => Err(e),
        None => Ok(got),
    }
}

#[cfg(feature = "peers")]
pub use ice::Iceoryx2Link;
#[cfg(feature = "peers")]
pub use shm::ShmemIpcLink;

#[cfg(feature = "peers")]
mod ice {
    use std::io;
    use std::sync::atomic::{AtomicU64, Ordering};

    use iceoryx2::port::publisher::Publisher;
    use iceoryx2::port::subscriber::Subscriber;
    use iceoryx2::prelude::*;

    use crate::links::{put_u64, u64_of, Link, LinkParams, Rx, Tx};

    /// Samples a subscriber buffers: room for a stream to run ahead.
    const BUFFER: usize = 256;

    use crate::peers::{ice_err as err, spin_take};

    fn service(
        name: &str,
    ) -> io::Result<(
        Node<ipc::Service>,
        iceoryx2::service::port_factory::publish_subscribe::PortFactory<ipc::Service, u64, ()>,
    )> {
        // Its default-config warning would land in the bench's output.
        set_log_level(LogLevel::Error);
        let node = NodeBuilder::new().create::<ipc::Service>().map_err(err)?;
        let name: ServiceName = name.try_into().map_err(err)?;
        let svc = node
            .service_builder(&name)
            .publish_subscribe::<u64>()
            .max_publishers(1)
            .max_subscribers(1)
            .history_size(0)
            .subscriber_max_buffer_size(BUFFER)
            .enable_safe_overflow(false)
            .open_or_create()
            .map_err(err)?;
        Ok((node, svc))
    }

    /// An iceoryx2 publisher, made in the owning process by `attach`.
    pub struct IceTx {
        name: String,
        port: Option<(Publisher<ipc::Service, u64, ()>, Node<ipc::Service>)>,
    }

    /// An iceoryx2 subscriber, made in the owning process by `attach`.
    pub struct IceRx {
        name: String,
        port: Option<(Subscriber<ipc::Service, u64, ()>, Node<ipc::Service>)>,
    }

    impl std::fmt::Debug for IceTx {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("IceTx").field("name", &self.name).finish()
        }
    }

    impl std::fmt::Debug for IceRx {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("IceRx").field("name", &self.name).finish()
        }
    }

    impl Tx for IceTx {
        fn attach(&mut self) -> io::Result<()> {
            let (node, svc) = service(&self.name)?;
            let publisher = svc
                .publisher_builder()
                .backpressure_strategy(BackpressureStrategy::RetryUntilDelivered)
                .create()
                .map_err(err)?;
            self.port = Some((publisher, node));
            Ok(())
        }
        #[inline(always)]
        fn send(&mut self, buf: &[u8]) -> io::Result<()> {
            let v = u64_of(buf)?;
            let (publisher, _) = self.port.as_ref().ok_or_else(|| err("not attached"))?;
            match publisher.send_copy(v).map_err(err)? {
                1 => Ok(()),
                n => Err(err(format!("delivered to {n} subscribers, not 1"))),
            }
        }
    }

    impl Rx for IceRx {
        fn attach(&mut self) -> io::Result<()> {
            let (node, svc) = service(&self.name)?;
            let subscriber = svc.subscriber_builder().create().map_err(err)?;
            self.port = Some((subscriber, node));
            Ok(())
        }
        #[inline(always)]
        fn recv_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
            let (subscriber, _) = self.port.as_ref().ok_or_else(|| err("not attached"))?;
            let v = *spin_take(|| subscriber.receive(), || false)?.expect("received");
            put_u64(buf, v)
        }
        #[inline(always)]
        fn recv_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.recv_exact(&mut buf[..8])?;
            Ok(8)
        }
    }

    /// `iceoryx2`: publish-subscribe, busy polling.
    #[derive(Debug)]
    pub enum Iceoryx2Link {}

    static NEXT: AtomicU64 = AtomicU64::new(0);

    impl Link for Iceoryx2Link {
        type Tx = IceTx;
        type Rx = IceRx;
        const MAX_MESSAGE: usize = 8;
        fn new(_: &LinkParams) -> io::Result<(IceTx, IceRx)> {
            let name = format!(
                "shmpipe-bench/{}/{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            );
            Ok((
                IceTx {
                    name: name.clone(),
                    port: None,
                },
                IceRx { name, port: None },
            ))
        }
    }
}

#[cfg(feature = "peers")]
// shmem-ipc hands out the ring's free and filled parts as raw pointers (it
// never makes references into memory the peer can write), so copying in
// and out of them takes `unsafe`; see the SAFETY comments.
#[allow(unsafe_code)]
mod shm {
    use std::io;

    use shmem_ipc::ringbuf;
    use shmem_ipc::sharedring::{Receiver, Sender};

    use crate::links::{spin_until, Link, LinkParams, Rx, Tx};

    /// The ring's size in bytes: shmpipe's default capacity.
    const CAPACITY: usize = 256 * 1024;

    fn err(e: impl std::fmt::Debug) -> io::Error {
        io::Error::other(format!("shmem-ipc: {e:?}"))
    }

    /// Spins until `count()` (free or filled bytes) is not zero.
    #[inline]
    fn wait(count: impl Fn() -> Result<usize, ringbuf::Error>) -> io::Result<()> {
        let mut failed = None;
        spin_until(|| match count() {
            Ok(0) => false,
            Ok(_) => true,
            Err(e) => {
                failed = Some(e);
                true
            }
        })?;
        failed.map_or(Ok(()), |e| Err(err(e)))
    }

    /// The sending half of a shmem-ipc `sharedring`.
    pub struct ShmemTx(Sender<u8>);

    /// The receiving half of a shmem-ipc `sharedring`.
    pub struct ShmemRx(Receiver<u8>);

    impl std::fmt::Debug for ShmemTx {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("ShmemTx").finish_non_exhaustive()
        }
    }

    impl std::fmt::Debug for ShmemRx {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("ShmemRx").finish_non_exhaustive()
        }
    }

    impl ShmemRx {
        /// Copies what the ring holds into `buf`, up to its length; 0 if empty.
        #[inline]
        fn take(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let mut n = 0;
            self.0
                .receiver_mut()
                .recv(|p, filled| {
                    n = filled.min(buf.len());
                    // SAFETY: shmem-ipc hands us `p`, valid for reads of the
                    // `filled` bytes the sender published (its count is
                    // loaded with Acquire), which the sender does not touch
                    // until we give them back by returning `n`; `n <= filled`
                    // and `n <= buf.len()`, and `buf` is this process's own
                    // memory, so the two do not overlap.
                    unsafe { std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), n) };
                    n
                })
                .map_err(err)?;
            Ok(n)
        }
    }

    impl Tx for ShmemTx {
        #[inline(always)]
        fn send(&mut self, mut buf: &[u8]) -> io::Result<()> {
            let ring = self.0.sender_mut();
            while !buf.is_empty() {
                let mut n = 0;
                ring.send(|p, free| {
                    n = free.min(buf.len());
                    // SAFETY: shmem-ipc hands us `p`, valid for writes of
                    // `free` bytes that the receiver does not read until we
                    // publish them by returning `n` (its count is updated
                    // with Release after this closure); `n <= free` and
                    // `n <= buf.len()`, and `buf` is this process's own
                    // memory, so the two do not overlap.
                    unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), p, n) };
                    n
                })
                .map_err(err)?;
                buf = &buf[n..];
                if n == 0 {
                    // Full: busy-poll until the receiver frees some room.
                    wait(|| ring.write_count())?;
                }
            }
            Ok(())
        }
    }

    impl Rx for ShmemRx {
        #[inline(always)]
        fn recv_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if buf.is_empty() {
                return Ok(0);
            }
            loop {
                let n = self.take(buf)?;
                if n > 0 {
                    return Ok(n);
                }
                // Empty: busy-poll until the sender publishes some bytes.
                let ring = self.0.receiver_mut();
                wait(|| ring.read_count())?;
            }
        }
    }

    /// `shmem-ipc`: a `sharedring` of bytes, busy polling.
    #[derive(Debug)]
    pub enum ShmemIpcLink {}

    impl Link for ShmemIpcLink {
        type Tx = ShmemTx;
        type Rx = ShmemRx;
        const MAX_MESSAGE: usize = usize::MAX;
        fn new(_: &LinkParams) -> io::Result<(ShmemTx, ShmemRx)> {
            // As shmem-ipc's own benchmark sets a ring up; the receiver
            // would get these fds over D-Bus or a socket, here `fork` hands
            // them (and the mapping) to the child.
            let tx = Sender::<u8>::new(CAPACITY).map_err(err)?;
            let memfd = tx.memfd().as_file().try_clone()?;
            let empty = tx.empty_signal().try_clone()?;
            let full = tx.full_signal().try_clone()?;
            let rx = Receiver::<u8>::open(CAPACITY, memfd, empty, full).map_err(err)?;
            Ok((ShmemTx(tx), ShmemRx(rx)))
        }
    }
}
