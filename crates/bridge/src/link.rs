//! One carried connection, the same on both sides: the local end's frames
//! go out as Zenoh messages in order, the remote side's come in and are
//! written to the local end, each direction held to a window of bytes in
//! flight; the connection ends when either end hangs up, the peer's
//! liveliness token goes, or the peer breaks the rules.

use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use shmpipe_core::tokio::{AsyncReader, AsyncWriter};
use shmpipe_core::Connection;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch, Notify};
use zenoh::bytes::ZBytes;
use zenoh::liveliness::LivelinessToken;
use zenoh::pubsub::{Publisher, Subscriber};
use zenoh::qos::CongestionControl;
use zenoh::sample::{Sample, SampleKind};
use zenoh::Session;

use crate::frame::{self, PREFIX};
use crate::BridgeLimits;

/// How long a side that ended a connection keeps its token after its END,
/// waiting for the peer to take it: the END travels on the data path, the
/// token's removal on Zenoh's control path, and the peer must see the END
/// (and the frames before it) first.
const LINGER: Duration = Duration::from_secs(2);

/// The Zenoh keys of connection `id` under the bridge's key.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    /// Frames from the connecting side.
    pub up: String,
    /// Frames from the serving side.
    pub down: String,
    /// The connecting side's liveliness token.
    pub client: String,
    /// The serving side's liveliness token.
    pub server: String,
}

impl Keys {
    pub(crate) fn new(key: &str, peer: &str, n: u64) -> Keys {
        let base = format!("{key}/_conn/{peer}/{n}");
        Keys {
            up: format!("{base}/up"),
            down: format!("{base}/down"),
            client: format!("{base}/client"),
            server: format!("{base}/server"),
        }
    }
}

/// What the receiving side's queue holds, in arrival order.
enum Item {
    Frame(ZBytes, usize),
    End(String),
}

/// Where the remote side's messages arrive (from Zenoh's callbacks, which
/// must not block): frames and ENDs are queued in order, grants are
/// applied at once, and a peer past its window or out of the format ends
/// the connection.
pub(crate) struct Inbox {
    queue: mpsc::UnboundedSender<Item>,
    held: AtomicUsize,
    window: usize,
    max_frame: u32,
    /// Bytes we sent that the peer has not granted back.
    unacked: AtomicUsize,
    granted: Notify,
    /// Why the connection must end now, once set.
    broken: Mutex<Option<String>>,
    broke: watch::Sender<bool>,
    /// The peer's liveliness token went.
    peer_gone: AtomicBool,
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
            held: AtomicUsize::new(0),
            window: limits.max_window(),
            max_frame: limits.frame_limit(),
            unacked: AtomicUsize::new(0),
            granted: Notify::new(),
            broken: Mutex::new(None),
            broke,
            peer_gone: AtomicBool::new(false),
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
                let len = match checked {
                    Ok(len) if PREFIX + len == payload.len() => len,
                    Ok(_) => return self.break_off("the peer sent a frame of the wrong length"),
                    Err(why) => return self.break_off(&format!("the peer sent {why}")),
                };
                let charge = frame::charge(PREFIX + len);
                if self.held.fetch_add(charge, Ordering::AcqRel) + charge > self.window {
                    return self.break_off("the peer sent past its window");
                }
                let _ = self.queue.send(Item::Frame(payload.clone(), charge));
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

    /// A change of the peer's liveliness token.
    pub(crate) fn on_liveliness(&self, sample: Sample) {
        if sample.kind() == SampleKind::Delete {
            self.peer_gone.store(true, Ordering::Release);
            // After the frames already here: they were sent before it went.
            let _ = self.queue.send(Item::End(
                "the remote bridge or its network went away".into(),
            ));
            self.granted.notify_waiters();
        }
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
pub(crate) fn log_end(peer: &str, n: u64, why: &str) {
    if !why.contains("hung up") {
        eprintln!("shmpipe bridge: connection {peer}/{n} ended: {why}");
    }
}

/// A connection's declarations in the session, held while it is carried.
pub(crate) struct Wired {
    pub(crate) inbox: Arc<Inbox>,
    pub(crate) queue: Queue,
    pub(crate) out: Publisher<'static>,
    parts: (Subscriber<()>, LivelinessToken, Subscriber<()>),
}

/// Declares a connection's side: `[incoming, peer's token, own token,
/// outgoing]`.
pub(crate) async fn wire_up(
    session: &Session,
    [incoming, peer_token, own_token, outgoing]: [&String; 4],
    limits: &BridgeLimits,
) -> zenoh::Result<Wired> {
    let (inbox, queue) = Inbox::new(limits);
    let i = inbox.clone();
    let data = session
        .declare_subscriber(incoming.clone())
        .callback(move |s| i.on_sample(s))
        .await?;
    let i = inbox.clone();
    let watch = session
        .liveliness()
        .declare_subscriber(peer_token.clone())
        .callback(move |s| i.on_liveliness(s))
        .await?;
    let token = session
        .liveliness()
        .declare_token(own_token.clone())
        .await?;
    // Block, never drop: a frame lost would break the RPC stream. Express:
    // a call's frame goes at once rather than waiting to fill a batch.
    let out = session
        .declare_publisher(outgoing.clone())
        .congestion_control(CongestionControl::Block)
        .express(true)
        .await?;
    Ok(Wired {
        inbox,
        queue,
        out,
        parts: (data, token, watch),
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
    let receiving = receive_remote(writer, out.clone(), inbox.clone(), queue);
    let received = receiving.await;
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
        // Keep the token until the peer's goes (it hangs up on END).
        let _ = tokio::time::timeout(LINGER, async {
            while !inbox.peer_gone.load(Ordering::Acquire) {
                inbox.granted.notified().await;
            }
        })
        .await;
    }
    why
}

/// Local end → Zenoh: whole frames, within the peer's window.
async fn send_local(
    mut reader: AsyncReader,
    out: Arc<Publisher<'static>>,
    inbox: Arc<Inbox>,
    mut done: watch::Receiver<bool>,
) -> Result<(), String> {
    // The peer declared its subscriber before the open's answer, but over
    // QUIC Zenoh carries declarations and data on streams of their own,
    // so the answer can come first: a frame sent then would reach nobody.
    let deadline = tokio::time::Instant::now() + crate::OPEN_TIMEOUT;
    loop {
        match out.matching_status().await {
            Ok(m) if m.matching() => break,
            Ok(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(1)).await
            }
            Ok(_) => {
                inbox.break_off("the peer's subscriber never appeared");
                return Err("the peer's subscriber never appeared".into());
            }
            Err(e) => {
                inbox.break_off(&format!("matching: {e}"));
                return Err(e.to_string());
            }
        }
    }
    loop {
        let next = tokio::select! {
            f = read_frame(&mut reader, inbox.max_frame) => f,
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
    mut writer: AsyncWriter,
    out: Arc<Publisher<'static>>,
    inbox: Arc<Inbox>,
    mut queue: Queue,
) -> Result<String, String> {
    let mut passed = 0usize;
    loop {
        let item = tokio::select! {
            biased;
            i = queue.rx.recv() => i,
            _ = queue.broke.wait_for(|b| *b) => None,
        };
        let Some(item) = item else {
            return Err(inbox.reason().unwrap_or_else(|| "the inbox closed".into()));
        };
        match item {
            Item::End(why) => {
                // What came before the END reaches the local end first.
                let _ = writer.flush().await;
                return Ok(if why.is_empty() {
                    "the remote end hung up".into()
                } else {
                    why
                });
            }
            Item::Frame(bytes, charge) => {
                let written = write_frame(&mut writer, &bytes).await;
                inbox.held.fetch_sub(charge, Ordering::AcqRel);
                // Publish at once unless more is queued (one wake for many).
                let flushed = match written {
                    Ok(()) if queue.rx.is_empty() => writer.flush().await,
                    other => other,
                };
                if let Err(e) = flushed {
                    return Err(format!("writing its local end: {e}"));
                }
                passed += charge;
                if passed >= inbox.window / 4 {
                    if let Err(e) = out.put(frame::ack(passed as u64)).await {
                        return Err(format!("sending a grant: {e}"));
                    }
                    passed = 0;
                }
            }
        }
    }
}

/// Writes a FRAME message's RPC frame (all but its kind byte).
async fn write_frame(writer: &mut AsyncWriter, msg: &ZBytes) -> io::Result<()> {
    let mut skip = 1;
    for slice in msg.slices() {
        let s = &slice[skip.min(slice.len())..];
        skip -= skip.min(slice.len());
        writer.write_all(s).await?;
    }
    Ok(())
}

/// The next whole RPC frame from the local end as a FRAME message, None
/// at a clean hang-up between frames.
pub(crate) async fn read_frame(
    reader: &mut AsyncReader,
    max_frame: u32,
) -> io::Result<Option<Vec<u8>>> {
    let mut prefix = [0u8; PREFIX];
    prefix[0] = frame::FRAME;
    match reader.read(&mut prefix[1..]).await? {
        0 => return Ok(None),
        n if n < PREFIX - 1 => reader.read_exact(&mut prefix[1 + n..]).await.map(drop)?,
        _ => {}
    }
    let len = frame::frame_len(&prefix, max_frame)
        .map_err(|why| io::Error::new(io::ErrorKind::InvalidData, why))?;
    let mut msg = Vec::with_capacity(PREFIX + len);
    msg.extend_from_slice(&prefix);
    msg.resize(PREFIX + len, 0);
    reader.read_exact(&mut msg[PREFIX..]).await?;
    Ok(Some(msg))
}
