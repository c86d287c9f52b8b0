//! The local end's side of a carried connection: its frames read in
//! pieces that fit one Zenoh batch ([`frame::PIECE`]), and the remote
//! side's pieces written to it, at once where it has room.

use std::io::{self, Write};
use std::pin::Pin;
use std::task::{Context, Poll};

use shmpipe_core::tokio::{AsyncReader, AsyncWriter};
use tokio::io::{AsyncReadExt, AsyncWrite};
use zenoh::bytes::ZBytes;

use crate::frame::{self, PREFIX};

/// Writes `msg` from byte `done` on without waiting; how far it got
/// before the end was full.
pub(crate) fn write_now(
    w: &mut shmpipe_core::Writer,
    msg: &ZBytes,
    mut done: usize,
) -> io::Result<usize> {
    let mut start = 0;
    for slice in msg.slices() {
        let end = start + slice.len();
        while done < end {
            match w.write(&slice[done - start..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(done),
                Err(e) => return Err(e),
            }
        }
        start = end;
    }
    Ok(done)
}

/// Writes `msg` from byte `done` on, waiting for room (a FRAME or MORE
/// message's bytes of an RPC frame: all but its kind byte, which `done`
/// starts past).
pub(crate) fn poll_write_msg(
    w: &mut AsyncWriter,
    cx: &mut Context<'_>,
    msg: &ZBytes,
    done: &mut usize,
) -> Poll<io::Result<()>> {
    let mut start = 0;
    for slice in msg.slices() {
        let end = start + slice.len();
        while *done < end {
            match Pin::new(&mut *w).poll_write(cx, &slice[*done - start..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => *done += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        start = end;
    }
    Poll::Ready(Ok(()))
}

/// The next piece of the local end's frames, at most [`frame::PIECE`]
/// bytes: a FRAME message when `rest` (what is left of the body of the
/// frame being sent) is 0, else a MORE message. None at a clean hang-up
/// between frames.
pub(crate) async fn read_piece(
    reader: &mut AsyncReader,
    rest: &mut usize,
    max_frame: u32,
) -> io::Result<Option<Vec<u8>>> {
    if *rest == 0 {
        let Some(prefix) = read_prefix(reader, max_frame).await? else {
            return Ok(None);
        };
        let len = frame_body(&prefix, max_frame)?;
        let first = len.min(frame::PIECE - PREFIX);
        let mut msg = Vec::with_capacity(PREFIX + first);
        msg.extend_from_slice(&prefix);
        msg.resize(PREFIX + first, 0);
        reader.read_exact(&mut msg[PREFIX..]).await?;
        *rest = len - first;
        return Ok(Some(msg));
    }
    let n = (*rest).min(frame::PIECE - 1);
    let mut msg = vec![0u8; 1 + n];
    msg[0] = frame::MORE;
    reader.read_exact(&mut msg[1..]).await?;
    *rest -= n;
    Ok(Some(msg))
}

/// A FRAME message's prefix from the local end, None at a clean hang-up
/// between frames.
async fn read_prefix(reader: &mut AsyncReader, max_frame: u32) -> io::Result<Option<[u8; PREFIX]>> {
    let mut prefix = [0u8; PREFIX];
    prefix[0] = frame::FRAME;
    match reader.read(&mut prefix[1..]).await? {
        0 => return Ok(None),
        n if n < PREFIX - 1 => reader.read_exact(&mut prefix[1 + n..]).await.map(drop)?,
        _ => {}
    }
    frame_body(&prefix, max_frame)?;
    Ok(Some(prefix))
}

fn frame_body(prefix: &[u8; PREFIX], max_frame: u32) -> io::Result<usize> {
    frame::frame_len(prefix, max_frame)
        .map_err(|why| io::Error::new(io::ErrorKind::InvalidData, why))
}

/// The next whole RPC frame from the local end as a FRAME message, None
/// at a clean hang-up between frames.
pub(crate) async fn read_frame(
    reader: &mut AsyncReader,
    max_frame: u32,
) -> io::Result<Option<Vec<u8>>> {
    let Some(prefix) = read_prefix(reader, max_frame).await? else {
        return Ok(None);
    };
    let len = frame_body(&prefix, max_frame)?;
    let mut msg = Vec::with_capacity(PREFIX + len);
    msg.extend_from_slice(&prefix);
    msg.resize(PREFIX + len, 0);
    reader.read_exact(&mut msg[PREFIX..]).await?;
    Ok(Some(msg))
}
