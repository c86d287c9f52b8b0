//! The peers: other shared-memory IPC crates, behind the cargo feature
//! `peers` so that the default build does not compile them.
//!
//! iceoryx2 is measured as its own examples and benchmarks use it:
//! publish-subscribe of a `u64`, one publisher and one subscriber per
//! direction, no history, no overflow (the publisher retries until the
//! subscriber has room, so no item is lost), and the receiver busy-polls
//! `receive()`. Each process makes its own node and ports after `fork`.
//!
//! shmem-ipc is not wired in (see the bench's notes): its API hands a
//! memfd and eventfds to the peer for the caller to pass over a socket,
//! which did not fit in the time this suite was written in.

use std::io;

use crate::harness::Job;

/// Whether this build has the peers.
pub const ENABLED: bool = cfg!(feature = "peers");

/// The crates measured, with their versions.
pub fn versions() -> Vec<(String, String)> {
    if ENABLED {
        vec![("iceoryx2".into(), "0.10.0".into())]
    } else {
        Vec::new()
    }
}

/// Runs a peer's job (see [`crate::harness::run_once`]).
pub fn run(job: Job, n: u64) -> io::Result<std::time::Duration> {
    match job.mechanism {
        #[cfg(feature = "peers")]
        crate::harness::Mechanism::Iceoryx2 => {
            crate::harness::run_with::<ice::Iceoryx2Link>(job.test, job.placement, n)
        }
        _ => {
            let _ = n;
            Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("{} is not built into this binary", job.mechanism.name()),
            ))
        }
    }
}

#[cfg(feature = "peers")]
mod ice {
    use std::io;
    use std::sync::atomic::{AtomicU64, Ordering};

    use iceoryx2::port::publisher::Publisher;
    use iceoryx2::port::subscriber::Subscriber;
    use iceoryx2::prelude::*;

    use crate::links::{spin_until, Link, LinkParams, Rx, Tx};

    /// Samples a subscriber buffers: room for a stream to run ahead.
    const BUFFER: usize = 256;

    fn err(e: impl std::fmt::Debug) -> io::Error {
        io::Error::other(format!("iceoryx2: {e:?}"))
    }

    fn service(
        name: &str,
    ) -> io::Result<(
        Node<ipc::Service>,
        iceoryx2::service::port_factory::publish_subscribe::PortFactory<ipc::Service, u64, ()>,
    )> {
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
        #[inline]
        fn send(&mut self, buf: &[u8]) -> io::Result<()> {
            let v = u64::from_le_bytes(buf.try_into().map_err(err)?);
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
        #[inline]
        fn recv_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
            let (subscriber, _) = self.port.as_ref().ok_or_else(|| err("not attached"))?;
            let mut got = None;
            let mut failed = None;
            spin_until(|| match subscriber.receive() {
                Ok(Some(sample)) => {
                    got = Some(*sample);
                    true
                }
                Ok(None) => false,
                Err(e) => {
                    failed = Some(err(e));
                    true
                }
            })?;
            if let Some(e) = failed {
                return Err(e);
            }
            let v = got.expect("received");
            if buf.len() != 8 {
                return Err(err("8-byte messages only"));
            }
            buf.copy_from_slice(&v.to_le_bytes());
            Ok(())
        }
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
