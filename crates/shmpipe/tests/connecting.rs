//! A connect that does not wait for the accept (`Options::connect_later`,
//! what Python's `shmpipe.Client` uses): one thread may connect and then
//! accept, a server slower than the handshake's timeout between two
//! `accept` calls drops no client that has spoken, and a listener that
//! goes away ends the wait with an error instead of a hang.

mod common;

use std::io::ErrorKind;
use std::time::{Duration, Instant};

use common::{sock_path, watchdog};

const LIMIT: Duration = Duration::from_secs(60);

/// Finishes `c`, a second at a time, until it is done or fails.
fn finish(c: &mut shmpipe::Connecting) -> std::io::Result<shmpipe::Connection> {
    loop {
        if let Some(conn) = c.finish(Instant::now() + Duration::from_secs(1))? {
            return Ok(conn);
        }
    }
}

#[test]
fn one_thread_connects_then_accepts() {
    let _w = watchdog(LIMIT);
    let path = sock_path("later-one-thread");
    let listener = shmpipe::Listener::bind(&path).unwrap();
    let mut connecting = shmpipe::Options::new().connect_later(&path).unwrap();
    let served = listener.accept().unwrap();
    let client = finish(&mut connecting).unwrap();
    let (mut rx, _tx) = served.into_messages();
    let (_crx, mut ctx) = client.into_messages();
    ctx.send(b"hello").unwrap();
    let mut got = Vec::new();
    rx.recv_vec(&mut got).unwrap();
    assert_eq!(got, b"hello");
    // Finished: a second call says so.
    let again = connecting.finish(Instant::now()).unwrap_err();
    assert_eq!(again.kind(), ErrorKind::InvalidInput);
}

/// Two clients speak before the server accepts; it takes both off the
/// queue in one `accept`, returns the first, then is busy for longer than
/// the handshake's timeout. The second is still served: its hello arrived
/// in time, the delay was the server's.
#[test]
fn a_server_busy_past_the_timeout_drops_no_waiting_client() {
    let _w = watchdog(LIMIT);
    let path = sock_path("later-busy");
    let listener = shmpipe::Listener::bind(&path).unwrap();
    let mut a = shmpipe::Options::new().connect_later(&path).unwrap();
    let mut b = shmpipe::Options::new().connect_later(&path).unwrap();
    let first = listener.accept().unwrap();
    std::thread::sleep(shmpipe::handshake::TIMEOUT + Duration::from_secs(1));
    let second = listener.accept().unwrap();
    assert_eq!(listener.failed_handshakes(), 0);
    let (a, b) = (finish(&mut a).unwrap(), finish(&mut b).unwrap());
    drop((first, second, a, b));
}

#[test]
fn a_listener_closed_before_accepting_ends_the_wait() {
    let _w = watchdog(LIMIT);
    let path = sock_path("later-closed");
    let listener = shmpipe::Listener::bind(&path).unwrap();
    let mut connecting = shmpipe::Options::new().connect_later(&path).unwrap();
    assert!(connecting
        .finish(Instant::now() + Duration::from_millis(10))
        .unwrap()
        .is_none());
    drop(listener);
    let e = finish(&mut connecting).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}");
}

#[test]
fn a_refused_client_learns_it_when_it_finishes() {
    let _w = watchdog(LIMIT);
    let path = sock_path("later-refused");
    let mut listener = shmpipe::Listener::bind(&path).unwrap();
    listener.set_policy(|_| false);
    listener.set_nonblocking(true);
    let mut connecting = shmpipe::Options::new().connect_later(&path).unwrap();
    let e = loop {
        let _ = listener.accept(); // refuses, never returns a connection
        match connecting.finish(Instant::now() + Duration::from_millis(10)) {
            Ok(None) => continue,
            Ok(Some(_)) => panic!("a refused client connected"),
            Err(e) => break e,
        }
    };
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
}
