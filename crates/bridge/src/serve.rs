//! `bridge serve`: answers the connecting bridges' requests to open a
//! connection to the local service, one local connection per remote one,
//! within the [`BridgeLimits`](crate::BridgeLimits) of each peer.
//!
//! Opening takes two steps. A connecting bridge asks `KEY/_open/NAME`
//! (NAME: its certificate's common name; `KEY/_open` if it has none); the
//! serving bridge takes a seat, connects to the local service, draws the
//! connection's secret and replies with it (to that querier alone). The
//! connecting bridge then declares its token under the secret, puts its
//! frames to `KEY/_conn/SECRET/up` and asks `KEY/_conn/SECRET/down`, whose
//! replies carry the serving side's frames for the connection's life. The
//! serving side's subscriber and queryables are wildcards over every
//! secret, so that what it declares (which every peer sees) names none.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use shmpipe_core::Connection;
use zenoh::query::Query;
use zenoh::sample::Sample;

use crate::config::{confine, zenoh_config, Role};
use crate::limits::{Seat, Tally};
use crate::link::{self, log_end, secret_in, wild, Inbox, Out, Queue, Wired};
use crate::{Options, OPEN_TIMEOUT};

/// A connection opened and not yet carried: what its `down` query takes.
struct Pending {
    local: Connection,
    queue: Queue,
    seat: Seat,
    peer: String,
}

/// A connection by its secret: the inbox the wildcard subscriber hands
/// its frames and tokens to, and, until its `down` query comes, the rest.
type Table = HashMap<String, (Arc<Inbox>, Option<Pending>)>;

/// The connections of this bridge.
#[derive(Default)]
struct Conns(Mutex<Table>);

impl Conns {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn inbox(&self, secret: &str) -> Option<Arc<Inbox>> {
        self.lock().get(secret).map(|(i, _)| i.clone())
    }
}

/// Makes the service listening at `socket` reachable as Zenoh key `key`,
/// until the session fails. Each connection a remote `connect` side
/// carries becomes one local connection to `socket`, made by this
/// process; the service decides (hello, interface, limits) as for any
/// local client. A remote peer reaches only the connections it opened:
/// the session's access control lets no remote peer subscribe or declare
/// anything under `key`, and each connection's keys hold a secret only
/// its peer was told.
///
/// # Errors
///
/// The configuration is refused (no mutual TLS, see [`Options`]), the
/// session cannot be opened, or `key` is not a Zenoh key without
/// wildcards.
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
    let mut config = zenoh_config(options, Role::Serve)?;
    confine(&mut config, key, &options.peers)?;
    let session = zenoh::open(config).await.map_err(crate::zerr)?;
    let conns = Arc::new(Conns::default());
    // Named first: a connecting bridge asks without its name only where
    // its named request got no answer, and declarations reach it in
    // order, so a listed peer is never refused for asking too early.
    let open_named = session
        .declare_queryable(crate::named_open_key(key, "*"))
        .await
        .map_err(crate::zerr)?;
    let open = session
        .declare_queryable(crate::open_key(key))
        .await
        .map_err(crate::zerr)?;
    let down = session
        .declare_queryable(wild(key, "down"))
        .await
        .map_err(crate::zerr)?;
    let (c, k) = (conns.clone(), key.to_owned());
    let _up = session
        .declare_subscriber(wild(key, "up"))
        .callback(move |s: Sample| {
            // A secret no connection has (a guess) reaches nothing.
            if let Some(inbox) = secret_in(s.key_expr().as_str(), &k, "up").and_then(|x| c.inbox(x))
            {
                inbox.on_sample(s);
            }
        })
        .await
        .map_err(crate::zerr)?;
    let (c, k) = (conns.clone(), key.to_owned());
    let _tokens = session
        .liveliness()
        .declare_subscriber(wild(key, "client"))
        .callback(move |s: Sample| {
            let inbox = secret_in(s.key_expr().as_str(), &k, "client").and_then(|x| c.inbox(x));
            if let Some(inbox) = inbox {
                inbox.on_liveliness(s);
            }
        })
        .await
        .map_err(crate::zerr)?;
    let tally = Arc::new(Mutex::new(Tally::default()));
    let socket = socket.as_ref().to_path_buf();
    loop {
        tokio::select! {
            q = open.recv_async() => {
                let q = q.map_err(crate::zerr)?;
                tokio::spawn(open_one(q, key.to_owned(), socket.clone(), options.clone(), tally.clone(), conns.clone()));
            }
            q = open_named.recv_async() => {
                let q = q.map_err(crate::zerr)?;
                tokio::spawn(open_one(q, key.to_owned(), socket.clone(), options.clone(), tally.clone(), conns.clone()));
            }
            q = down.recv_async() => {
                let q = q.map_err(crate::zerr)?;
                tokio::spawn(carry_one(q, key.to_owned(), conns.clone()));
            }
        }
    }
}

/// Who asks to open, as the tally counts peers: with names listed
/// (`--peer`), the certificate name in the key, which access control let
/// through only from a link that proved it; without, the session id the
/// peer sends.
fn parse_open(query: &Query, key: &str, peers: &[String]) -> Result<String, String> {
    let rest = query.key_expr().as_str().strip_prefix(key);
    let name = rest.and_then(|r| r.strip_prefix("/_open/"));
    if !peers.is_empty() {
        return match name {
            Some(n) if peers.iter().any(|p| p == n) => Ok(n.to_owned()),
            _ => Err("this bridge admits peers by certificate name (--peer), \
                      and the request names none it lists"
                .to_owned()),
        };
    }
    let peer = query.payload().and_then(|p| p.try_to_string().ok());
    let peer = peer.as_deref().unwrap_or_default();
    let hex = !peer.is_empty() && peer.len() <= 32 && peer.bytes().all(|b| b.is_ascii_hexdigit());
    hex.then(|| peer.to_owned())
        .ok_or_else(|| "a malformed open request".to_owned())
}

async fn open_one(
    query: Query,
    key: String,
    socket: PathBuf,
    options: Options,
    tally: Arc<Mutex<Tally>>,
    conns: Arc<Conns>,
) {
    let peer = match parse_open(&query, &key, &options.peers) {
        Ok(p) => p,
        Err(why) => {
            let _ = query.reply_err(why).await;
            return;
        }
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
    let secret = match link::new_secret() {
        Ok(s) => s,
        Err(e) => {
            let _ = query.reply_err(format!("drawing a secret: {e}")).await;
            return;
        }
    };
    let (inbox, queue) = Inbox::new(&options.limits);
    let pending = Pending {
        local,
        queue,
        seat,
        peer,
    };
    conns.lock().insert(secret.clone(), (inbox, Some(pending)));
    // A peer that never asks for its frames gives its seat back.
    let (c, s) = (conns.clone(), secret.clone());
    tokio::spawn(async move {
        tokio::time::sleep(OPEN_TIMEOUT).await;
        let mut map = c.lock();
        if matches!(map.get(&s), Some((_, Some(_)))) {
            map.remove(&s);
        }
    });
    if query
        .reply(query.key_expr().clone(), secret.clone())
        .await
        .is_err()
    {
        conns.lock().remove(&secret);
    }
}

/// The `down` query of an opened connection: carries it, replying with
/// the local side's frames, until either side ends it.
async fn carry_one(query: Query, key: String, conns: Arc<Conns>) {
    let Some(secret) = secret_in(query.key_expr().as_str(), &key, "down").map(str::to_owned) else {
        let _ = query.reply_err("not a connection's key").await;
        return;
    };
    let taken = {
        let mut map = conns.lock();
        map.get_mut(&secret)
            .and_then(|(inbox, p)| Some((inbox.clone(), p.take()?)))
    };
    let Some((inbox, pending)) = taken else {
        let _ = query.reply_err("no such connection").await;
        return;
    };
    let Pending {
        local,
        queue,
        seat,
        peer,
    } = pending;
    // Its token tells when the peer goes; without it the connection
    // could outlive its peer.
    let why = if inbox.wait_seen(OPEN_TIMEOUT).await {
        let wired = Wired {
            inbox,
            queue,
            out: Out::Reply(query),
            parts: None,
        };
        link::carry(local, wired).await
    } else {
        let _ = query.reply_err("the connection's token never came").await;
        "the connection's token never came".into()
    };
    conns.lock().remove(&secret);
    log_end(&peer, &secret[..8], &why);
    drop(seat);
}
