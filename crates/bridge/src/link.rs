//! One carried connection, the same on both sides: the local end's frames
//! go out as Zenoh messages in order, the remote side's come in and are
//! written to the local end, each direction held to a window of bytes in
//! flight; the connection ends when either end hangs up, the peer goes
//! (the connecting side's liveliness token, the serving side's session),
//! or the peer breaks the rules. Connecting → serving frames are puts,
//! serving → connecting frames are replies to one query: neither is
//! routed to a third peer (see [`Keys`]).

use std::future::poll_fn;
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::Duration;

use shmpipe_core::tokio::{AsyncReader, AsyncWriter};
use shmpipe_core::Connection;
use tokio::sync::{mpsc, watch, Notify};
use zenoh::bytes::ZBytes;
use zenoh::key_expr::KeyExpr;
use zenoh::liveliness::LivelinessToken;
use zenoh::pubsub::Publisher;
use zenoh::qos::CongestionControl;
use zenoh::query::{ConsolidationMode, Query};
use zenoh::sample::{Sample, SampleKind};
use zenoh::Session;

use crate::frame::{self, PREFIX};
use crate::pieces::{poll_write_msg, read_piece, write_now};
use crate::BridgeLimits;

/// How long a side that ended a connection keeps its token after its END,
/// waiting for the peer to take it: the END travels on the data path, the
/// token's removal on Zenoh's control path, and the peer must see the END
/// (and the frames before it) first.
const LINGER: Duration = Duration::from_secs(2);

/// The Zenoh keys of one carried connection: `KEY/_conn/SECRET/...`.
///
/// SECRET is 128 random bits the serving bridge draws for the connection
/// and tells only the connecting bridge that asked (in its reply, which
/// Zenoh routes to the querier alone). No declaration any bridge makes
/// names it: the serving bridge declares only the wildcards of
/// [`wild`], and the connecting bridge declares its token and sends its
/// frames towards the serving bridge only, whose access control
/// ([`crate::config::confine`]) lets no remote peer subscribe, declare a
/// queryable or ask for tokens under `KEY`. So another peer can neither
/// read a connection (nothing of it is routed to it) nor write into one
/// (it would have to guess SECRET).
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    /// Frames from the connecting side (puts to the serving side).
    pub up: String,
    /// Frames from the serving side: replies to one long query of the
    /// connecting side, so they go to that querier and nowhere else.
    pub down: String,
    /// The connecting side's liveliness token.
    pub client: String,
}

impl Keys {
    pub(crate) fn new(key: &str, secret: &str) -> Keys {
        let base = format!("{key}/_conn/{secret}");
        Keys {
            up: format!("{base}/up"),
            down: format!("{base}/down"),
            client: format!("{base}/client"),
        }
    }
}

/// The wildcard of every connection's `leaf` (`up`, `down`, `client`)
/// under `key`: what the serving side declares, so that its declarations,
/// which go to every peer, name no connection's secret.
pub(crate) fn wild(key: &str, leaf: &str) -> String {
    format!("{key}/_conn/*/{leaf}")
}

/// The secret in `KEY/_conn/SECRET/leaf`, if `key_expr` is one.
pub(crate) fn secret_in<'k>(key_expr: &'k str, key: &str, leaf: &str) -> Option<&'k str> {
    let rest = key_expr.strip_prefix(key)?.strip_prefix("/_conn/")?;
    let secret = rest.strip_suffix(leaf)?.strip_suffix('/')?;
    is_secret(secret).then_some(secret)
}

/// 32 lower-case hexadecimal digits, as [`new_secret`] draws.
pub(crate) fn is_secret(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// 128 bits from the kernel's random source, in hexadecimal.
pub(crate) fn new_secret() -> io::Result<String> {
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// What the receiving side's queue holds, in arrival order.
enum Item {
    /// A FRAME or MORE message, its window charge, and how many of its
    /// bytes are written already (at least its kind byte).
    Frame(ZBytes, usize, usize),
    /// Enough was passed on to grant it back.
    Grant,
    End(String),
}

/// Where the remote side's messages arrive (from Zenoh's callbacks, which
/// must not block): frames and ENDs are queued in order, grants are
/// applied at once, and a peer past its window or out of the format ends
/// the connection.
pub(crate) struct Inbox {
    queue: mpsc::UnboundedSender<Item>,
    /// The local end, once the connection is carried: a message that
    /// finds nothing queued before it is written from Zenoh's callback,
    /// with no hop to the connection's task.
    local: Mutex<Option<AsyncWriter>>,
    /// FRAME and MORE messages queued and not yet wholly written.
    backlog: AtomicUsize,
    /// Window bytes queued.
    held: AtomicUsize,
    /// Window bytes passed on to the local end and not granted back yet.
    passed: AtomicUsize,
    window: usize,
    max_frame: u32,
    /// Bytes of the body of the frame being received still to come in
    /// MORE messages (the callbacks of one connection come in order).
    rest: AtomicUsize,
    /// Bytes we sent that the peer has not granted back.
    unacked: AtomicUsize,
    granted: Notify,
    /// Why the connection must end now, once set.
    broken: Mutex<Option<String>>,
    broke: watch::Sender<bool>,
    /// The peer's liveliness token went (serving side), or the serving
    /// side ended the query its frames come as replies to (connecting).
    peer_gone: AtomicBool,
    /// The peer's liveliness token was seen (serving side).
    seen: AtomicBool,
    seen_now: Notify,
}

/// The receiving half of an [`Inbox`].
pub(crate) struct Queue {
    rx: mpsc::UnboundedReceiver<Item>,
    broke: watch::Receiver<bool>,
}

impl Inbox {
    pub(crate) fn new(limits: &BridgeLimits) -> (Arc<Inbox>, Queue) {
        let (tx, rx) = mpsc::unbounded_channel();
        let (broke, broke_rx) = watch::channel(false);
        let inbox = Arc::new(Inbox {
            queue: tx,
            local: Mutex::new(None),
            backlog: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            passed: AtomicUsize::new(0),
            window: limits.max_window(),
            max_frame: limits.frame_limit(),
            rest: AtomicUsize::new(0),
            unacked: AtomicUsize::new(0),
            granted: Notify::new(),
            broken: Mutex::new(None),
            broke,
            peer_gone: AtomicBool::new(false),
            seen: AtomicBool::new(false),
            seen_now: Notify::new(),
        });
        (
            inbox,
            Queue {
                rx,
                broke: broke_rx,
            },
        )
    }

    /// Ends the connection now, saying why (the first reason stays).
    pub(crate) fn break_off(&self, why: &str) {
        let mut b = self.broken.lock().unwrap_or_else(PoisonError::into_inner);
        if b.is_none() {
            *b = Some(why.to_owned());
        }
        drop(b);
        self.broke.send_replace(true);
        self.granted.notify_waiters();
    }

    fn reason(&self) -> Option<String> {
        self.broken
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A message on the connection's incoming key.
    pub(crate) fn on_sample(&self, sample: Sample) {
        let payload = sample.payload();
        let mut r = payload.reader();
        let mut kind = [0u8; 1];
        if r.read_exact(&mut kind).is_err() {
            return self.break_off("the peer sent an empty message");
        }
        match kind[0] {
            frame::FRAME => {
                let mut prefix = [0u8; PREFIX];
                prefix[0] = kind[0];
                let checked = r
                    .read_exact(&mut prefix[1..])
                    .map_err(|_| "a short frame")
                    .and_then(|()| frame::frame_len(&prefix, self.max_frame));
                let rest = match checked {
                    Ok(len) if payload.len() <= PREFIX + len => PREFIX + len - payload.len(),
                    Ok(_) => return self.break_off("the peer sent a frame of the wrong length"),
                    Err(why) => return self.break_off(&format!("the peer sent {why}")),
                };
                if self.rest.swap(rest, Ordering::AcqRel) != 0 {
                    return self.break_off("the peer began a frame inside another");
                }
                self.pass_on(payload);
            }
            frame::MORE => {
                let n = payload.len() - 1;
                let rest = self.rest.load(Ordering::Acquire);
                if n == 0 || n > rest {
                    return self.break_off("the peer sent more than its frame holds");
                }
                self.rest.store(rest - n, Ordering::Release);
                self.pass_on(payload);
            }
            frame::ACK => {
                let mut n = [0u8; 8];
                if r.read_exact(&mut n).is_err() {
                    return self.break_off("the peer sent a short grant");
                }
                let n = u64::from_le_bytes(n) as usize;
                let granted = self
                    .unacked
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| u.checked_sub(n));
                if granted.is_err() {
                    return self.break_off("the peer granted more than was sent");
                }
                self.granted.notify_waiters();
            }
            frame::END => {
                let mut why = String::new();
                let _ = r.read_to_string(&mut why);
                let _ = self.queue.send(Item::End(why));
            }
            _ => self.break_off("the peer sent a message of an unknown kind"),
        }
    }

    /// Passes a FRAME or MORE message on to the local end: at once when
    /// nothing is queued before it and the end has room, else (or what
    /// did not fit) queued for the connection's task, within the window.
    fn pass_on(&self, payload: &ZBytes) {
        let charge = frame::charge(payload.len());
        if *self.broke.borrow() {
            return;
        }
        let mut done = 1;
        // Only this callback queues frames, so with none queued the
        // task writes none, and this write keeps the order. try_lock: the
        // task holds the end only for one attempt.
        if self.backlog.load(Ordering::Acquire) == 0 {
            if let Ok(mut local) = self.local.try_lock() {
                if let Some(w) = local.as_mut() {
                    let w = w.get_mut();
                    match write_now(w, payload, done) {
                        Ok(n) if n == payload.len() => {
                            if let Err(e) = w.flush() {
                                drop(local);
                                return self.break_off(&format!("writing its local end: {e}"));
                            }
                            drop(local);
                            return self.passed(charge);
                        }
                        Ok(n) => done = n,
                        Err(e) => {
                            drop(local);
                            return self.break_off(&format!("writing its local end: {e}"));
                        }
                    }
                }
            }
        }
        if self.held.fetch_add(charge, Ordering::AcqRel) + charge > self.window {
            return self.break_off("the peer sent past its window");
        }
        self.backlog.fetch_add(1, Ordering::AcqRel);
        let _ = self.queue.send(Item::Frame(payload.clone(), charge, done));
    }

    /// Counts `charge` window bytes passed on; past a quarter of the
    /// window, has the connection's task grant them back.
    fn passed(&self, charge: usize) {
        let before = self.passed.fetch_add(charge, Ordering::AcqRel);
        let quarter = self.window / 4;
        if before < quarter && before + charge >= quarter {
            let _ = self.queue.send(Item::Grant);
        }
    }

    /// A change of the peer's liveliness token.
    pub(crate) fn on_liveliness(&self, sample: Sample) {
        if sample.kind() == SampleKind::Delete {
            self.peer_went("the remote bridge or its network went away");
        } else {
            self.seen.store(true, Ordering::Release);
            self.seen_now.notify_waiters();
        }
    }

    /// The peer is gone: after the frames already here, which it sent
    /// before it went, the connection ends.
    pub(crate) fn peer_went(&self, why: &str) {
        if !self.peer_gone.swap(true, Ordering::AcqRel) {
            let _ = self.queue.send(Item::End(why.into()));
        }
        self.granted.notify_waiters();
    }

    /// Waits up to `limit` for the peer's liveliness token; false if it
    /// never came (the peer died, or never declared it).
    pub(crate) async fn wait_seen(&self, limit: Duration) -> bool {
        let seen = async {
            loop {
                let now = self.seen_now.notified();
                tokio::pin!(now);
                now.as_mut().enable();
                if self.seen.load(Ordering::Acquire) {
                    return;
                }
                now.await;
            }
        };
        tokio::time::timeout(limit, seen).await.is_ok()
    }

    /// Waits until `charge` more bytes fit in the peer's window, or the
    /// connection broke (false).
    async fn take_window(&self, charge: usize) -> bool {
        loop {
            let granted = self.granted.notified();
            tokio::pin!(granted);
            granted.as_mut().enable();
            if self.reason().is_some() || self.peer_gone.load(Ordering::Acquire) {
                return false;
            }
            let taken = self
                .unacked
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                    (u + charge <= self.window).then_some(u + charge)
                });
            if taken.is_ok() {
                return true;
            }
            granted.await;
        }
    }
}

/// Says on stderr why connection `peer/n` ended, unless a side simply
/// hung up.
pub(crate) fn log_end(peer: &str, n: impl std::fmt::Display, why: &str) {
    if !why.contains("hung up") {
        eprintln!("shmpipe bridge: connection {peer}/{n} ended: {why}");
    }
}

/// Where this side's messages go: the connecting side puts them to the
/// serving side's subscriber; the serving side replies to the connecting
/// side's query, which Zenoh routes back to that querier only.
pub(crate) enum Out {
    /// Puts to `key`. `matching` is the session's one publisher of
    /// every connection's `up` ([`up_publisher`]), which says when the
    /// serving side's subscriber is known.
    Put {
        session: Session,
        key: KeyExpr<'static>,
        matching: Arc<Publisher<'static>>,
    },
    Reply(Query),
}

impl Out {
    async fn put(&self, msg: impl Into<ZBytes>) -> zenoh::Result<()> {
        match self {
            Out::Put { session, key, .. } => {
                // Block, never drop: a frame lost would break the RPC stream.
                session
                    .put(key, msg)
                    .congestion_control(CongestionControl::Block)
                    .express(true)
                    .await
            }
            // Express: a call's frame goes at once rather than waiting to
            // fill a batch. Replies take the query's congestion control,
            // which the connecting side set to Block.
            Out::Reply(q) => q.reply(q.key_expr().clone(), msg).express(true).await,
        }
    }

    /// Waits until the peer's side is declared (connecting side), or the
    /// open timeout passes.
    async fn wait_matching(&self) -> Result<(), String> {
        let Out::Put { matching: out, .. } = self else {
            return Ok(());
        };
        // The peer declared its subscriber when it started, but over QUIC
        // Zenoh carries declarations and data on streams of their own,
        // so they may still be on their way: a frame sent now would reach
        // nobody.
        let deadline = tokio::time::Instant::now() + crate::OPEN_TIMEOUT;
        loop {
            match out.matching_status().await {
                Ok(m) if m.matching() => return Ok(()),
                Ok(_) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(1)).await
                }
                Ok(_) => return Err("the peer's subscriber never appeared".into()),
                Err(e) => return Err(format!("matching: {e}")),
            }
        }
    }
}

/// A connection's side, wired into the session while it is carried.
pub(crate) struct Wired {
    pub(crate) inbox: Arc<Inbox>,
    pub(crate) queue: Queue,
    pub(crate) out: Out,
    /// Declarations held as long as the connection (the token).
    pub(crate) parts: Option<LivelinessToken>,
}

/// How long the connecting side's query for the serving side's frames
/// lasts: as long as the connection, so in effect for ever (Zenoh ends
/// it sooner when the serving side's session goes).
const FOREVER: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Ends the connection when Zenoh drops the query's callback: the
/// serving side ended the query, or its session went.
struct Gone(Arc<Inbox>);

impl Drop for Gone {
    fn drop(&mut self) {
        self.0
            .peer_went("the serving bridge ended the connection, or its network went away");
    }
}

/// The connecting side of connection `keys`: its token, its publisher
/// of frames, and the query whose replies are the serving side's frames.
/// The connecting side's publisher of every connection's `up` under
/// `key`, declared once for the session and never dropped, only to learn
/// whether the serving side's subscriber is known; frames are plain puts.
///
/// Not a publisher per connection: in Zenoh's client mode (1.10) a
/// publisher's subscriber interest, dropped with an ended connection's
/// publisher, could take the serving side's subscriber out of the
/// session's routes while the next connection was starting, and its first
/// frame went nowhere: the client waited for its hello's reply for ever
/// (one run in three of the isolation test in client mode).
pub(crate) async fn up_publisher(
    session: &Session,
    key: &str,
) -> zenoh::Result<Publisher<'static>> {
    session.declare_publisher(wild(key, "up")).await
}

pub(crate) async fn wire_client(
    session: &Session,
    matching: &Arc<Publisher<'static>>,
    keys: &Keys,
    limits: &BridgeLimits,
) -> zenoh::Result<Wired> {
    let (inbox, queue) = Inbox::new(limits);
    let token = session
        .liveliness()
        .declare_token(keys.client.clone())
        .await?;
    let i = inbox.clone();
    let gone = Gone(inbox.clone());
    session
        .get(keys.down.clone())
        .congestion_control(CongestionControl::Block)
        // Every reply, in order: no consolidation by key.
        .consolidation(ConsolidationMode::None)
        .timeout(FOREVER)
        .callback(move |reply| {
            let _held = &gone;
            match reply.into_result() {
                Ok(sample) => i.on_sample(sample),
                Err(_) => i.break_off("the serving bridge answered with an error"),
            }
        })
        .await?;
    Ok(Wired {
        inbox,
        queue,
        out: Out::Put {
            session: session.clone(),
            key: KeyExpr::try_from(keys.up.clone())?,
            matching: matching.clone(),
        },
        parts: Some(token),
    })
}

/// Carries `local` over Zenoh until either side ends it; returns why it
/// ended, for the log.
pub(crate) async fn carry(local: Connection, wired: Wired) -> String {
    let Wired {
        inbox,
        queue,
        out,
        parts: _parts,
    } = wired;
    let (reader, writer) = local.split();
    let (reader, writer) = match (AsyncReader::new(reader), AsyncWriter::new(writer)) {
        (Ok(r), Ok(w)) => (r, w),
        (Err(e), _) | (_, Err(e)) => {
            let _ = out.put(frame::end("the bridge could not carry it")).await;
            return format!("registering the local end: {e}");
        }
    };
    let out = Arc::new(out);
    let (done_tx, done) = watch::channel(false);
    let sending = tokio::spawn(send_local(reader, out.clone(), inbox.clone(), done));
    *inbox.local.lock().unwrap_or_else(PoisonError::into_inner) = Some(writer);
    let received = receive_remote(out.clone(), inbox.clone(), queue).await;
    // The local end hangs up now, whoever holds the inbox.
    drop(
        inbox
            .local
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(),
    );
    done_tx.send_replace(true);
    let sent = sending
        .await
        .unwrap_or_else(|e| Err(format!("the sending task failed: {e}")));
    // Tell the peer, unless it told us or is gone: in order after the
    // last frame sent.
    let why = match (&received, sent) {
        (Ok(remote), _) => remote.clone(),
        (Err(local), _) if !local.is_empty() => local.clone(),
        (Err(_), Err(sending)) => sending,
        (Err(_), Ok(())) => inbox.reason().unwrap_or_default(),
    };
    if !inbox.peer_gone.load(Ordering::Acquire) && received.is_err() {
        let _ = out.put(frame::end(&why)).await;
        // Keep our side (the token, or the query unanswered) until the
        // peer's goes: it hangs up on END.
        let _ = tokio::time::timeout(LINGER, async {
            while !inbox.peer_gone.load(Ordering::Acquire) {
                inbox.granted.notified().await;
            }
        })
        .await;
    }
    why
}

/// Local end → Zenoh: frames in pieces, each within the peer's window.
async fn send_local(
    mut reader: AsyncReader,
    out: Arc<Out>,
    inbox: Arc<Inbox>,
    mut done: watch::Receiver<bool>,
) -> Result<(), String> {
    if let Err(why) = out.wait_matching().await {
        inbox.break_off(&why);
        return Err(why);
    }
    // What is left of the body of the frame being sent.
    let mut rest = 0usize;
    loop {
        let next = tokio::select! {
            f = read_piece(&mut reader, &mut rest, inbox.max_frame) => f,
            _ = done.wait_for(|d| *d) => return Ok(()),
        };
        let msg = match next {
            Ok(Some(m)) => m,
            Ok(None) => {
                inbox.break_off("its local end hung up");
                return Ok(());
            }
            Err(e) => {
                inbox.break_off(&format!("reading its local end: {e}"));
                return Err(e.to_string());
            }
        };
        if !inbox.take_window(frame::charge(msg.len())).await {
            return Ok(());
        }
        if let Err(e) = out.put(msg).await {
            inbox.break_off(&format!("sending: {e}"));
            return Err(e.to_string());
        }
    }
}

/// Zenoh → local end, in order; grants the window back as frames are
/// passed on. Ok(why) when the peer ended the connection, Err(why) when
/// this side did.
async fn receive_remote(
    out: Arc<Out>,
    inbox: Arc<Inbox>,
    mut queue: Queue,
) -> Result<String, String> {
    loop {
        // A broken connection ends now: what is still queued (a peer's
        // frames past its window, or for a local end that hung up) is
        // not passed on.
        let item = tokio::select! {
            biased;
            _ = queue.broke.wait_for(|b| *b) => None,
            i = queue.rx.recv() => i,
        };
        let Some(item) = item else {
            return Err(inbox.reason().unwrap_or_else(|| "the inbox closed".into()));
        };
        match item {
            Item::End(why) => {
                // What came before the END reaches the local end first.
                let _ = inbox.with_local(|w| w.flush());
                return Ok(if why.is_empty() {
                    "the remote end hung up".into()
                } else {
                    why
                });
            }
            Item::Frame(bytes, charge, mut done) => {
                let written = poll_fn(|cx| {
                    let mut local = inbox.local.lock().unwrap_or_else(PoisonError::into_inner);
                    match local.as_mut() {
                        Some(w) => poll_write_msg(w, cx, &bytes, &mut done),
                        None => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
                    }
                })
                .await;
                inbox.held.fetch_sub(charge, Ordering::AcqRel);
                // Publish at once unless more is queued (one wake for many).
                let flushed = match written {
                    Ok(()) if queue.rx.is_empty() => inbox.with_local(|w| w.flush()),
                    other => other,
                };
                inbox.backlog.fetch_sub(1, Ordering::AcqRel);
                if let Err(e) = flushed {
                    return Err(format!("writing its local end: {e}"));
                }
                inbox.passed(charge);
            }
            Item::Grant => {
                let n = inbox.passed.swap(0, Ordering::AcqRel);
                if let Err(e) = out.put(frame::ack(n as u64)).await {
                    return Err(format!("sending a grant: {e}"));
                }
            }
        }
    }
}

impl Inbox {
    /// `op` on the local end (BrokenPipe once it is gone).
    fn with_local(
        &self,
        op: impl FnOnce(&mut shmpipe_core::Writer) -> io::Result<()>,
    ) -> io::Result<()> {
        match self
            .local
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
        {
            Some(w) => op(w.get_mut()),
            None => Err(io::ErrorKind::BrokenPipe.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_connection_key_names_a_secret() {
        let s = new_secret().unwrap();
        assert!(is_secret(&s), "{s}");
        let k = Keys::new("a/b", &s);
        assert_eq!(secret_in(&k.up, "a/b", "up"), Some(s.as_str()));
        assert_eq!(secret_in(&k.client, "a/b", "client"), Some(s.as_str()));
        assert_eq!(secret_in(&k.up, "a/b", "down"), None, "another leaf");
        assert_eq!(secret_in(&k.up, "a", "up"), None, "another service");
        // What another peer can put or ask to: wildcards name nothing.
        assert_eq!(secret_in(&wild("a/b", "up"), "a/b", "up"), None);
        assert_eq!(secret_in("a/b/_conn/**/up", "a/b", "up"), None);
        assert_eq!(secret_in(&s.to_uppercase(), "a/b", "up"), None);
    }
}
