//! `serve-N` for iceoryx2 (feature `peers`): its request-response pattern
//! served from one thread with its own `WaitSet`, as its documentation
//! shows an event-driven server (the `event_based_communication` and
//! `event_multiplexing` examples): the server port and a `Listener` of an
//! event service, the listener attached to a `WaitSet`; a client sends its
//! request, then wakes the server through its `Notifier`.
//!
//! At its best settings for this test: every client process sends the
//! requests of all its active connections, then notifies once (not once
//! per request), and busy-polls the responses (`PendingResponse::receive`)
//! as iceoryx2's own benchmarks do. A request-response service with room
//! for every client (`max_clients`), one server, the default number of
//! requests in flight per client. The shape of the run is that of [`crate::serve`]: one server
//! thread on one CPU, N clients in two processes on the other, 8 active,
//! ns per message handled; each message carries its connection and round,
//! checked by the server and by the client.
//!
//! Every process makes its own node and ports: the server its own before
//! the clients are forked (the children never touch the parent's and leave
//! with `_exit`), the clients theirs after `fork`.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use iceoryx2::port::client::Client;
use iceoryx2::prelude::*;

use crate::check::check_failed;
use crate::job::Placement;
use crate::peers::{ice_err as err, spin_take};
use crate::serve::{conn_of, message, timed, Gate, ACTIVE, PROCS};
use crate::sys;

type RequestResponse =
    iceoryx2::service::port_factory::request_response::PortFactory<ipc::Service, u64, (), u64, ()>;
type Event = iceoryx2::service::port_factory::event::PortFactory<ipc::Service>;
type ClientPort = Client<ipc::Service, u64, (), u64, ()>;

/// The node and the two services of one run, opened (or made) in each
/// process with the same settings.
fn services(
    name: &str,
    clients: usize,
) -> io::Result<(Node<ipc::Service>, RequestResponse, Event)> {
    set_log_level(LogLevel::Error);
    let node = NodeBuilder::new().create::<ipc::Service>().map_err(err)?;
    let rr_name: ServiceName = format!("{name}/rr").as_str().try_into().map_err(err)?;
    let rr = node
        .service_builder(&rr_name)
        .request_response::<u64, u64>()
        .max_servers(1)
        .max_clients(clients)
        .max_nodes(PROCS + 1)
        .open_or_create()
        .map_err(err)?;
    let ev_name: ServiceName = format!("{name}/ev").as_str().try_into().map_err(err)?;
    let ev = node
        .service_builder(&ev_name)
        .event()
        .max_notifiers(PROCS)
        .max_listeners(1)
        .max_nodes(PROCS + 1)
        .open_or_create()
        .map_err(err)?;
    Ok((node, rr, ev))
}

/// Runs `serve-{clients}` once with about `n` timed messages.
pub fn run(placement: Placement, clients: usize, n: u64) -> io::Result<Duration> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    // As for the other contestants of `serve-*`.
    shmpipe::raise_fd_limit()?;
    let name = format!(
        "shmpipe-bench/serve/{}/{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let active = clients.min(ACTIVE);
    let rounds = n.div_ceil(active as u64).max(1);
    sys::pin(placement.cpu(0))?;
    let (_node, rr, ev) = services(&name, clients)?;
    let server = rr.server_builder().create().map_err(err)?;
    let listener = ev.listener_builder().create().map_err(err)?;
    let waitset = WaitSetBuilder::new()
        .create::<ipc::Service>()
        .map_err(err)?;
    let _guard = waitset.attach_notification(&listener).map_err(err)?;

    let gate = Gate::new()?;
    let procs = clients.min(PROCS);
    let mut children = Vec::new();
    for p in 0..procs {
        let name = &name;
        let child = sys::spawn(|| {
            sys::pin(placement.cpu(1))?;
            let (_node, rr, ev) = services(name, clients)?;
            let notifier = ev.notifier_builder().create().map_err(err)?;
            // Ours: connections p, p + procs, ...; the idle ones stay
            // connected until the timing is over.
            let mine = (p..clients).step_by(procs);
            let ports: Vec<(usize, ClientPort)> = mine
                .map(|c| Ok((c, rr.client_builder().create().map_err(err)?)))
                .collect::<io::Result<_>>()?;
            gate.ready_then_wait()?;
            let mine_active = ports.iter().filter(|(c, _)| *c < active).count();
            let mut pending = Vec::with_capacity(mine_active);
            for r in 0..=rounds {
                for (c, port) in ports.iter().take(mine_active) {
                    pending.push((
                        *c,
                        port.send_copy(u64::from_le_bytes(message(*c, r)))
                            .map_err(err)?,
                    ));
                }
                notifier.notify().map_err(err)?;
                for (c, p) in pending.drain(..) {
                    let got = spin_take(|| p.receive(), || false)?
                        .map(|v| *v)
                        .ok_or_else(|| err("no response"))?;
                    if got != u64::from_le_bytes(message(c, r)) {
                        return Err(check_failed(format!(
                            "iceoryx2 connection {c} round {r}: reply {got:#x}"
                        )));
                    }
                }
            }
            gate.wait_done();
            Ok(())
        })?;
        children.push(child);
    }
    gate.start(procs)?;

    // One pass: sleep in the WaitSet until a client process notifies,
    // consume the notifications, then answer the requests there are, at
    // most `active` (one round's worth) a pass, as shmpipe's server answers
    // one request a ready connection. Unbounded, one pass kept answering
    // while the busy-polling clients sent round after round, so the
    // untimed first pass of `timed` took every round and the timed part
    // was empty (serve-1000 medians of 0.01 ns). A pass that stopped at
    // the bound does not sleep before the next: more may be waiting.
    let mut full = false;
    let serve_some = || -> io::Result<u64> {
        if full {
            full = false;
        } else {
            waitset
                .wait_and_process_once_with_timeout(
                    |_| {
                        let _ = listener.try_wait(|_| {});
                        CallbackProgression::Continue
                    },
                    Duration::from_millis(50),
                )
                .map_err(err)?;
        }
        if sys::watchdog_fired() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "watchdog: the run took too long",
            ));
        }
        let mut k = 0;
        while k < active as u64 {
            let Some(req) = server.receive().map_err(err)? else {
                return Ok(k);
            };
            let v = *req;
            if conn_of(v.to_le_bytes()) >= clients {
                return Err(check_failed(format!("iceoryx2 request {v:#x}")));
            }
            req.send_copy(v).map_err(err)?;
            k += 1;
        }
        full = true;
        Ok(k)
    };
    let elapsed = timed(active, rounds, serve_some)?;
    gate.finish(procs)?;
    for mut c in children {
        c.wait(Instant::now() + Duration::from_secs(10))?;
    }
    Ok(elapsed)
}
