//! `bridge serve`: answers the connecting bridges' requests to open a
//! connection to the local service, one local connection per remote one,
//! within the [`BridgeLimits`](crate::BridgeLimits) of each peer.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use zenoh::query::Query;
use zenoh::Session;

use crate::config::{zenoh_config, Role};
use crate::limits::{Seat, Tally};
use crate::link::{self, log_end, Keys};
use crate::{Options, OPEN_TIMEOUT};

/// Makes the service listening at `socket` reachable as Zenoh key `key`,
/// until the session fails. Each connection a remote `connect` side
/// carries becomes one local connection to `socket`, made by this
/// process; the service decides (hello, interface, limits) as for any
/// local client.
///
/// # Errors
///
/// The configuration is refused (no mutual TLS, see [`Options`]), the
/// session cannot be opened, or `key` is not a Zenoh key.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> std::io::Result<()> {
/// let options = shmpipe_bridge::Options {
///     endpoints: vec!["quic/192.0.2.1:7447".into()],
///     tls: Some(shmpipe_bridge::Tls {
///         ca: "ca.pem".into(),
///         cert: "server.pem".into(),
///         key: "server-key.pem".into(),
///     }),
///     ..Default::default()
/// };
/// shmpipe_bridge::serve("/run/files.sock", "files", &options).await
/// # }
/// ```
pub async fn serve(socket: impl AsRef<Path>, key: &str, options: &Options) -> io::Result<()> {
    let config = zenoh_config(options, Role::Serve)?;
    let session = zenoh::open(config).await.map_err(crate::zerr)?;
    let open = session
        .declare_queryable(crate::open_key(key))
        .await
        .map_err(crate::zerr)?;
    let tally = Arc::new(Mutex::new(Tally::default()));
    let socket = socket.as_ref().to_path_buf();
    loop {
        let query = open.recv_async().await.map_err(crate::zerr)?;
        tokio::spawn(open_one(
            session.clone(),
            query,
            key.to_owned(),
            socket.clone(),
            options.clone(),
            tally.clone(),
        ));
    }
}

/// `PEER/N`: the asking session's id and its connection's number.
fn parse_open(query: &Query) -> Option<(String, u64)> {
    let text = query.payload()?.try_to_string().ok()?;
    let (peer, n) = text.split_once('/')?;
    let hex = !peer.is_empty() && peer.len() <= 32 && peer.bytes().all(|b| b.is_ascii_hexdigit());
    hex.then_some(())?;
    Some((peer.to_owned(), n.parse().ok()?))
}

async fn open_one(
    session: Session,
    query: Query,
    key: String,
    socket: PathBuf,
    options: Options,
    tally: Arc<Mutex<Tally>>,
) {
    let Some((peer, n)) = parse_open(&query) else {
        let _ = query.reply_err("a malformed open request").await;
        return;
    };
    let seat = match Seat::take(&tally, &options.limits, &peer) {
        Ok(s) => s,
        Err(why) => {
            let _ = query.reply_err(why).await;
            return;
        }
    };
    let local = {
        let socket = socket.clone();
        tokio::task::spawn_blocking(move || shmpipe_core::connect(socket)).await
    };
    let local = match local {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            let _ = query
                .reply_err(format!("the service at {} refused: {e}", socket.display()))
                .await;
            return;
        }
        Err(e) => {
            let _ = query.reply_err(format!("connecting: {e}")).await;
            return;
        }
    };
    let keys = Keys::new(&key, &peer, n);
    let wired = link::wire_up(
        &session,
        [&keys.up, &keys.client, &keys.server, &keys.down],
        &options.limits,
    )
    .await;
    let wired = match wired {
        Ok(w) => w,
        Err(e) => {
            let _ = query
                .reply_err(format!("declaring the connection: {e}"))
                .await;
            return;
        }
    };
    // The client's token must be there now: its side declared it before
    // asking, and our subscriber sees its removal from now on.
    let alive = match session
        .liveliness()
        .get(&keys.client)
        .timeout(OPEN_TIMEOUT)
        .await
    {
        Ok(replies) => matches!(replies.recv_async().await, Ok(r) if r.result().is_ok()),
        Err(_) => false,
    };
    if !alive {
        let _ = query.reply_err("the connection's token is gone").await;
        return;
    }
    if query.reply(query.key_expr().clone(), "ok").await.is_err() {
        return;
    }
    drop(query);
    let why = link::carry(local, wired).await;
    log_end(&peer, n, &why);
    drop(seat);
}
