//! `bridge connect`: a local [`Listener`] whose connections are carried
//! to the service a remote `bridge serve` makes reachable.

use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use shmpipe_core::tokio::AsyncListener;
use shmpipe_core::{Connection, Listener};
use zenoh::pubsub::Publisher;
use zenoh::Session;

use crate::config::{own_name, zenoh_config, Role};
use crate::frame;
use crate::link::{self, log_end, Keys};
use crate::{Options, OPEN_TIMEOUT};

/// The capacity of the rings a connecting bridge's listener makes for
/// replies: 1 MiB, as the file server's (`shmpipe::fs::REPLY_RING`), so
/// that a file client keeps as much read ahead as it would locally.
pub const REPLY_RING: usize = 1 << 20;

/// How often a new connection asks again while no serving bridge answers.
const RETRY: std::time::Duration = std::time::Duration::from_millis(100);

/// Binds a [`Listener`] at `socket` and carries each of its connections
/// to the service a remote [`serve`](crate::serve) makes reachable as
/// `key`, until the session fails. A client whose connection cannot be
/// carried (no serving bridge answers, or it refuses) gets a `BUSY`
/// reply saying why, which its `connect` returns as `ConnectionRefused`.
///
/// # Errors
///
/// The configuration is refused (no mutual TLS, see [`Options`]), the
/// session cannot be opened, or `socket` cannot be bound.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> std::io::Result<()> {
/// let options = shmpipe_bridge::Options {
///     endpoints: vec!["quic/192.0.2.1:7447".into()],
///     tls: Some(shmpipe_bridge::Tls {
///         ca: "ca.pem".into(),
///         cert: "client.pem".into(),
///         key: "client-key.pem".into(),
///     }),
///     ..Default::default()
/// };
/// shmpipe_bridge::connect("files", "/run/remote-files.sock", &options).await
/// # }
/// ```
pub async fn connect(key: &str, socket: impl AsRef<Path>, options: &Options) -> io::Result<()> {
    let config = zenoh_config(options, Role::Connect)?;
    // A serving bridge that lists names (`--peer`) counts this side by the
    // name its certificate bears, and takes open requests under it.
    let open_key = match own_name(&config) {
        Some(name) => crate::named_open_key(key, &name),
        None => crate::open_key(key),
    };
    let mut listener = Listener::bind(socket)?;
    listener.set_options(shmpipe_core::Options::new().capacity(REPLY_RING).clone());
    let listener = AsyncListener::new(listener)?;
    let session = zenoh::open(config).await.map_err(crate::zerr)?;
    let up = Arc::new(
        link::up_publisher(&session, key)
            .await
            .map_err(crate::zerr)?,
    );
    let next = Arc::new(AtomicU64::new(0));
    loop {
        let conn = match listener.accept().await {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // A client that failed its handshake, or a passing shortage:
            // the listener goes on.
            Err(_) => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let n = next.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(carry_one(
            session.clone(),
            up.clone(),
            conn,
            key.to_owned(),
            open_key.clone(),
            n,
            options.clone(),
        ));
    }
}

async fn carry_one(
    session: Session,
    up: Arc<Publisher<'static>>,
    mut conn: Connection,
    key: String,
    open_key: String,
    n: u64,
    options: Options,
) {
    let peer = session.zid().to_string();
    // Under this side's name first; where that is not answered (a serving
    // bridge from before names, whose access control drops it, or one that
    // does not list this name) without one, which a serving bridge that
    // lists names refuses with its reason.
    let nameless = crate::open_key(&key);
    let mut asks = vec![open_key.as_str()];
    if open_key != nameless {
        asks.push(&nameless);
    }
    // A serving bridge not reached yet (starting, or its link being
    // made) answers nothing: ask again until OPEN_TIMEOUT.
    let deadline = tokio::time::Instant::now() + OPEN_TIMEOUT;
    let answer = 'asking: loop {
        for ask in &asks {
            let asked = session
                .get(*ask)
                .payload(peer.clone())
                .timeout(OPEN_TIMEOUT)
                .await;
            match asked {
                Ok(replies) => {
                    if let Ok(answer) = replies.recv_async().await {
                        break 'asking Some(answer);
                    }
                }
                Err(e) => return refuse(&mut conn, &format!("asking to open: {e}")),
            }
        }
        if tokio::time::Instant::now() >= deadline {
            break None;
        }
        tokio::time::sleep(RETRY).await;
    };
    let secret = match answer.map(|r| r.into_result()) {
        Some(Ok(sample)) => sample.payload().try_to_string().map(|s| s.into_owned()),
        Some(Err(e)) => {
            let why = e
                .payload()
                .try_to_string()
                .map(|s| s.into_owned())
                .unwrap_or_default();
            return refuse(&mut conn, &format!("the serving bridge refused: {why}"));
        }
        None => {
            return refuse(
                &mut conn,
                &format!(
                    "no `bridge serve` for key {key} answered {open_key} within {OPEN_TIMEOUT:?} \
                     (one that lists --peer names answers only the names it lists)"
                ),
            )
        }
    };
    let secret = match secret {
        Ok(s) if link::is_secret(&s) => s,
        _ => return refuse(&mut conn, "the serving bridge answered out of the format"),
    };
    let keys = Keys::new(&key, &secret);
    match link::wire_client(&session, &up, &keys, &options.limits).await {
        Ok(wired) => {
            let why = link::carry(conn, wired).await;
            log_end(&peer, n, &why);
        }
        Err(e) => refuse(&mut conn, &format!("declaring the connection: {e}")),
    }
}

/// Tells the local client why its connection is not carried.
fn refuse(conn: &mut Connection, why: &str) {
    conn.writer.set_nonblocking(true);
    let _ = conn.writer.write_all(&frame::busy(why));
    let _ = conn.writer.flush();
}
