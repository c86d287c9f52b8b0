//! `shmpipe-tokio` and `tokio-unix`, contestants of `roundtrip-8B`: a
//! tokio current-thread runtime in each process, the parent timing `n`
//! round trips of an 8-byte message (after one untimed), the child
//! echoing. `shmpipe-tokio` goes through `shmpipe::tokio`'s `AsyncReader`
//! and `AsyncWriter` (two byte pipes), `tokio-unix` through a
//! `tokio::net::UnixStream` pair; both with tokio's `write_all` and
//! `read_exact`.

use std::io;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::check::check_failed;
use crate::job::{Mechanism, Placement};
use crate::sys;

fn runtime() -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
}

/// Echoes `n + 1` messages (the child keeps copies of the parent's ends
/// after `fork`, so it would see no EOF).
async fn echo(
    mut r: impl AsyncRead + Unpin,
    mut w: impl AsyncWrite + Unpin,
    n: u64,
) -> io::Result<()> {
    let mut b = [0u8; 8];
    for _ in 0..=n {
        r.read_exact(&mut b).await?;
        w.write_all(&b).await?;
    }
    Ok(())
}

async fn timed(
    mut r: impl AsyncRead + Unpin,
    mut w: impl AsyncWrite + Unpin,
    n: u64,
) -> io::Result<Duration> {
    let mut b = [0u8; 8];
    let mut start = Instant::now();
    for i in 0..=n {
        if i == 1 {
            start = Instant::now();
        }
        w.write_all(&(i + 1).to_le_bytes()).await?;
        r.read_exact(&mut b).await?;
        if u64::from_le_bytes(b) != i + 1 {
            return Err(check_failed(format!("round trip {i} came back as {b:?}")));
        }
    }
    Ok(start.elapsed())
}

/// Runs `roundtrip-8B` once for a tokio contestant.
pub fn run(mechanism: Mechanism, placement: Placement, n: u64) -> io::Result<Duration> {
    sys::pin(placement.cpu(0))?;
    let cpu = placement.cpu(1);
    let deadline = || Instant::now() + Duration::from_secs(10);
    match mechanism {
        Mechanism::ShmpipeTokio => {
            let (there_r, there_w) = shmpipe::pipe()?;
            let (back_r, back_w) = shmpipe::pipe()?;
            let (mut child, (back_r, there_w)) = sys::spawn_apart((back_r, there_w), || {
                sys::pin(cpu)?;
                runtime()?.block_on(async {
                    use shmpipe::tokio::{AsyncReader, AsyncWriter};
                    echo(AsyncReader::new(there_r)?, AsyncWriter::new(back_w)?, n).await
                })
            })?;
            let t = runtime()?.block_on(async {
                use shmpipe::tokio::{AsyncReader, AsyncWriter};
                timed(AsyncReader::new(back_r)?, AsyncWriter::new(there_w)?, n).await
            })?;
            child.wait(deadline())?;
            Ok(t)
        }
        Mechanism::TokioUnix => {
            let (a, b) = std::os::unix::net::UnixStream::pair()?;
            a.set_nonblocking(true)?;
            b.set_nonblocking(true)?;
            let mut child = sys::spawn(|| {
                sys::pin(cpu)?;
                runtime()?.block_on(async {
                    let s = tokio::net::UnixStream::from_std(b.try_clone()?)?;
                    let (r, w) = s.into_split();
                    echo(r, w, n).await
                })
            })?;
            drop(b);
            let t = runtime()?.block_on(async {
                let s = tokio::net::UnixStream::from_std(a)?;
                let (r, w) = s.into_split();
                timed(r, w, n).await
            })?;
            child.wait(deadline())?;
            Ok(t)
        }
        _ => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "not a tokio contestant",
        )),
    }
}
