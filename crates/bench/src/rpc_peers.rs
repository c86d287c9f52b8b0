//! `rpc-null` for iceoryx2 (feature `peers`): its request-response
//! pattern, one client and one server, a `u64` each way, both sides
//! busy-polling as iceoryx2's own examples do. The server is a forked
//! process; each process makes its own node and ports after `fork`.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use iceoryx2::prelude::*;

use crate::check::check_failed;
use crate::job::Placement;
use crate::peers::{ice_err as err, spin_take};
use crate::sys;

type Service =
    iceoryx2::service::port_factory::request_response::PortFactory<ipc::Service, u64, (), u64, ()>;

fn service(name: &str) -> io::Result<(Node<ipc::Service>, Service)> {
    set_log_level(LogLevel::Error);
    let node = NodeBuilder::new().create::<ipc::Service>().map_err(err)?;
    let name: ServiceName = name.try_into().map_err(err)?;
    let svc = node
        .service_builder(&name)
        .request_response::<u64, u64>()
        .open_or_create()
        .map_err(err)?;
    Ok((node, svc))
}

/// Runs `rpc-null` once with `n` timed calls (each request carries its
/// sequence number, each response it plus one, both checked).
pub fn run(placement: Placement, n: u64) -> io::Result<Duration> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        "shmpipe-bench/rpc/{}/{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    sys::pin(placement.cpu(0))?;
    let cpu = placement.cpu(1);
    let mut child = sys::spawn(|| {
        sys::pin(cpu)?;
        let (_node, svc) = service(&name)?;
        let server = svc.server_builder().create().map_err(err)?;
        // Until the last call: a first request resent while the server
        // started may arrive twice.
        loop {
            let req = spin_take(|| server.receive(), || false)?.expect("received");
            let v = *req;
            req.send_copy(v + 1).map_err(err)?;
            if v == n {
                return Ok(());
            }
        }
    })?;
    let (_node, svc) = service(&name)?;
    let client = svc.client_builder().create().map_err(err)?;
    let mut start = Instant::now();
    for i in 0..=n {
        if i == 1 {
            // Call 0 is untimed: it carries the server's start-up.
            start = Instant::now();
        }
        // The server may not be there yet for the first call: resend
        // until a response comes.
        let got = loop {
            let pending = client.send_copy(i).map_err(err)?;
            let mut tries = 0u64;
            let got = spin_take(
                || pending.receive(),
                || {
                    tries += 1;
                    i == 0 && tries > 1_000_000
                },
            )?;
            if let Some(v) = got {
                break *v;
            }
        };
        if got != i + 1 {
            return Err(check_failed(format!(
                "iceoryx2 rpc: response {got} to request {i}"
            )));
        }
    }
    let elapsed = start.elapsed();
    child.wait(Instant::now() + Duration::from_secs(10))?;
    Ok(elapsed)
}
