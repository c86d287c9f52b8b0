//! Zenoh alone, with no bridge: what the link costs before the bridge
//! adds anything, for `shmpipe bench --filter bridge`. Two processes on
//! the bridges' session settings ([`Options`]; no access control): a
//! small put answered by a put, and [`PIECE`]-byte puts one way,
//! the bridge's own message size. Not part of the API.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zenoh::qos::CongestionControl;
use zenoh::Wait;

use crate::config::{zenoh_config, Role};
use crate::{frame, Options, OPEN_TIMEOUT};

/// The size of the one-way puts: the bridge's largest message.
///
/// # Examples
///
/// ```
/// assert_eq!(shmpipe_bridge::probe::PIECE, 60 << 10);
/// ```
pub const PIECE: usize = frame::PIECE;

/// The listening side, until its session fails: answers each put to
/// `KEY/ping` with its payload on `KEY/pong`, and while anyone
/// subscribes to `KEY/bulk`, puts pieces there as fast as Zenoh takes
/// them.
///
/// # Errors
///
/// The configuration is refused or the session cannot be opened.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> std::io::Result<()> {
/// let mut options = shmpipe_bridge::Options::default();
/// options.endpoints.push("tcp/127.0.0.1:7447".into());
/// options.insecure = true;
/// shmpipe_bridge::probe::answer("probe", &options).await
/// # }
/// ```
pub async fn answer(key: &str, options: &Options) -> io::Result<()> {
    let session = zenoh::open(zenoh_config(options, Role::Serve)?)
        .await
        .map_err(crate::zerr)?;
    let pong = publisher(&session, format!("{key}/pong")).await?;
    let _ping = session
        .declare_subscriber(format!("{key}/ping"))
        .callback(move |s| {
            let _ = pong.put(s.payload().clone()).wait();
        })
        .await
        .map_err(crate::zerr)?;
    let bulk = publisher(&session, format!("{key}/bulk")).await?;
    let piece = zenoh::bytes::ZBytes::from(vec![7u8; PIECE]);
    loop {
        let matching = bulk.matching_status().await.map_err(crate::zerr)?;
        if !matching.matching() {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        }
        for _ in 0..64 {
            bulk.put(piece.clone()).await.map_err(crate::zerr)?;
        }
        // Zenoh's puts complete at once (or block the thread): let the
        // runtime's other tasks in.
        tokio::task::yield_now().await;
    }
}

/// One round trip: a numbered put, and its answer within `limit` (a
/// late answer to an earlier one is skipped); false if none came.
async fn once(
    ping: &zenoh::pubsub::Publisher<'_>,
    pong: &zenoh::pubsub::Subscriber<zenoh::handlers::FifoChannelHandler<zenoh::sample::Sample>>,
    seq: &mut u64,
    limit: Duration,
) -> io::Result<bool> {
    *seq += 1;
    let mut msg = seq.to_le_bytes().to_vec();
    msg.resize(16, 0);
    ping.put(msg).await.map_err(crate::zerr)?;
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, pong.recv_async()).await {
            Err(_) => return Ok(false),
            Ok(Err(e)) => return Err(io::Error::other(e.to_string())),
            Ok(Ok(s)) if s.payload().to_bytes().get(..8) == Some(&seq.to_le_bytes()[..]) => {
                return Ok(true)
            }
            Ok(Ok(_)) => {}
        }
    }
}

/// A publisher as the bridge's frames go: blocking, express.
async fn publisher(
    session: &zenoh::Session,
    key: String,
) -> io::Result<zenoh::pubsub::Publisher<'static>> {
    session
        .declare_publisher(key)
        .congestion_control(CongestionControl::Block)
        .express(true)
        .await
        .map_err(crate::zerr)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The connecting side: the median of `runs` runs of about `budget`
/// each, of the round trip of a 16-byte put (ns) and of the one-way
/// throughput of pieces (MB/s), against an [`answer`]ing process.
///
/// # Errors
///
/// The session cannot be opened, or nothing answers within
/// [`OPEN_TIMEOUT`].
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> std::io::Result<()> {
/// let mut options = shmpipe_bridge::Options::default();
/// options.endpoints.push("tcp/127.0.0.1:7447".into());
/// options.insecure = true;
/// let (ns, mbs) = shmpipe_bridge::probe::measure("probe", &options, 3, std::time::Duration::from_millis(300)).await?;
/// println!("{:.0} us, {mbs:.0} MB/s", ns / 1e3);
/// # Ok(())
/// # }
/// ```
pub async fn measure(
    key: &str,
    options: &Options,
    runs: usize,
    budget: Duration,
) -> io::Result<(f64, f64)> {
    let session = zenoh::open(zenoh_config(options, Role::Connect)?)
        .await
        .map_err(crate::zerr)?;
    let ping = publisher(&session, format!("{key}/ping")).await?;
    let pong = session
        .declare_subscriber(format!("{key}/pong"))
        .await
        .map_err(crate::zerr)?;
    let mut seq = 0u64;
    let start = Instant::now();
    while !once(&ping, &pong, &mut seq, Duration::from_millis(100)).await? {
        if start.elapsed() > OPEN_TIMEOUT {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no Zenoh probe answered",
            ));
        }
    }
    let mut rtts = Vec::new();
    for _ in 0..runs {
        let (t, mut n) = (Instant::now(), 0u32);
        while t.elapsed() < budget || n < 10 {
            if !once(&ping, &pong, &mut seq, OPEN_TIMEOUT).await? {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "a probe went silent",
                ));
            }
            n += 1;
        }
        rtts.push(t.elapsed().as_nanos() as f64 / f64::from(n));
    }
    let bytes = Arc::new(AtomicU64::new(0));
    let b = bytes.clone();
    let bulk = session
        .declare_subscriber(format!("{key}/bulk"))
        .callback(move |s| {
            b.fetch_add(s.payload().len() as u64, Ordering::Relaxed);
        })
        .await
        .map_err(crate::zerr)?;
    let start = Instant::now();
    while bytes.load(Ordering::Relaxed) == 0 {
        if start.elapsed() > OPEN_TIMEOUT {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "no bulk came"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(budget / 4).await;
    let mut rates = Vec::new();
    for _ in 0..runs {
        let (t, before) = (Instant::now(), bytes.load(Ordering::Relaxed));
        tokio::time::sleep(budget).await;
        let moved = bytes.load(Ordering::Relaxed) - before;
        rates.push(moved as f64 / t.elapsed().as_secs_f64() / 1e6);
    }
    drop(bulk);
    Ok((median(rtts), median(rates)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zenoh_alone_is_measured_both_ways() {
        let port = std::net::UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .unwrap()
            .port();
        let options = Options {
            endpoints: vec![format!("tcp/127.0.0.1:{port}")],
            insecure: true,
            ..Options::default()
        };
        // The answering side on a runtime of its own, as in its own
        // process under the bench.
        let o = options.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            let _ = rt.block_on(answer("probe/test", &o));
        });
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            let m = rt.block_on(measure(
                "probe/test",
                &options,
                1,
                Duration::from_millis(50),
            ));
            let _ = tx.send(m);
        });
        let measured = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("measured within the watchdog");
        let (ns, mbs) = measured.expect("a probe answers");
        assert!(ns > 0.0 && ns.is_finite(), "{ns}");
        assert!(mbs > 0.0 && mbs.is_finite(), "{mbs}");
    }
}
