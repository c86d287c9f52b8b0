//! The thread-per-client servers ([`serve`], [`serve_unix`]), each
//! connection served by a [`Conn`]. (The waitset servers are in
//! `waitset.rs`.)

use std::io;
use std::os::unix::net::UnixListener;

use shmpipe_core::{Connection, Listener, PeerCredentials};

use crate::conn::Conn;
use crate::dispatch::Dispatch;

/// Serves every client of `listener`, each on its own thread with the
/// dispatcher `make` gives for it (`make` sees who connected). Returns
/// only if accepting fails.
///
/// # Examples
///
/// ```no_run
/// #[shmpipe::service]
/// pub trait Ping { fn ping(&self); }
/// struct P;
/// impl Ping for P { fn ping(&self) {} }
/// let listener = shmpipe::Listener::bind("/tmp/ping.sock")?;
/// shmpipe::rpc::serve(listener, |_peer| PingServer(P))?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn serve<D, F>(listener: Listener, make: F) -> io::Result<()>
where
    D: Dispatch + Send + 'static,
    F: Fn(&PeerCredentials) -> D,
{
    loop {
        let Some(conn) = accept_or_back_off(&listener)? else {
            continue;
        };
        let d = make(&conn.peer);
        std::thread::Builder::new()
            .name("shmpipe-rpc".into())
            .spawn(move || {
                let _ = Conn::new(d, conn).serve();
            })?;
    }
}

/// [`serve`] over a Unix socket: the same stubs on kernel IPC
/// ([`UnixTransport`](super::UnixTransport) is the client's side).
///
/// # Examples
///
/// ```
/// #[shmpipe::service]
/// pub trait Ping { fn ping(&self) -> u8; }
/// struct P;
/// impl Ping for P { fn ping(&self) -> u8 { 7 } }
///
/// let path = std::env::temp_dir().join(format!("shmpipe-serve-unix-doc-{}.sock", std::process::id()));
/// let listener = std::os::unix::net::UnixListener::bind(&path)?;
/// std::thread::spawn(move || shmpipe::rpc::serve_unix(listener, || PingServer(P)));
/// let c = PingClient::with_transport(shmpipe::rpc::UnixTransport::connect(&path)?)?;
/// assert_eq!(c.ping(), 7);
/// # std::fs::remove_file(&path)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn serve_unix<D, F>(listener: UnixListener, make: F) -> io::Result<()>
where
    D: Dispatch + Send + 'static,
    F: Fn() -> D,
{
    loop {
        let (stream, _) = listener.accept()?;
        let d = make();
        let mut conn = Conn::unix(d, stream)?;
        std::thread::Builder::new()
            .name("shmpipe-rpc-unix".into())
            .spawn(move || {
                let _ = conn.serve();
            })?;
    }
}

/// A blocking accept for the thread-per-client servers; `None` after a
/// short back-off when out of descriptors (the listener had no spare to
/// turn the client away with), instead of ending the server.
pub(crate) fn accept_or_back_off(listener: &Listener) -> io::Result<Option<Connection>> {
    match listener.accept() {
        Ok(conn) => Ok(Some(conn)),
        Err(e) if out_of_fds(&e) => {
            std::thread::sleep(std::time::Duration::from_millis(10));
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// `EMFILE` or `ENFILE` from an accept.
pub(crate) fn out_of_fds(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}
